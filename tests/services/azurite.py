"""Azurite: Microsoft's Azure Storage emulator (npm), blob service only, on 127.0.0.1.

Installed into ``.services/azurite`` by ``tests/services/install_objectstores.sh``; run
in memory with ``--skipApiVersionCheck`` (the client is newer than Azurite's API table).
What it does not do like Azure: no throttling (503 ServerBusy) unless injected, one
well-known account (``devstoreaccount1``) whose key it does check (a wrong key is a real
403), copies are always synchronous. Run by hand: ``python -m tests.services.azurite``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import Service, free_port, serve_until_interrupted

__all__ = ["Azurite"]

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".services" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Azurite(Service):
    """One in-memory azurite-blob process on a free port of 127.0.0.1."""

    def __init__(self, start_timeout: float = 60.0) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    def connection_string(self, key: str = KEY) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
            f"BlobEndpoint=http://{self.host}:{self.port}/{ACCOUNT};"
        )

    def options(self) -> dict[str, Any]:
        """The AzureDestination credentials that reach this server."""
        return {"connection_string": self.connection_string()}

    def create_container(self, name: str) -> None:
        from azure.storage.blob import BlobServiceClient

        BlobServiceClient.from_connection_string(self.connection_string()).create_container(name)

    def start(self) -> Azurite:
        if not BIN.exists():
            subprocess.run(
                ["bash", str(ROOT / "tests/services/install_objectstores.sh")], check=True
            )
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-azurite-"))
        try:
            self.port = free_port(self.host)
            with open(self.tmpdir / "azurite.log", "wb") as log:
                self._proc = subprocess.Popen(
                    [
                        str(BIN),
                        *("--blobHost", self.host, "--blobPort", str(self.port)),
                        "--inMemoryPersistence",
                        "--skipApiVersionCheck",
                        "--silent",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.tmpdir,
                    start_new_session=True,
                )
            deadline = time.monotonic() + self.start_timeout
            while True:
                if self._proc.poll() is not None:
                    raise RuntimeError(
                        f"azurite exited: {(self.tmpdir / 'azurite.log').read_text()[-2000:]}"
                    )
                try:
                    socket.create_connection((self.host, self.port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("azurite did not listen in time") from None
                    time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.tmpdir is None:
            return
        try:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
        finally:
            self._proc = None
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


if __name__ == "__main__":
    serve_until_interrupted(
        Azurite(), lambda s: print(f"connection string: {s.connection_string()}")
    )
