"""Azure Blob Storage as a :class:`~quixsinks.core.destinations.Destination`.

The commit protocol's primitives on Azure: ``create_exclusive`` is ``upload_blob(...,
overwrite=False)`` (``BlobAlreadyExists`` means another committer won), ``move`` is a
server-side ``start_copy_from_url`` (synchronous within an account; polled otherwise)
then a delete, ``list`` pages through ``list_blobs``, and ``write_with`` stages blocks of
8 MiB and commits the block list, in bounded memory. azure-storage-blob is imported
lazily; clients live in a process-wide ClientCache (never pickled) with few retries of
their own, so the sink's RetryPolicy is in charge. Errors are translated in
:func:`_translate`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, cast

from .clients import ClientCache
from .destinations import Destination
from .errors import (
    AzureContainerAccessDeniedError,
    AzureContainerNotFoundError,
    DestinationError,
    DestinationNotFoundError,
    MissingDependencyError,
    OptionError,
    RetryableError,
    SinkBackpressureError,
)

__all__ = ["AzureDestination"]

BLOCK_BYTES = 8 * 1024 * 1024
_CLIENTS: ClientCache[Any] = ClientCache("azure blob clients", lambda c: c.close())


def _blob_module() -> Any:
    try:
        import azure.storage.blob as blob
    except ImportError as exc:
        raise MissingDependencyError("azure-storage-blob", "azure") from exc
    return blob


class AzureDestination(Destination):
    """Blobs under ``container/prefix``, reached by a connection string, or an account URL
    with an account key or SAS token (else Azure's default credential)."""

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        connection_string: str | None = None,
        account_url: str | None = None,
        account_name: str | None = None,
        account_key: str | None = None,
        sas_token: str | None = None,
    ) -> None:
        if not container:
            raise OptionError(
                "Azure: no container; name it in the path URL or set 'azure_container'",
                option="azure_container",
            )
        if account_url is None and account_name is not None:
            account_url = f"https://{account_name}.blob.core.windows.net"
        if connection_string is None and account_url is None:
            raise OptionError(
                "Azure: set 'azure_connection_string' (or AZURE_STORAGE_CONNECTION_STRING), or "
                "use a URL naming the account (abfss://container@account.dfs.core.windows.net/...)",
                option="azure_connection_string",
            )
        self.container = container
        self.prefix = prefix.strip("/")
        self.account_url = account_url
        self.account_name = account_name
        self._secrets = (connection_string, account_key, sas_token)

    @classmethod
    def from_url(
        cls, url: str, *, container: str | None = None, **credentials: Any
    ) -> AzureDestination:
        """``abfs[s]://container@account.dfs.core.windows.net/prefix``, ``az://container/
        prefix`` or ``https://account.blob.core.windows.net/container/prefix``."""
        scheme, _, rest = url.partition("://")
        scheme = scheme.lower()
        authority, _, path = rest.partition("/")
        account = None
        if scheme in ("abfs", "abfss"):
            name, at, host = authority.partition("@")
            if not at or not host.endswith(".core.windows.net"):
                raise OptionError(
                    f"option 'path': {url!r} is not like "
                    "abfss://container@account.dfs.core.windows.net/prefix",
                    option="path",
                    value=url,
                )
            account = host.split(".", 1)[0]
            found, prefix = name, path
        elif scheme == "az":
            found, prefix = authority, path
        elif scheme == "https" and authority.endswith(".blob.core.windows.net"):
            account = authority.split(".", 1)[0]
            found, _, prefix = path.partition("/")
        else:
            raise OptionError(
                f"option 'path': {url!r} is not an Azure Blob URL (abfs[s]://, az:// or "
                "https://<account>.blob.core.windows.net/)",
                option="path",
                value=url,
            )
        if account and credentials.get("connection_string") is None:
            credentials.setdefault("account_name", account)
        return cls(found or container or "", prefix, **credentials)

    def __repr__(self) -> str:
        return f"AzureDestination({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AzureDestination) and (self.url, self.account_url) == (
            other.url,
            other.account_url,
        )

    def __hash__(self) -> int:
        return hash(self.url)

    @property
    def url(self) -> str:
        base = f"az://{self.container}"
        return f"{base}/{self.prefix}" if self.prefix else base

    # ------------------------------------------------------------------ plumbing

    def _service(self) -> Any:
        digest = hashlib.sha256("\0".join(s or "" for s in self._secrets).encode()).hexdigest()
        return _CLIENTS.get((self.account_url, digest), self._new_service)

    def _new_service(self) -> Any:
        blob = _blob_module()
        connection_string, account_key, sas_token = self._secrets
        options: dict[str, Any] = {
            "retry_total": 2,  # the sink's RetryPolicy is in charge
            "connection_timeout": 10,
            "read_timeout": 60,
            "max_single_put_size": BLOCK_BYTES,
        }
        if connection_string:
            return blob.BlobServiceClient.from_connection_string(connection_string, **options)
        credential: Any = account_key or sas_token
        if credential is None:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError as exc:
                raise MissingDependencyError("azure-identity", "azure") from exc
            credential = DefaultAzureCredential()
        elif account_key and self.account_name:
            credential = {"account_name": self.account_name, "account_key": account_key}
        return blob.BlobServiceClient(self.account_url, credential=credential, **options)

    def _container(self) -> Any:
        return self._service().get_container_client(self.container)

    def _name(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @contextlib.contextmanager
    def _translate(self, key: str = "") -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            raise _translate(exc, self.container, f"{self.url}/{key}" if key else self.url) from exc

    # ------------------------------------------------------------------ Destination

    def check(self) -> None:
        with self._translate():
            self._container().get_container_properties()
        probe = "_quixsinks/probe"
        self.write_bytes(probe, b"")
        self.delete([probe])

    def write_bytes(self, key: str, data: bytes) -> None:
        with self._translate(key):
            self._container().upload_blob(self._name(key), data, overwrite=True)

    def write_with(self, key: str, produce: Callable[[BinaryIO], None]) -> int:
        writer = _BlockWriter(self._container().get_blob_client(self._name(key)))
        with self._translate(key):
            produce(cast(BinaryIO, writer))
            writer.finish()
        return writer.size

    def read_bytes(self, key: str) -> bytes:
        with self._translate(key):
            data: bytes = self._container().download_blob(self._name(key)).readall()
            return data

    def exists(self, key: str) -> bool:
        return self.modified(key) is not None

    def modified(self, key: str) -> float | None:
        try:
            with self._translate(key):
                props = self._container().get_blob_client(self._name(key)).get_blob_properties()
        except DestinationNotFoundError:
            return None
        return float(props.last_modified.timestamp())

    def list(self, prefix: str = "") -> list[str]:
        base = self._name(prefix.strip("/")) if prefix else self.prefix
        start = f"{base}/" if base else ""
        strip = len(self.prefix) + 1 if self.prefix else 0
        with self._translate(prefix):
            names = [b.name[strip:] for b in self._container().list_blobs(name_starts_with=start)]
        return sorted(names)

    def delete(self, keys: Iterable[str]) -> None:
        container = self._container()
        for key in keys:
            with contextlib.suppress(DestinationNotFoundError), self._translate(key):
                container.delete_blob(self._name(key))

    def move(self, src: str, dst: str) -> None:
        container = self._container()
        source = container.get_blob_client(self._name(src))
        target = container.get_blob_client(self._name(dst))
        with self._translate(src):
            copy = target.start_copy_from_url(source.url)  # 404 when moved already
            status = copy.get("copy_status")
            deadline = time.monotonic() + 600
            while status == "pending":
                if time.monotonic() > deadline:
                    raise RetryableError(f"{self.url}/{dst}: copy still pending after 600 s")
                time.sleep(0.2)
                status = target.get_blob_properties().copy.status
            if status not in (None, "success"):
                raise DestinationError(f"{self.url}/{dst}: copy {status}", location=self.url)
            source.delete_blob()

    def create_exclusive(self, key: str, data: bytes) -> bool:
        try:
            with self._translate(key):
                self._container().upload_blob(self._name(key), data, overwrite=False)
        except _AlreadyExists:
            return False
        return True


class _AlreadyExists(DestinationError):
    """The blob exists (a create-only upload lost)."""


class _BlockWriter(io.RawIOBase):
    """A write-only stream: one upload when small, else staged blocks of BLOCK_BYTES and
    a committed block list (memory bounded by one block)."""

    def __init__(self, blob: Any) -> None:
        self.blob = blob
        self.buffer = bytearray()
        self.blocks: list[str] = []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.buffer += view
        self.size += len(view)
        while len(self.buffer) >= BLOCK_BYTES:
            self._stage(bytes(self.buffer[:BLOCK_BYTES]))
            del self.buffer[:BLOCK_BYTES]
        return len(view)

    def tell(self) -> int:
        return self.size

    def _stage(self, data: bytes) -> None:
        block_id = base64.b64encode(uuid.uuid4().hex.encode()).decode()
        self.blob.stage_block(block_id, data)
        self.blocks.append(block_id)

    def finish(self) -> None:
        if not self.blocks:
            self.blob.upload_blob(bytes(self.buffer), overwrite=True)
            return
        if self.buffer:
            self._stage(bytes(self.buffer))
            self.buffer.clear()
        from azure.storage.blob import BlobBlock

        self.blob.commit_block_list([BlobBlock(block_id=b) for b in self.blocks])


def _translate(exc: Exception, container: str, where: str) -> Exception:
    """The quixsinks error for an azure-core / azure-storage-blob exception."""
    if isinstance(exc, DestinationError | RetryableError | MissingDependencyError | OptionError):
        return exc
    code = str(getattr(exc, "error_code", "") or "")
    status = getattr(exc, "status_code", None)
    message = f"{where}: {code or type(exc).__name__} ({status})"
    if code == "BlobAlreadyExists" or (
        status == 409 and type(exc).__name__ == "ResourceExistsError"
    ):
        return _AlreadyExists(message, location=where)
    if code == "ContainerNotFound":
        return AzureContainerNotFoundError(
            f"{where}: the container {container!r} does not exist; create it first",
            location=where,
        )
    if code == "BlobNotFound" or status == 404:
        return DestinationNotFoundError(f"{where}: not found", location=where)
    if status in (401, 403) or type(exc).__name__ == "ClientAuthenticationError":
        return AzureContainerAccessDeniedError(
            f"{where}: access denied ({code or status}); check azure_connection_string / "
            "azure_account_key / azure_sas_token",
            location=where,
        )
    if status in (500, 503) or code in ("ServerBusy", "OperationTimedOut", "InternalError"):
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        retry_after = headers.get("Retry-After") if hasattr(headers, "get") else None
        if retry_after and str(retry_after).isdigit():
            return SinkBackpressureError(float(retry_after), message)
        return RetryableError(message)
    if type(exc).__module__.startswith(("azure.core", "urllib3", "requests")) and status is None:
        return RetryableError(f"{where}: cannot reach Azure: {type(exc).__name__}")
    if status is not None:
        return DestinationError(message, location=where)
    return exc
