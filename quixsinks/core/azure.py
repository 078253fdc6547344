"""Azure Blob Storage as a :class:`~quixsinks.core.destinations.Destination`.

:class:`AzureDestination` is a container and a key prefix, reached with
``azure-storage-blob`` (the ``azure`` extra; imported lazily, never at module import).
How it maps the Destination contract onto Blob Storage:

* ``write_with`` streams through core's upload writer (:mod:`quixsinks.core.upload`):
  it stages 8 MiB blocks (``Put Block``, at most two in flight) and commits the block list
  at the end, so memory stays bounded whatever the file size; an output smaller than one
  block is a single ``Put Blob``. Nothing is visible before the commit.
* ``create_exclusive`` is one ``Put Blob`` with ``If-None-Match: *``
  (``overwrite=False``): atomic, so the content is complete when the key appears.
* ``move`` is a server-side copy (``Copy Blob``, polled until done if the service makes
  it asynchronous), then a delete of the source.
* ``list`` follows continuation markers; ``delete`` uses blob batches of 256 deletes and
  ignores keys that do not exist.

Credentials: a connection string (option ``azure_connection_string``, Quix's
``connection_string``; env ``AZURE_STORAGE_CONNECTION_STRING``), or an account (named by
the ``path`` URL: ``abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/...`` or
``https://ACCOUNT.blob.core.windows.net/CONTAINER/...``; env ``AZURE_STORAGE_ACCOUNT``) with
an account key (option ``azure_account_key``, env ``AZURE_STORAGE_KEY``) or a SAS token
(option ``azure_sas_token``, env ``AZURE_STORAGE_SAS_TOKEN``). They are read
once, where the destination is made (the driver), and carried to executors inside the
pickled destination, wrapped so that no repr, log line or error message shows them. The
SDK client is made lazily in each process and kept in a process-wide
:class:`~quixsinks.core.clients.ClientCache`; it is never pickled.

Every SDK error is translated in :meth:`AzureDestination._translate`, through the Azure
error map of :mod:`quixsinks.core.vendors.azure` with Blob Storage's hook: a missing
container is
:class:`AzureContainerNotFoundError`, an authentication or authorisation failure
:class:`AzureContainerAccessDeniedError`, throttling (503 ``ServerBusy``, 500
``OperationTimedOut``...) a :class:`RetryableError` (:class:`SinkBackpressureError`
when the service sends ``Retry-After``) for the sink's RetryPolicy, anything else a
:class:`DestinationError` naming the location. The SDK's own retries are kept
few (:data:`SDK_RETRIES`) so that the RetryPolicy is in charge; every request has a connect
timeout (:data:`~quixsinks.core.vendors.azure.CONNECT_TIMEOUT` at most) and a read timeout
(``timeout``, the option ``storage_timeout_seconds``), and a timeout says so.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, cast
from urllib.parse import unquote, urlsplit

from .clients import ClientCache, Secret
from .errors import (
    AzureContainerAccessDeniedError,
    AzureContainerNotFoundError,
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    QuixSinksError,
    RetryableError,
)
from .storage import DEFAULT_STORAGE_TIMEOUT, Destination
from .upload import UploadTarget, upload_stream
from .vendors.azure import (
    AzureService,
    ResponseInfo,
    blob_service_client,
    import_exceptions,
    parse_connection_string,
    response_info,
    translate,
)

if TYPE_CHECKING:
    from azure.storage.blob import BlobServiceClient, ContainerClient

__all__ = ["AzureDestination"]

#: Size of one staged block of a streamed upload; outputs up to this size are one Put Blob.
BLOCK_SIZE = 8 * 1024 * 1024
#: Blocks being uploaded while the producer fills the next one (memory: (n + 1) blocks).
BLOCKS_IN_FLIGHT = 2
#: Deletes per blob batch request (the service's maximum).
DELETE_BATCH = 256
#: Retries the SDK makes by itself (in all; of which on 5xx answers); a short linear pause.
SDK_RETRIES = 2
SDK_STATUS_RETRIES = 1
SDK_RETRY_PAUSE = 0.5
#: How long a pending server-side copy is polled before giving up (seconds).
COPY_TIMEOUT = 600.0

_DEFAULT_SUFFIX = "core.windows.net"
_DEVSTORE_ACCOUNT = "devstoreaccount1"
_DEVSTORE_URL = "http://127.0.0.1:10000/devstoreaccount1"
_CONTAINER_RE = re.compile(r"^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$")
_CONTAINER_MISSING_CODES = frozenset({"ContainerNotFound", "ContainerBeingDeleted"})

_CLIENTS: ClientCache[Any] = ClientCache("azure blob clients", lambda c: c.close(), max_size=8)


def _secret(value: str | None) -> Secret | None:
    return Secret(value) if value else None


def _blob_endpoint_of(connection_string: str) -> str:
    """The blob service URL a connection string points at (for messages and cache keys)."""
    pairs = {k.lower(): v for k, v in parse_connection_string(connection_string).items()}
    if pairs.get("usedevelopmentstorage", "").lower() == "true":
        return _DEVSTORE_URL
    if pairs.get("blobendpoint"):
        return pairs["blobendpoint"].rstrip("/")
    account = pairs.get("accountname")
    if not account:
        raise OptionError(
            "option 'azure_connection_string' has neither BlobEndpoint nor AccountName; copy "
            "it from the storage account's 'Access keys' page",
            option="azure_connection_string",
            value="***",
        )
    protocol = pairs.get("defaultendpointsprotocol", "https")
    suffix = pairs.get("endpointsuffix", _DEFAULT_SUFFIX)
    return f"{protocol}://{account}.blob.{suffix}"


def _account_of(account_url: str) -> str | None:
    """The account name in a blob service URL: ``https://NAME.blob...`` or, for emulators
    and IP addresses, ``http://host:port/NAME``."""
    parts = urlsplit(account_url)
    host = parts.hostname or ""
    if ".blob." in host:
        return host.split(".", 1)[0]
    first = parts.path.strip("/").split("/", 1)[0]
    return first or None


class AzureDestination(Destination):
    """A container (and a key prefix in it) in Azure Blob Storage.

    Args:
        container: the container; it must exist (it is never created).
        prefix: a ``/``-separated folder inside the container ('' for its root).
        connection_string: a storage account connection string (a secret). Default: env
            ``AZURE_STORAGE_CONNECTION_STRING`` when no account is given.
        account_url: the blob service URL, e.g. ``https://NAME.blob.core.windows.net``
            (or an emulator's ``http://127.0.0.1:10000/devstoreaccount1``).
        account_name: the storage account, when ``account_url`` is not given (env
            ``AZURE_STORAGE_ACCOUNT``).
        account_key: the account's access key (a secret; env ``AZURE_STORAGE_KEY``).
        sas_token: a shared access signature (a secret; env ``AZURE_STORAGE_SAS_TOKEN``)
            allowing read, write, delete and list on the container.
        timeout: seconds to wait for an answer to one request (``storage_timeout_seconds``).
    """

    supports_append = False
    #: Blobs asked for per List Blobs page (the service allows at most 5,000).
    list_page_size = 5000

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
        timeout: float = DEFAULT_STORAGE_TIMEOUT,
    ) -> None:
        if not container or "/" in container:
            raise OptionError(
                f"invalid Azure container name {container!r}: 3 to 63 lower-case letters, "
                "digits and single hyphens",
                option="azure_container",
                value=container,
            )
        self.container = container
        self.prefix = prefix.strip("/")
        self.timeout = timeout
        env = os.environ
        if not (connection_string or account_url or account_name):
            connection_string = env.get("AZURE_STORAGE_CONNECTION_STRING") or None
            if not connection_string:
                account_name = env.get("AZURE_STORAGE_ACCOUNT") or None
        self._connection_string = _secret(connection_string)
        if connection_string:
            self.account_url = _blob_endpoint_of(connection_string)
            self.account_name = _account_of(self.account_url) or ""
            self._account_key = self._sas_token = None
            return
        if not (account_url or account_name):
            raise OptionError(
                "no Azure credentials: give 'azure_connection_string' (or set "
                "AZURE_STORAGE_CONNECTION_STRING), or name the account in 'path' "
                "(abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/... or "
                "https://ACCOUNT.blob.core.windows.net/CONTAINER/...; or set "
                "AZURE_STORAGE_ACCOUNT) with 'azure_account_key' or 'azure_sas_token'",
                option="azure_connection_string",
            )
        if account_url:
            account_url, _, query = account_url.partition("?")  # a SAS URL: the token
            sas_token = sas_token or query or None
            self.account_url = account_url.rstrip("/")
        else:
            self.account_url = f"https://{account_name}.blob.{_DEFAULT_SUFFIX}"
        self.account_name = account_name or _account_of(self.account_url) or ""
        if not (account_key or sas_token):
            account_key = env.get("AZURE_STORAGE_KEY") or None
            sas_token = None if account_key else env.get("AZURE_STORAGE_SAS_TOKEN") or None
        if not (account_key or sas_token):
            raise OptionError(
                f"no credential for Azure account {self.account_name or self.account_url!r}: "
                "give 'azure_account_key' (env AZURE_STORAGE_KEY) or 'azure_sas_token' (env "
                "AZURE_STORAGE_SAS_TOKEN), or an 'azure_connection_string'",
                option="azure_account_key",
            )
        if account_key and not self.account_name:
            raise OptionError(
                f"cannot tell the account name from {self.account_url!r}; give "
                "a 'path' naming the account (abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/"
                "...) with the account key, or an 'azure_connection_string'",
                option="path",
            )
        self._account_key = _secret(account_key)
        self._sas_token = _secret(sas_token.lstrip("?") if sas_token else None)

    @classmethod
    def from_url(
        cls, url: str, *, timeout: float = DEFAULT_STORAGE_TIMEOUT, **credentials: str | None
    ) -> AzureDestination:
        """The destination a ``path`` option names.

        Accepted forms: ``abfs[s]://CONTAINER@ACCOUNT.dfs.core.windows.net/prefix``,
        ``az://CONTAINER/prefix`` (the account comes from the credentials) and
        ``https://ACCOUNT.blob.core.windows.net/CONTAINER/prefix`` (a ``?sas`` query is
        taken as the SAS token). ``credentials`` are the constructor's keywords; an
        ``account_url`` given there wins over the URL's host (emulators). ``timeout``: the
        constructor's.
        """
        shown = url.split("?", 1)[0]
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        creds = dict(credentials)
        path = unquote(parts.path).strip("/")

        def bad(why: str, example: str) -> OptionError:
            return OptionError(
                f"option 'path': {shown!r} is not an Azure Blob URL: {why}; write e.g. {example}",
                option="path",
                value=shown,
                allowed=(
                    "abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX",
                    "az://CONTAINER/PREFIX",
                    "https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX",
                ),
            )

        if scheme in ("abfs", "abfss"):
            example = "abfss://mycontainer@myaccount.dfs.core.windows.net/data"
            container, at, host = parts.netloc.rpartition("@")
            if not at or not container or not host:
                raise bad("the container and account are missing (CONTAINER@ACCOUNT...)", example)
            account, dot, suffix = host.partition(".")
            if not dot or not suffix.startswith(("dfs.", "blob.")):
                raise bad(f"{host!r} is not ACCOUNT.dfs.<endpoint suffix>", example)
            _, _, endpoint_suffix = suffix.partition(".")
            creds.setdefault("account_name", account)
            if not creds.get("account_url") and not creds.get("connection_string"):
                creds["account_url"] = f"https://{account}.blob.{endpoint_suffix}"
            prefix = path
        elif scheme == "az":
            container, prefix = parts.netloc, path
            if not container:
                raise bad("the container is missing", "az://mycontainer/data")
        elif scheme in ("https", "http"):
            example = "https://myaccount.blob.core.windows.net/mycontainer/data"
            host = parts.hostname or ""
            if not host:
                raise bad("the host is missing", example)
            segments = path.split("/", 1) if path else []
            if ".blob." in host:
                base = f"{scheme}://{parts.netloc}"
            else:  # an emulator or IP address: /ACCOUNT/CONTAINER/prefix
                if not segments:
                    raise bad("the account is missing (http://HOST:PORT/ACCOUNT/...)", example)
                base = f"{scheme}://{parts.netloc}/{segments[0]}"
                segments = segments[1].split("/", 1) if len(segments) > 1 else []
            if not segments or not segments[0]:
                raise bad("the container is missing", example)
            container = segments[0]
            prefix = segments[1] if len(segments) > 1 else ""
            if not creds.get("account_url") and not creds.get("connection_string"):
                creds["account_url"] = base
            if parts.query and not creds.get("sas_token"):
                creds["sas_token"] = parts.query
        else:
            raise bad(
                f"unknown scheme {scheme!r}", "abfss://mycontainer@myaccount.dfs.core.windows.net/"
            )
        if not _CONTAINER_RE.match(container) and container != "$root":
            raise bad(
                f"{container!r} is not a container name (3 to 63 lower-case letters, digits "
                "and single hyphens)",
                "az://mycontainer/data",
            )
        return cls(container, prefix, timeout=timeout, **creds)

    # -- identity ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{self.account_url}/{self.container}" + (f"/{self.prefix}" if self.prefix else "")

    def __repr__(self) -> str:
        return (
            f"AzureDestination({self.container!r}, {self.prefix!r}, "
            f"account_url={self.account_url!r})"
        )

    def _identity(self) -> tuple[Hashable, ...]:
        secrets = (self._connection_string, self._account_key, self._sas_token)
        return (
            self.account_url,
            self.account_name,
            *(s.digest() if s is not None else None for s in secrets),
            self.timeout,
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AzureDestination)
            and other._identity() == self._identity()
            and (other.container, other.prefix) == (self.container, self.prefix)
        )

    def __hash__(self) -> int:
        return hash((self._identity(), self.container, self.prefix))

    # -- the client -------------------------------------------------------------------

    def _service(self) -> BlobServiceClient:
        client: BlobServiceClient = _CLIENTS.get(("azure", *self._identity()), self._new_client)
        return client

    def _container(self) -> ContainerClient:
        return self._service().get_container_client(self.container)

    def _new_client(self) -> BlobServiceClient:
        def reveal(secret: Secret | None) -> str | None:
            return None if secret is None else secret.reveal()

        service = blob_service_client(
            self.account_url,
            connection_string=reveal(self._connection_string),
            account_name=self.account_name,
            account_key=reveal(self._account_key),
            sas_token=reveal(self._sas_token),
            timeout=self.timeout,
            retries=SDK_RETRIES,
            status_retries=SDK_STATUS_RETRIES,
            retry_pause=SDK_RETRY_PAUSE,
            credential_option="azure_connection_string"
            if self._connection_string is not None
            else "azure_account_key",
            max_single_put_size=BLOCK_SIZE,
            max_block_size=BLOCK_SIZE,
        )
        return cast("BlobServiceClient", service)

    def blob_name(self, key: str) -> str:
        """The blob name of ``key`` (the prefix joined); keys cannot climb out of it."""
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise DestinationError(f"invalid key {key!r}", location=self.url)
        return "/".join([self.prefix, *parts]) if self.prefix else "/".join(parts)

    def _location(self, key: str | None = None) -> str:
        return f"{self.url}/{key}" if key else self.url

    @contextlib.contextmanager
    def _translate(self, key: str | None = None) -> Iterator[None]:
        """The one boundary where Azure SDK errors become quixsinks errors.

        Messages are built from the HTTP status and the service's error code, never from
        the SDK's text (which can quote request URLs carrying a SAS token), and the SDK
        exception is not chained, so tracebacks carry no credentials either.
        """
        try:
            yield
        except QuixSinksError:
            raise
        except Exception as exc:
            error = translate(exc, self._errors(self._location(key)))
            if error is None:
                raise
            raise error from None

    def _errors(self, location: str) -> AzureService:
        """Blob Storage's hook of the Azure error map: a missing container, whose container."""
        container = self.container

        def classify(info: ResponseInfo) -> QuixSinksError | None:
            if info.code in _CONTAINER_MISSING_CODES:
                return AzureContainerNotFoundError(
                    f"{location}: the Azure container {container!r} does not exist; create it "
                    f"first, or fix the container in 'path' ({info.detail})",
                    location=location,
                )
            return None

        return AzureService(
            location=location,
            name="Azure Blob Storage",
            classify=classify,
            denied=lambda message, where: AzureContainerAccessDeniedError(message, location=where),
            denied_advice=f"access denied to Azure container {container!r}: the credentials "
            "are wrong, expired, or may not read, write, delete and list there",
            timeout=self.timeout,
            secrets=self._secret_values(),
        )

    def _secret_values(self) -> tuple[str, ...]:
        secrets = (self._connection_string, self._account_key, self._sas_token)
        return tuple(s.reveal() for s in secrets if s is not None)

    # -- the contract -----------------------------------------------------------------

    def check(self) -> None:
        """The container exists and these credentials may write and delete under the
        prefix: a probe blob is written and deleted."""
        probe = f"_quixsinks_probe-{uuid.uuid4().hex}"
        self.write_bytes(probe, b"")
        self.delete([probe])

    def create_root(self) -> None:
        """Create the container; one that exists already is fine."""
        from azure.core.exceptions import ResourceExistsError

        with self._translate(), contextlib.suppress(ResourceExistsError):
            self._container().create_container()

    def write_bytes(self, key: str, data: bytes) -> None:
        name = self.blob_name(key)
        with self._translate(key):
            self._container().upload_blob(name, data, overwrite=True, max_concurrency=1)

    def write_with(self, key: str, produce: Callable[[BinaryIO], None]) -> int:
        name = self.blob_name(key)
        with self._translate(key):
            blob = self._container().get_blob_client(name)
        return upload_stream(
            _BlockUpload(blob, lambda: self._translate(key)),
            produce,
            part_size=BLOCK_SIZE,
            in_flight=BLOCKS_IN_FLIGHT,
        )

    def read_bytes(self, key: str) -> bytes:
        name = self.blob_name(key)
        with self._translate(key):
            data: bytes = self._container().download_blob(name, max_concurrency=1).readall()
            return data

    def exists(self, key: str) -> bool:
        return self.modified(key) is not None

    def modified(self, key: str) -> float | None:
        name = self.blob_name(key)
        try:
            with self._translate(key):
                props = self._container().get_blob_client(name).get_blob_properties()
        except AzureContainerNotFoundError:
            raise
        except DestinationNotFoundError:
            return None
        return float(props.last_modified.timestamp())

    def list(self, prefix: str = "") -> list[str]:
        folder = "/".join(p for p in [self.prefix, prefix.strip("/")] if p)
        starts = f"{folder}/" if folder else None
        strip = len(self.prefix) + 1 if self.prefix else 0
        with self._translate(prefix or None):
            names = [
                b.name[strip:]
                for b in self._container().list_blobs(
                    name_starts_with=starts, results_per_page=self.list_page_size
                )
            ]
        return sorted(names)

    def delete(self, keys: Iterable[str]) -> None:
        names = sorted({self.blob_name(k) for k in keys})
        container = self._container()
        for start in range(0, len(names), DELETE_BATCH):
            chunk = names[start : start + DELETE_BATCH]
            if len(chunk) == 1:
                self._delete_one(container, chunk[0])
                continue
            with self._translate():
                answers = container.delete_blobs(
                    *chunk, delete_snapshots="include", raise_on_any_failure=False
                )
                failed = [
                    (name, answer)
                    for name, answer in zip(chunk, answers, strict=False)
                    if answer.status_code not in (200, 202, 404)
                ]
            for name, _answer in failed:  # retried one by one for a precise error
                self._delete_one(container, name)

    def _delete_one(self, container: ContainerClient, name: str) -> None:
        key = name[len(self.prefix) + 1 :] if self.prefix else name
        try:
            with self._translate(key):
                container.delete_blob(name, delete_snapshots="include")
        except AzureContainerNotFoundError:
            raise
        except DestinationNotFoundError:
            pass

    def move(self, src: str, dst: str) -> None:
        source_name, target_name = self.blob_name(src), self.blob_name(dst)
        container = self._container()
        source = container.get_blob_client(source_name)
        target = container.get_blob_client(target_name)
        with self._translate(src):  # a missing source is a not-found error naming it
            answer = target.start_copy_from_url(source.url)
        with self._translate(dst):
            status = answer.get("copy_status")
            deadline = time.monotonic() + COPY_TIMEOUT
            pause = 0.05
            while status == "pending":
                if time.monotonic() > deadline:
                    raise RetryableError(
                        f"{self._location(dst)}: server-side copy from {src} still pending "
                        f"after {COPY_TIMEOUT:g} s"
                    )
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
                status = target.get_blob_properties().copy.status
            if status != "success":
                raise DestinationError(
                    f"{self._location(dst)}: server-side copy from {src} ended {status!r}",
                    location=self._location(dst),
                )
        self._delete_one(container, source_name)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        name = self.blob_name(key)
        errors = import_exceptions()
        with self._translate(key):
            try:
                self._container().upload_blob(name, data, overwrite=False, max_concurrency=1)
            except errors.ResourceExistsError:
                return False  # Put Blob with If-None-Match: * answers 409 BlobAlreadyExists
            except errors.HttpResponseError as exc:
                if response_info(exc).status == 412:  # or 412 on some service versions
                    return False
                raise
        return True


class _BlockUpload(UploadTarget):
    """One block blob streamed in blocks (``Put Block``, from worker threads), committed
    with ``Put Block List``; or one ``Put Blob`` when it is smaller than one block. Staged
    blocks that are never committed are garbage-collected by the service after a week."""

    def __init__(
        self, blob: Any, translate: Callable[[], contextlib.AbstractContextManager[None]]
    ) -> None:
        self._blob = blob
        self._translate = translate
        self._tag = uuid.uuid4().hex

    def put_whole(self, data: bytes) -> None:
        with self._translate():
            self._blob.upload_blob(data, overwrite=True, max_concurrency=1)

    def put_part(self, number: int, data: bytes) -> str:
        block_id = base64.b64encode(f"{self._tag}-{number - 1:08d}".encode()).decode()
        with self._translate():
            self._blob.stage_block(block_id, data)
        return block_id

    def complete(self, parts: list[Any], size: int) -> None:
        with self._translate():
            self._blob.commit_block_list(parts)
