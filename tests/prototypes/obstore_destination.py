"""A prototype :class:`Destination` on ``obstore`` (Rust ``object_store`` bindings): S3,
Azure Blob and GCS behind one class. An evaluation for issue #29, not part of quixsinks
and not collected by pytest (see README.md beside this file).

The commit protocol's primitives map to obstore calls:

* ``create_exclusive``: ``put(mode="create")`` (S3 ``If-None-Match: *``, Azure
  ``If-None-Match: *``, GCS ``x-goog-if-generation-match: 0``); ``AlreadyExistsError`` ->
  False;
* ``write_with``: ``open_writer`` (a buffered writer: one PUT below ``PART_SIZE``, a
  multipart upload of ``PART_SIZE`` parts above; leaving it with an exception aborts);
* ``move``: ``rename`` (server-side copy, then delete); ``list``/``delete``: ``list`` and
  ``delete`` with many paths (S3 DeleteObjects, Azure blob batch, GCS one DELETE each).

**The error boundary**, :func:`translate`, is where obstore falls short of the working rules:
obstore raises one Python class per ``object_store::Error`` variant (``FileNotFoundError``,
``PermissionDeniedError``, ``AlreadyExistsError``...), but every other answer (429, 5xx,
timeouts, refused connections) is a ``GenericError`` whose *only* carrier of the HTTP status
is its message text, and the response headers (``Retry-After``, ``x-ms-error-code``) are
dropped inside object_store's retry loop. The prototype therefore reads the status out of the
message (:func:`_status_in_text`), the one thing the rules forbid where an SDK gives a code,
and can never raise :class:`SinkBackpressureError`.
"""

from __future__ import annotations

import contextlib
import io
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, BinaryIO, NoReturn

from quixsinks.core.clients import ClientCache, Secret, connect_timeout
from quixsinks.core.destinations import DEFAULT_STORAGE_TIMEOUT, Destination
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    RetryableError,
)
from quixsinks.core.secrets import scrub
from quixsinks.core.vendors.http import import_client

__all__ = ["ObstoreDestination", "translate"]

#: Multipart parts (and the in-memory buffer of a streamed write), as S3Destination's.
PART_SIZE = 8 * 1024 * 1024
#: object_store's own retries per call (after the first try): our RetryPolicy does the rest,
#: as with the SDKs (S3Destination's SDK_MAX_ATTEMPTS = 2).
SDK_RETRIES = 1
#: Where a GenericError's message carries the status (object_store's ``RequestError::Status``
#: Display: "Server returned non-2xx status code: 503 Service Unavailable: <body>").
_STATUS_TEXT = re.compile(r"status code: (\d{3})\b")
_RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}

_STORES: ClientCache[Any] = ClientCache("obstore stores", lambda store: None)


class ObstoreDestination(Destination):
    """Objects under ``<kind>://bucket/prefix`` through one obstore store.

    Args:
        kind: ``"s3"``, ``"azure"`` or ``"gcs"``.
        bucket: the bucket (container on Azure).
        prefix: a folder-like prefix under which every key lives.
        config: the store's non-secret configuration (obstore's keys: ``endpoint``,
            ``region``, ``account_name``, ``base_url``...).
        secrets: the store's secret configuration (``secret_access_key``, ``account_key``,
            ``service_account_key``...): pickled by value, never shown.
        timeout: seconds to wait for one request (``storage_timeout_seconds``).
    """

    def __init__(
        self,
        kind: str,
        bucket: str,
        prefix: str = "",
        *,
        config: Mapping[str, Any] | None = None,
        secrets: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_STORAGE_TIMEOUT,
    ) -> None:
        if kind not in ("s3", "azure", "gcs"):
            raise ValueError(f"unknown kind {kind!r}")
        self.kind = kind
        self.bucket = bucket
        self.prefix = "/".join(p for p in prefix.split("/") if p)
        self.config = dict(config or {})
        self._secrets = {name: Secret(value) for name, value in (secrets or {}).items()}
        self.timeout = timeout

    # -- the test servers' keyword arguments -----------------------------------------------

    @classmethod
    def s3(cls, bucket: str, prefix: str = "", **options: Any) -> ObstoreDestination:
        """From S3Destination's keywords (``MotoServer.options()``): an ``endpoint_url``
        means path-style addressing, as MinIO-style stores expect."""
        config: dict[str, Any] = {"region": options.get("region_name") or "us-east-1"}
        if options.get("endpoint_url"):
            config.update(endpoint=options["endpoint_url"], virtual_hosted_style_request=False)
        if options.get("aws_access_key_id"):
            config["access_key_id"] = options["aws_access_key_id"]
        secret = options.get("aws_secret_access_key")
        return cls(
            "s3",
            bucket,
            prefix,
            config=config,
            secrets={"secret_access_key": secret} if secret else {},
            timeout=options.get("timeout", DEFAULT_STORAGE_TIMEOUT),
        )

    @classmethod
    def azure(cls, container: str, prefix: str = "", **options: Any) -> ObstoreDestination:
        """From AzureDestination's keywords (``AzuriteServer.options()``): Azurite's
        path-style account URL is obstore's ``endpoint``."""
        return cls(
            "azure",
            container,
            prefix,
            config={"account_name": options["account_name"], "endpoint": options["account_url"]},
            secrets={"account_key": options["account_key"]},
            timeout=options.get("timeout", DEFAULT_STORAGE_TIMEOUT),
        )

    @classmethod
    def gcs(cls, bucket: str, prefix: str = "", **options: Any) -> ObstoreDestination:
        """From GCSDestination's keywords (``GCSEmulator.options()``; ``project`` unused).

        object_store signs its own JWTs for a service account and never asks the key's
        ``token_uri``, which a test server (or a private endpoint) cannot check; and its
        ``skip_signature`` is ignored by every request but GET (object_store's GCS
        ``Request::send`` always fetches a credential). So the key goes to a Python
        ``credential_provider`` that gets a token from the key's ``token_uri`` with
        google-auth, as GCSDestination's client does.
        """
        account = options.get("service_account_json")
        return cls(
            "gcs",
            bucket,
            prefix,
            config={"base_url": options["endpoint"]},
            secrets={"service_account_json": account} if account else {},
            timeout=options.get("timeout", DEFAULT_STORAGE_TIMEOUT),
        )

    # -- identity ----------------------------------------------------------------------------

    def __repr__(self) -> str:
        hidden = "".join(f", {name}='***'" for name in sorted(self._secrets))
        return f"ObstoreDestination({self.kind!r}, {self.bucket!r}, {self.prefix!r}{hidden})"

    def _identity(self) -> tuple[Any, ...]:
        return (
            self.kind,
            self.bucket,
            tuple(sorted((k, str(v)) for k, v in self.config.items())),
            tuple(sorted((k, s.digest()) for k, s in self._secrets.items())),
            self.timeout,
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ObstoreDestination)
            and other._identity() == self._identity()
            and other.prefix == self.prefix
        )

    def __hash__(self) -> int:
        return hash((self._identity(), self.prefix))

    @property
    def url(self) -> str:
        scheme = {"s3": "s3", "azure": "az", "gcs": "gs"}[self.kind]
        root = f"{scheme}://{self.bucket}"
        return f"{root}/{self.prefix}" if self.prefix else root

    def object_key(self, key: str) -> str:
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise DestinationError(f"invalid key {key!r}", location=self.url)
        return "/".join([self.prefix, *parts]) if self.prefix else "/".join(parts)

    def _location(self, full: str | None) -> str:
        scheme = self.url.partition("://")[0]
        return self.url if full is None else f"{scheme}://{self.bucket}/{full}"

    # -- the client --------------------------------------------------------------------------

    @property
    def _store(self) -> Any:
        """This process's obstore store for these settings (made on first use; the cache key
        holds digests of the secrets, never the secrets)."""
        return _STORES.get(self._identity(), self._make_store)

    def _make_store(self) -> Any:
        store_module = import_client("obstore.store", package="obstore", extra="obstore")
        config = {**self.config, **{k: s.reveal() for k, s in self._secrets.items()}}
        extra: dict[str, Any] = {}
        if self.kind == "gcs":
            account = config.pop("service_account_json", None)
            if account is None:
                config["skip_signature"] = True
            else:
                extra["credential_provider"] = _google_token_provider(account)
        client_options = {
            "allow_http": True,
            "connect_timeout": timedelta(seconds=connect_timeout(self.timeout)),
            "timeout": timedelta(seconds=self.timeout),
        }
        retry_config = {
            "max_retries": SDK_RETRIES,
            "backoff": {"init_backoff": timedelta(milliseconds=100), "base": 2},
            "retry_timeout": timedelta(seconds=4 * self.timeout),
        }
        make = {
            "s3": store_module.S3Store,
            "azure": store_module.AzureStore,
            "gcs": store_module.GCSStore,
        }[self.kind]
        return make(
            self.bucket,
            config=config,
            client_options=client_options,
            retry_config=retry_config,
            **extra,
        )

    def _call(self, what: str, full: str | None, call: Callable[[], Any]) -> Any:
        """Run one obstore call; every exception it raises goes through :func:`translate`."""
        try:
            return call()
        except Exception as exc:
            translate(exc, what, self._location(full), secrets=self._secrets.values())

    # -- Destination -------------------------------------------------------------------------

    def check(self) -> None:
        """The bucket exists and these credentials may write and delete (a probe object:
        object_store has no "head bucket")."""
        import obstore

        probe = self.object_key(f"_quixsinks_probe-{uuid.uuid4().hex}")
        self._call("put (write probe)", None, lambda: obstore.put(self._store, probe, b""))
        self._call("delete (write probe)", None, lambda: obstore.delete(self._store, probe))

    def write_bytes(self, key: str, data: bytes) -> None:
        import obstore

        full = self.object_key(key)
        self._call("put", full, lambda: obstore.put(self._store, full, data))

    def write_with(self, key: str, produce: Callable[[BinaryIO], None]) -> int:
        import obstore

        full = self.object_key(key)
        writer = self._call(
            "open_writer",
            full,
            lambda: obstore.open_writer(self._store, full, buffer_size=PART_SIZE),
        )
        stream = _CountingWriter(writer, lambda what, call: self._call(what, full, call))
        try:
            produce(stream)  # type: ignore[arg-type]
        except BaseException as exc:
            stream.abort(exc)
            raise
        stream.close()
        return stream.size

    def read_bytes(self, key: str) -> bytes:
        import obstore

        full = self.object_key(key)
        return bytes(self._call("get", full, lambda: obstore.get(self._store, full).bytes()))

    def modified(self, key: str) -> float | None:
        import obstore

        full = self.object_key(key)
        try:
            meta = self._call("head", full, lambda: obstore.head(self._store, full))
        except DestinationNotFoundError:
            return None
        return float(meta["last_modified"].timestamp())

    def exists(self, key: str) -> bool:
        return self.modified(key) is not None

    def list(self, prefix: str = "") -> list[str]:
        import obstore

        parts = [p for p in prefix.split("/") if p]
        full = "/".join([self.prefix, *parts]) if self.prefix else "/".join(parts)
        root = f"{self.prefix}/" if self.prefix else ""

        def collect() -> list[str]:
            keys: list[str] = []
            for chunk in obstore.list(self._store, prefix=full or None, chunk_size=1000):
                keys.extend(meta["path"][len(root) :] for meta in chunk)
            return keys

        return sorted(self._call("list", full or None, collect))

    def delete(self, keys: Iterable[str]) -> None:
        import obstore

        full = [self.object_key(k) for k in keys]
        if not full:
            return
        try:
            self._call("delete", full[0], lambda: obstore.delete(self._store, full))
        except DestinationNotFoundError:
            # a batch stops at the first missing key (Azure, GCS): one by one, ignoring those
            for path in full:
                with contextlib.suppress(DestinationNotFoundError):
                    self._call("delete", path, lambda p=path: obstore.delete(self._store, p))

    def move(self, src: str, dst: str) -> None:
        import obstore

        source, target = self.object_key(src), self.object_key(dst)
        self._call("rename", source, lambda: obstore.rename(self._store, source, target))

    def create_exclusive(self, key: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        full = self.object_key(key)
        try:
            obstore.put(self._store, full, data, mode="create")
            return True
        except (AlreadyExistsError, PreconditionError):
            return False
        except Exception as exc:
            translate(exc, "put (create)", self._location(full), secrets=self._secrets.values())


def _google_token_provider(account_json: str) -> Callable[[], dict[str, Any]]:
    """A GCSStore credential provider: OAuth tokens for a service account key, from the
    key's own ``token_uri`` (google-auth), refreshed when they expire."""
    import json
    import threading
    from datetime import UTC

    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    credentials = service_account.Credentials.from_service_account_info(
        json.loads(account_json),
        scopes=["https://www.googleapis.com/auth/devstorage.read_write"],
    )
    lock = threading.Lock()

    def provide() -> dict[str, Any]:
        with lock:
            if not credentials.valid:
                credentials.refresh(Request())
            expiry = credentials.expiry
            return {
                "token": credentials.token,
                "expires_at": expiry.replace(tzinfo=UTC) if expiry is not None else None,
            }

    return provide


class _CountingWriter(io.RawIOBase):
    """obstore's WritableFile as the binary stream ``write_with`` hands to a producer:
    counts the bytes (``tell``), translates errors, aborts the upload on failure."""

    def __init__(self, writer: Any, call: Callable[[str, Callable[[], Any]], Any]) -> None:
        super().__init__()
        self._writer = writer
        self._call = call
        self.size = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._call("write (multipart upload)", lambda: self._writer.write(view))
        self.size += len(view)
        return len(view)

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._call("close (complete upload)", self._writer.close)
        finally:
            super().close()

    def abort(self, exc: BaseException) -> None:
        """Leave the writer's context with ``exc``: obstore aborts the upload."""
        try:
            self._writer.__exit__(type(exc), exc, exc.__traceback__)
        except Exception:  # the producer's error is the one to report
            pass
        finally:
            super().close()


def translate(
    exc: BaseException, what: str, location: str, *, secrets: Iterable[Secret] = ()
) -> NoReturn:
    """The one error boundary of obstore: ``exc`` (raised by an obstore call) as ours.

    Exception types decide where obstore gives one; a ``GenericError`` carries its HTTP
    status only in its text (see the module docstring): that is read out of the message,
    and no ``Retry-After`` is available at all.
    """
    from obstore import exceptions as ox

    detail = scrub(str(exc).split("\n\nDebug source:")[0], secrets)
    text = f"{location}: {what} failed: {detail}"
    if isinstance(exc, FileNotFoundError | ox.NotFoundError):
        raise DestinationNotFoundError(f"{location}: no such object", location=location) from None
    if isinstance(exc, ox.PermissionDeniedError | ox.UnauthenticatedError):
        raise DestinationAccessDeniedError(text, location=location) from None
    if isinstance(exc, ox.GenericError):
        status = _status_in_text(str(exc))
        if status in _RETRYABLE_STATUS or (status is None and _transport_failure(str(exc))):
            raise RetryableError(text) from None
    raise DestinationError(text, location=location) from None


def _status_in_text(message: str) -> int | None:
    """The HTTP status in a GenericError's message (the workaround the rules forbid)."""
    found = _STATUS_TEXT.search(message)
    return int(found.group(1)) if found else None


def _transport_failure(message: str) -> bool:
    """A timeout or a broken connection, as object_store words it (text again)."""
    return any(
        marker in message
        for marker in ("error sending request", "timed out", "connection", "HTTP error")
    )
