"""A throwaway BigQuery emulator on 127.0.0.1 for integration tests.

`BQEmulator` runs bqemulator (PyPI; DuckDB + SQLGlot; REST for datasets, tables, jobs
and tabledata, gRPC for the Storage Write API) from its own virtualenv
``.services/bqemulator`` (``install_bigquery.sh``), with REST and gRPC on free ports,
through ``bqemulator_launch.py`` (two offline patches, documented there). In memory by
default; ``persistent=True`` keeps tables, rows and jobs in a DuckDB file in its folder,
so that :meth:`BQEmulator.crash` (SIGKILL, then a start on the same ports) brings back
every committed row. Its write streams are always held in memory: a crash loses the
PENDING streams not yet committed (BigQuery keeps them). What differs from BigQuery:
tests/services/README.md.

Manual use: ``python tests/services/bigquery_emulator.py`` starts one and keeps it running.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __package__:
    from .common import ProcessService, free_port, run_install_script, serve_until_interrupted
else:  # run as a script
    from common import (  # type: ignore[no-redef,import-not-found]
        ProcessService,
        free_port,
        run_install_script,
        serve_until_interrupted,
    )

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PREFIX = ROOT / ".services" / "bqemulator"
PROJECT = "quixsinks-test"


class BQEmulator(ProcessService):
    """bqemulator on 127.0.0.1: REST at ``api_endpoint``, gRPC at ``grpc_endpoint``."""

    name = "bqemulator"
    probe = f"/bigquery/v2/projects/{PROJECT}/datasets"

    def __init__(self, start_timeout: float = 60.0, *, persistent: bool = False) -> None:
        super().__init__(start_timeout)
        self.grpc_port = 0
        self.persistent = persistent
        self._same_ports = False

    def _install(self) -> Path:
        python = PREFIX / "bin" / "python"
        run_install_script(
            HERE / "install_bigquery.sh", PREFIX / "bin" / "bqemulator", "bqemulator"
        )
        return python

    def _command(self, installed: Any) -> list[str]:
        if not self._same_ports:
            self.grpc_port = free_port(self.host)
        storage = ["--data-dir", str(self._tmp / "data")] if self.persistent else ["--ephemeral"]
        return [
            str(installed),
            str(HERE / "bqemulator_launch.py"),
            "start",
            "--rest-host",
            self.host,
            "--rest-port",
            str(self.port),
            "--grpc-host",
            self.host,
            "--grpc-port",
            str(self.grpc_port),
            *storage,
            "--project",
            PROJECT,
            "--log-level",
            "warning",
        ]

    def crash(self) -> None:
        """SIGKILL the emulator this object started and start it again on the same ports,
        on the same DuckDB file (``persistent=True`` only: in memory, a crash would lose
        everything, committed or not)."""
        if not self.persistent:
            raise RuntimeError("an in-memory bqemulator cannot crash and keep its data")
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        self._same_ports = True
        try:
            self._spawn(self._install())
        finally:
            self._same_ports = False
        if not self._wait_ready():
            raise RuntimeError(f"bqemulator did not come back\n{self._log_tail()}")

    @property
    def api_endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def options(self) -> dict[str, str]:
        """Sink options reaching this emulator (add dataset_id and table_name)."""
        return {
            "project_id": PROJECT,
            "api_endpoint": self.api_endpoint,
            "grpc_endpoint": self.grpc_endpoint,
        }

    def client(self) -> Any:
        """A google-cloud-bigquery client of this emulator (anonymous credentials)."""
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import bigquery

        return bigquery.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options=ClientOptions(api_endpoint=self.api_endpoint),
        )


if __name__ == "__main__":
    serve_until_interrupted(
        BQEmulator(),
        lambda s: print(
            f"rest:  {s.api_endpoint}\ngrpc:  {s.grpc_endpoint}\npython: {sys.executable}"
        ),
    )
