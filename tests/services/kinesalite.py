"""A throwaway kinesalite (Kinesis implementation, from npm) on 127.0.0.1 for integration tests.

`KinesaliteServer` runs kinesalite in memory on a free port. Its CLI has no host flag, so
the launcher is a ``node -e`` one-liner that calls kinesalite's ``createServer()`` and
listens on 127.0.0.1 only. Streams are created at once (``createStreamMs: 0``). Install it
with ``bash tests/services/install_kinesis.sh``; the launcher runs that script itself when
kinesalite is missing. kinesalite checks no credentials: any key id and secret work.

Manual use: ``python tests/services/kinesalite.py`` starts a server, prints its endpoint
and keeps it running until Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__:
    from .common import Service, free_port, serve_until_interrupted
else:  # run as a script: python tests/services/kinesalite.py
    from common import (  # type: ignore[no-redef,import-not-found]
        Service,
        free_port,
        serve_until_interrupted,
    )

REPO = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO / "tests" / "services" / "install_kinesis.sh"
KINESALITE_DIR = REPO / ".services/kinesalite/node_modules/kinesalite"

REGION = "us-east-1"
#: kinesalite checks no credentials; botocore only needs some
ACCESS_KEY_ID = "kinesalite"
SECRET_ACCESS_KEY = "kinesalite"

LAUNCHER = (
    "const k = require(process.argv[1]);"
    "const s = k({createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000});"
    "s.listen(Number(process.argv[2]), '127.0.0.1', () => console.log('listening'));"
    "process.on('SIGTERM', () => process.exit(0));"
)


def ensure_installed() -> Path:
    """kinesalite's package directory, installing it first if it is missing."""
    if not (KINESALITE_DIR / "index.js").is_file():
        result = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0 or not (KINESALITE_DIR / "index.js").is_file():
            raise RuntimeError(
                f"installing kinesalite failed (bash {INSTALL_SCRIPT}):\n"
                f"{result.stdout}{result.stderr}"
            )
    return KINESALITE_DIR


class KinesaliteServer(Service):
    """One throwaway kinesalite: ``start()`` it (or use ``with``), then ``stop()``."""

    host = "127.0.0.1"
    region = REGION

    def __init__(self, start_timeout: float = 30.0) -> None:
        self.start_timeout = start_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.tmpdir: Path | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def logfile(self) -> Path:
        return self._tmp / "kinesalite.log"

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, attempts: int = 3) -> KinesaliteServer:
        """Start kinesalite on a free port; retries with another port if one was taken."""
        if self.tmpdir is not None:
            raise RuntimeError("KinesaliteServer is already started")
        package = ensure_installed()
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-kinesalite-"))
        try:
            for attempt in range(1, attempts + 1):
                self.port = free_port(self.host)
                self._spawn(package)
                if self._wait_ready():
                    return self
                self._kill()
                if attempt == attempts or "EADDRINUSE" not in self._log_tail():
                    raise RuntimeError(
                        f"kinesalite did not start on {self.host}:{self.port} in "
                        f"{self.start_timeout:g} s\n--- log (tail) ---\n{self._log_tail()}"
                    )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the kinesalite process this object started (by its PID)."""
        if self.tmpdir is None:
            return
        try:
            self._kill()
        finally:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    # -- client helpers -------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """The sink options (Quix's names) that reach this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "aws_access_key_id": ACCESS_KEY_ID,
            "aws_secret_access_key": SECRET_ACCESS_KEY,
        }

    def client(self) -> Any:
        """A boto3 Kinesis client for this server."""
        import boto3

        return boto3.client("kinesis", **self.options())

    def create_stream(self, name: str, shards: int = 1) -> None:
        """Create a stream and wait until it is ACTIVE."""
        client = self.client()
        client.create_stream(StreamName=name, ShardCount=shards)
        client.get_waiter("stream_exists").wait(
            StreamName=name, WaiterConfig={"Delay": 0.05, "MaxAttempts": 200}
        )

    def read_all(self, name: str) -> list[dict[str, Any]]:
        """Every record of every shard of ``name`` (GetRecords from TRIM_HORIZON)."""
        client = self.client()
        records: list[dict[str, Any]] = []
        shards = client.list_shards(StreamName=name)["Shards"]
        for shard in shards:
            iterator = client.get_shard_iterator(
                StreamName=name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                answer = client.get_records(ShardIterator=iterator, Limit=10_000)
                records.extend(answer["Records"])
                if not answer["Records"] and answer.get("MillisBehindLatest", 0) == 0:
                    break
                iterator = answer.get("NextShardIterator")
        return records

    # -- internals ------------------------------------------------------------------------

    def _spawn(self, package: Path) -> None:
        log = open(self.logfile, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                ["node", "-e", LAUNCHER, str(package), str(self.port)],
                cwd=self._tmp,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()

    def _wait_ready(self) -> bool:
        """Wait until the server answers HTTP (any status) or its process exits."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            if _answers_http(self.host, self.port):
                return True
            time.sleep(0.05)
        return False

    def _kill(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.logfile.read_text(encoding="utf-8", errors="replace")
        except (OSError, RuntimeError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _answers_http(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            return sock.recv(12).startswith(b"HTTP/1.1")
    except OSError:
        return False


def main() -> None:
    """Start a server, print how to reach it, keep it until Ctrl-C (or SIGTERM)."""

    def describe(server: KinesaliteServer) -> None:
        print(f"kinesis: {server.endpoint_url}  (pid {server.pid}, log: {server.logfile})")

    os.environ.setdefault("NODE_NO_WARNINGS", "1")
    serve_until_interrupted(KinesaliteServer(), describe)


if __name__ == "__main__":
    main()
