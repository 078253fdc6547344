"""A throwaway Azurite (Azure Blob Storage emulator) on 127.0.0.1 for integration tests.

`AzuriteServer` runs Azurite's blob service from npm (``node .../azurite/dist/src/blob/main.js``)
with in-memory persistence, on a free port, from a private temporary working directory. It
authenticates requests with the well-known development account (`ACCOUNT`, `ACCOUNT_KEY`),
so a wrong key is a real 403. Install it with ``bash tests/services/install_azure.sh``; the
launcher runs that script itself when Azurite is missing.

Manual use: ``python tests/services/azurite.py`` starts a server, prints its connection
string and keeps it running until Ctrl-C.
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
else:  # run as a script: python tests/services/azurite.py
    from common import (  # type: ignore[no-redef,import-not-found]
        Service,
        free_port,
        serve_until_interrupted,
    )

REPO = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO / "tests" / "services" / "install_azure.sh"
AZURITE_MAIN = REPO / ".services/azurite/node_modules/azurite/dist/src/blob/main.js"

#: Azurite's well-known development account and key (public, in Microsoft's docs).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def ensure_installed() -> Path:
    """The path of Azurite's blob ``main.js``, installing Azurite first if it is missing."""
    if not AZURITE_MAIN.is_file():
        result = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0 or not AZURITE_MAIN.is_file():
            raise RuntimeError(
                f"installing Azurite failed (bash {INSTALL_SCRIPT}):\n"
                f"{result.stdout}{result.stderr}"
            )
    return AZURITE_MAIN


class AzuriteServer(Service):
    """One throwaway Azurite blob service: ``start()`` it (or use ``with``), then ``stop()``."""

    host = "127.0.0.1"
    account = ACCOUNT
    account_key = ACCOUNT_KEY

    def __init__(self, start_timeout: float = 30.0, memory_limit_mb: int = 2048) -> None:
        self.start_timeout = start_timeout
        self.memory_limit_mb = memory_limit_mb
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.tmpdir: Path | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def account_url(self) -> str:
        """The blob service URL (path-style: the account is the first path segment)."""
        return f"http://{self.host}:{self.port}/{self.account}"

    @property
    def logfile(self) -> Path:
        return self._tmp / "azurite.log"

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, attempts: int = 3) -> AzuriteServer:
        """Start Azurite on a free port; retries with another port if one was taken meanwhile."""
        if self.tmpdir is not None:
            raise RuntimeError("AzuriteServer is already started")
        main = ensure_installed()
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-azurite-"))
        try:
            for attempt in range(1, attempts + 1):
                self.port = free_port(self.host)
                self._spawn(main)
                if self._wait_ready():
                    return self
                self._kill()
                if attempt == attempts or "EADDRINUSE" not in self._log_tail():
                    raise RuntimeError(
                        f"Azurite did not start on {self.host}:{self.port} in "
                        f"{self.start_timeout:g} s\n--- log (tail) ---\n{self._log_tail()}"
                    )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the Azurite process this object started (by its PID), delete its directory."""
        if self.tmpdir is None:
            return
        try:
            self._kill()
        finally:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    # -- client helpers -------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """The keyword credentials of ``AzureDestination`` that reach this server."""
        return {
            "account_url": self.account_url,
            "account_name": self.account,
            "account_key": self.account_key,
        }

    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};"
            f"AccountKey={self.account_key};BlobEndpoint={self.account_url};"
        )

    def service_client(self) -> Any:
        """An ``azure.storage.blob.BlobServiceClient`` for this server (the caller closes it)."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string())

    def create_container(self, name: str) -> None:
        with self.service_client() as service:
            service.create_container(name)

    def sas_token(self, container: str, permission: str = "racwdl", hours: float = 1.0) -> str:
        """A container SAS token with ``permission`` (r, a, c, w, d, l)."""
        from datetime import datetime, timedelta, timezone

        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        token: str = generate_container_sas(
            self.account,
            container,
            account_key=self.account_key,
            permission=ContainerSasPermissions.from_string(permission),
            expiry=datetime.now(timezone.utc) + timedelta(hours=hours),
        )
        return token

    # -- internals ------------------------------------------------------------------------

    def _spawn(self, main: Path) -> None:
        log = open(self.logfile, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                [
                    "node",
                    str(main),
                    "--blobHost",
                    self.host,
                    "--blobPort",
                    str(self.port),
                    "--inMemoryPersistence",
                    "--extentMemoryLimit",
                    str(self.memory_limit_mb),
                    "--skipApiVersionCheck",
                    "--disableTelemetry",
                    "--silent",
                ],
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
            sock.sendall(f"GET /{ACCOUNT}?comp=list HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            return sock.recv(12).startswith(b"HTTP/1.1")
    except OSError:
        return False


def main() -> None:
    """Start a server, print how to reach it, keep it until Ctrl-C (or SIGTERM)."""

    def describe(server: AzuriteServer) -> None:
        print(f"blob:  {server.account_url}  (pid {server.pid}, log: {server.logfile})")
        print(f"AZURE_STORAGE_CONNECTION_STRING='{server.connection_string()}'")

    os.environ.setdefault("NODE_NO_WARNINGS", "1")
    serve_until_interrupted(AzuriteServer(), describe)


if __name__ == "__main__":
    main()
