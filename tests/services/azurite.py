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
from datetime import UTC
from pathlib import Path
from typing import Any

if __package__:
    from .common import ProcessService, run_install_script, serve_until_interrupted
else:  # run as a script: python tests/services/azurite.py
    from common import (  # type: ignore[no-redef,import-not-found]
        ProcessService,
        run_install_script,
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
    run_install_script(INSTALL_SCRIPT, AZURITE_MAIN, "Azurite")
    return AZURITE_MAIN


class AzuriteServer(ProcessService):
    """One throwaway Azurite blob service: ``start()`` it (or use ``with``), then ``stop()``."""

    name = "azurite"
    probe = f"/{ACCOUNT}?comp=list"
    account = ACCOUNT
    account_key = ACCOUNT_KEY

    def __init__(self, start_timeout: float = 30.0, memory_limit_mb: int = 2048) -> None:
        super().__init__(start_timeout)
        self.memory_limit_mb = memory_limit_mb

    @property
    def account_url(self) -> str:
        """The blob service URL (path-style: the account is the first path segment)."""
        return f"http://{self.host}:{self.port}/{self.account}"

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
        from datetime import datetime, timedelta

        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        token: str = generate_container_sas(
            self.account,
            container,
            account_key=self.account_key,
            permission=ContainerSasPermissions.from_string(permission),
            expiry=datetime.now(UTC) + timedelta(hours=hours),
        )
        return token

    # -- internals ------------------------------------------------------------------------

    def _install(self) -> Path:
        return ensure_installed()

    def _command(self, installed: Path) -> list[str]:
        return [
            "node",
            str(installed),
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
        ]


def main() -> None:
    """Start a server, print how to reach it, keep it until Ctrl-C (or SIGTERM)."""

    def describe(server: AzuriteServer) -> None:
        print(f"blob:  {server.account_url}  (pid {server.pid}, log: {server.logfile})")
        print(f"AZURE_STORAGE_CONNECTION_STRING='{server.connection_string()}'")

    os.environ.setdefault("NODE_NO_WARNINGS", "1")
    serve_until_interrupted(AzuriteServer(), describe)


if __name__ == "__main__":
    main()
