"""Google Cloud Storage as a :class:`~quixsinks.core.destinations.Destination`.

Keys live under ``gs://<bucket>/<prefix>/``. How the commit protocol's primitives map to GCS:

* ``create_exclusive``: one single-request upload with ``ifGenerationMatch=0``; GCS
  answers 412 when the object exists, and an object becomes visible only once its
  upload is complete;
* ``move``: a server-side rewrite (looped for large objects), then a delete of the source;
* ``delete``: JSON API batches of at most 100 deletes; 404s are ignored;
* ``list``: ``objects.list`` pages of 1,000 names, followed to the end;
* ``write_with``: the output is buffered up to 8 MiB; a smaller one is sent in one
  request, a larger one as a resumable upload in 8 MiB chunks (bounded memory).

Credentials: ``service_account_json`` (the JSON text, or the path of a key file) or
Google's default credentials. ``endpoint`` (or the ``STORAGE_EMULATOR_HOST`` environment
variable) points at an emulator; without a service account the requests are then
anonymous. Secrets never appear in ``repr``, logs or error messages.

Every SDK error is translated in :meth:`GCSDestination._translate`, through Google's one
error map (:mod:`quixsinks.core.vendors.google`): missing bucket ->
:class:`GCSBucketNotFoundError`, refused or missing credentials ->
:class:`GCSBucketAccessDeniedError`, throttling (429) and service errors (5xx) ->
:class:`RetryableError` (:class:`SinkBackpressureError` when the service sends
``Retry-After``), anything else -> :class:`DestinationError`. The SDK's own retries are
limited to dropped connections on metadata calls, with a short deadline, and uploads are
not retried by the SDK at all, so that the sink's RetryPolicy decides. Every request has a
connect timeout (:attr:`GCSDestination.CONNECT_TIMEOUT` at most) and a read timeout
(``timeout``, the option ``storage_timeout_seconds``); a timeout says so.

The SDK (``google-cloud-storage``, the ``gcs`` extra) is imported only when a client is
first needed.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO, NoReturn

from .clients import ClientCache, secret_digest
from .errors import (
    DestinationError,
    DestinationNotFoundError,
    GCSBucketAccessDeniedError,
    GCSBucketNotFoundError,
    OptionError,
    QuixSinksError,
    timed_out,
)
from .storage import DEFAULT_STORAGE_TIMEOUT, Destination
from .upload import UploadTarget, upload_stream
from .vendors.google import GoogleService, classify, credentials, service_account_info
from .vendors.http import import_client

__all__ = ["GCSDestination"]

_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
#: Bucket names: 3-63 characters (up to 222 with dots), lowercase letters, digits, -_.
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")

_CLIENTS: ClientCache[Any] = ClientCache("gcs clients", lambda client: client.close())


def _close_quietly(writer: Any) -> None:
    with contextlib.suppress(Exception):
        writer.terminate()


class GCSDestination(Destination):
    """A bucket (and a prefix in it) on Google Cloud Storage.

    Args:
        bucket: the bucket's name; it must exist.
        prefix: keys are written under ``<prefix>/`` (no leading or trailing ``/`` needed).
        project: the project for the client (default: the service account's, or the
            default credentials').
        service_account_json: a service account key, as JSON text or as the path of a
            key file (secret). Without it, Google's default credentials are used.
        endpoint: the URL of an emulator (``http://127.0.0.1:9023``); requests are then
            anonymous unless a service account is given. ``STORAGE_EMULATOR_HOST`` does the
            same when no endpoint is given.
    """

    #: bytes kept in memory by ``write_with``: smaller outputs go in one request, larger
    #: ones as a resumable upload in chunks of this size (a multiple of 256 KiB)
    CHUNK_SIZE = 8 * 1024 * 1024
    #: deletes per JSON API batch request (the service's limit is 100)
    DELETE_BATCH = 100
    #: objects per list page (the service's maximum)
    PAGE_SIZE = 1000
    #: the longest wait for a connection (seconds); ``timeout`` when that is shorter
    CONNECT_TIMEOUT = 5.0
    #: how long the SDK may retry a dropped connection on a metadata call (seconds)
    SDK_RETRY_DEADLINE = 10.0

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        project: str | None = None,
        service_account_json: str | None = None,
        endpoint: str | None = None,
        timeout: float = DEFAULT_STORAGE_TIMEOUT,
    ) -> None:
        if not _BUCKET_NAME.match(bucket or ""):
            raise OptionError(
                f"invalid GCS bucket name {bucket!r}: 3 to 63 lowercase letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit",
                option="path",
                value=bucket,
                allowed="a GCS bucket name",
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.project = project
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        self.timeout = timeout
        self._service_account_json = service_account_json
        if service_account_json:  # refused here, before any data moves
            service_account_info(service_account_json)

    @classmethod
    def from_url(cls, url: str, **credentials: Any) -> GCSDestination:
        """A destination for ``gs://bucket/prefix``; ``credentials`` are the keyword
        arguments of the constructor (``project``, ``service_account_json``, ``endpoint``,
        ``timeout``)."""
        scheme, sep, rest = url.partition("://")
        bucket, _, prefix = rest.partition("/")
        if not sep or scheme.lower() != "gs" or not bucket:
            raise OptionError(
                f"option 'path': {url!r} is not a GCS URL; write gs://<bucket>/<prefix>",
                option="path",
                value=url,
                allowed=("gs://<bucket>/<prefix>",),
            )
        if not _BUCKET_NAME.match(bucket):
            raise OptionError(
                f"option 'path': {bucket!r} in {url!r} is not a valid GCS bucket name (3 to 63 "
                "lowercase letters, digits, '-', '_' or '.', starting and ending with a "
                "letter or digit)",
                option="path",
                value=url,
                allowed=("gs://<bucket>/<prefix>",),
            )
        return cls(bucket, prefix, **credentials)

    def __repr__(self) -> str:
        auth = "service account" if self._service_account_json else "default credentials"
        if self._service_account_json is None and self._emulator():
            auth = "anonymous"
        endpoint = f", endpoint={self.endpoint!r}" if self.endpoint else ""
        return f"GCSDestination({self.url!r}{endpoint}, {auth})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GCSDestination) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)  # no client is ever kept on the instance

    def _identity(self) -> tuple[Any, ...]:
        return (
            self.bucket,
            self.prefix,
            self.project,
            self.endpoint,
            self._secret_digest(),
            self.timeout,
        )

    def _secret_digest(self) -> str | None:
        if self._service_account_json is None:
            return None
        return secret_digest(self._service_account_json)

    @property
    def url(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}" if self.prefix else f"gs://{self.bucket}"

    # -- keys -----------------------------------------------------------------------------

    def name(self, key: str) -> str:
        """The object name of ``key`` (below the prefix)."""
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise DestinationError(f"invalid key {key!r}", location=self.url)
        rel = "/".join(parts)
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _where(self, key: str) -> str:
        return f"gs://{self.bucket}/{self.name(key)}"

    # -- the client -------------------------------------------------------------------------

    def _emulator(self) -> str | None:
        return self.endpoint or os.environ.get("STORAGE_EMULATOR_HOST") or None

    def _client(self) -> Any:
        key = ("gcs", self.project, self.endpoint, self._emulator(), self._secret_digest())
        return _CLIENTS.get(key, self._make_client)

    def _make_client(self) -> Any:
        import_client("google.cloud.storage", package="google-cloud-storage", extra="gcs")
        from google.cloud import storage

        creds = credentials(
            self._service_account_json or None, scopes=_SCOPES, anonymous=bool(self._emulator())
        )
        project = self.project or getattr(creds, "project_id", None)
        if creds is None:  # application-default credentials, refused here if none
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError

            try:
                creds, default_project = google.auth.default(scopes=_SCOPES)
            except DefaultCredentialsError as exc:
                error = self._classify(exc, self.url, "object")
            else:
                error = None
                project = project or default_project
            if error is not None:
                raise error from None
        # without an endpoint the SDK reads STORAGE_EMULATOR_HOST itself
        options = {"api_endpoint": self.endpoint} if self.endpoint else None
        client = storage.Client(project=project, credentials=creds, client_options=options)
        # Newer SDKs fetch each bucket's metadata in a background thread, for tracing
        # attributes only: one more request per bucket and process, which needs
        # storage.buckets.get (a writer's role may lack it). Not wanted on executors.
        if getattr(client, "_bucket_metadata_cache", None) is not None:
            client._bucket_metadata_cache = None
        return client

    def _bucket(self) -> Any:
        return self._client().bucket(self.bucket)

    def _blob(self, key: str) -> Any:
        return self._bucket().blob(self.name(key), chunk_size=self.CHUNK_SIZE)

    @property
    def _timeout(self) -> tuple[float, float]:
        return (min(self.CONNECT_TIMEOUT, self.timeout), self.timeout)

    def _retry(self) -> Any:
        """The SDK's own retry for metadata calls: dropped connections only, briefly."""
        from google.api_core.retry import Retry, if_exception_type
        from requests.exceptions import ConnectionError as RequestsConnectionError

        return Retry(
            predicate=if_exception_type(RequestsConnectionError, ConnectionError),
            initial=0.1,
            maximum=1.0,
            multiplier=2.0,
            timeout=self.SDK_RETRY_DEADLINE,
        )

    # -- the one error boundary -----------------------------------------------------------------

    @contextlib.contextmanager
    def _translate(self, location: str, *, missing: str = "object") -> Iterator[None]:
        """Map SDK errors to quixsinks errors. ``missing`` says what a 404 means here:
        ``"object"`` (unless the service says it is the bucket) or ``"bucket"``."""
        try:
            yield
        except QuixSinksError:
            raise
        except Exception as exc:  # only SDK errors are mapped, the rest re-raised as is
            self._raise_translated(exc, location, missing)

    def _raise_translated(self, exc: Exception, location: str, missing: str) -> NoReturn:
        error = self._classify(exc, location, missing)
        if error is None:
            raise exc
        # the SDK's exception stays chained where it helps (a server's answer), not where
        # the error is the user's to fix
        cause = (
            None if isinstance(error, (GCSBucketAccessDeniedError, GCSBucketNotFoundError)) else exc
        )
        raise error from cause

    def _classify(self, exc: BaseException, location: str, missing: str) -> QuixSinksError | None:
        service = GoogleService(
            name="Google Cloud Storage",
            roles="the credentials need storage.objects.create, get, list and delete on the "
            "bucket (e.g. the role Storage Object Admin)",
            timed_out=timed_out(self.timeout, "storage_timeout_seconds"),
            denied=GCSBucketAccessDeniedError,
            hook=lambda e, where: self._gcs_errors(e, where, missing, service),
        )
        return classify(exc, location, service)

    def _gcs_errors(
        self, exc: BaseException, location: str, missing: str, service: GoogleService
    ) -> QuixSinksError | None:
        """GCS's own cases: a failed resumable-upload chunk (the JSON API's errors in
        another class), and a 404 that means the bucket."""
        from google.api_core import exceptions as api
        from google.cloud.storage.exceptions import InvalidResponse

        response = getattr(exc, "response", None)
        if isinstance(exc, InvalidResponse) and response is not None:
            converted = api.from_http_status(  # type: ignore[no-untyped-call]
                response.status_code, _reason(response), response=response
            )
            return classify(converted, location, service)
        if not isinstance(exc, api.NotFound):
            return None
        # the JSON API gives a missing bucket and a missing object the same code
        if missing == "bucket" or "bucket" in (exc.message or "").lower():
            return GCSBucketNotFoundError(
                f"gs://{self.bucket}: the bucket does not exist; create it first, or fix "
                "the bucket name in option 'path'",
                location=f"gs://{self.bucket}",
            )
        return DestinationNotFoundError(f"{location}: no such object", location=location)

    # -- Destination ----------------------------------------------------------------------------

    def check(self) -> None:
        """The bucket exists and we may create and delete objects under the prefix."""
        probe = self._blob(f"_quixsinks-probe-{uuid.uuid4().hex}")
        where = f"gs://{self.bucket}/{probe.name}"
        with self._translate(where, missing="bucket"):
            probe.upload_from_string(b"", if_generation_match=0, retry=None, timeout=self._timeout)
        with self._translate(where, missing="bucket"), contextlib.suppress(_not_found()):
            probe.delete(retry=self._retry(), timeout=self._timeout)

    def create_root(self) -> None:
        """Create the bucket; one that exists already is fine."""
        from google.api_core.exceptions import Conflict

        with self._translate(f"gs://{self.bucket}"), contextlib.suppress(Conflict):
            self._client().create_bucket(self.bucket)

    def write_bytes(self, key: str, data: bytes) -> None:
        blob = self._blob(key)
        with self._translate(self._where(key), missing="bucket"):
            blob.upload_from_string(
                data, content_type="application/octet-stream", retry=None, timeout=self._timeout
            )

    def write_with(self, key: str, produce: Callable[[BinaryIO], None]) -> int:
        return upload_stream(_ResumableUpload(self, key), produce, part_size=self.CHUNK_SIZE)

    def read_bytes(self, key: str) -> bytes:
        blob = self._blob(key)
        with self._translate(self._where(key)):
            data: bytes = blob.download_as_bytes(retry=None, timeout=self._timeout)
        return data

    def exists(self, key: str) -> bool:
        blob = self._blob(key)
        with self._translate(self._where(key), missing="bucket"):
            return bool(blob.exists(retry=self._retry(), timeout=self._timeout))

    def modified(self, key: str) -> float | None:
        blob = self._blob(key)
        with self._translate(self._where(key)):
            try:
                blob.reload(retry=self._retry(), timeout=self._timeout)
            except _not_found() as exc:
                if "bucket" in (getattr(exc, "message", "") or "").lower():
                    raise
                return None
        updated = blob.updated
        return None if updated is None else float(updated.timestamp())

    def list(self, prefix: str = "") -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        root = f"{self.name(prefix)}/" if prefix.strip("/") else base
        keys: list[str] = []
        with self._translate(f"gs://{self.bucket}/{root}", missing="bucket"):
            blobs = self._client().list_blobs(
                self.bucket,
                prefix=root or None,
                page_size=self.PAGE_SIZE,
                fields="items(name),nextPageToken",
                retry=self._retry(),
                timeout=self._timeout,
            )
            for blob in blobs:
                keys.append(blob.name[len(base) :])
        return sorted(keys)

    def delete(self, keys: Iterable[str]) -> None:
        names = list(dict.fromkeys(self.name(k) for k in keys))
        for start in range(0, len(names), self.DELETE_BATCH):
            self._delete_batch(names[start : start + self.DELETE_BATCH])

    def _delete_batch(self, names: Sequence[str]) -> None:
        from google.api_core.exceptions import from_http_response

        client, bucket = self._client(), self._bucket()
        where = f"gs://{self.bucket}/{names[0]}" + (f" (+{len(names) - 1})" if names[1:] else "")
        with self._translate(where, missing="bucket"):
            if len(names) == 1:
                with contextlib.suppress(_not_found()):
                    bucket.blob(names[0]).delete(retry=self._retry(), timeout=self._timeout)
                return
            with client.batch(raise_exception=False) as batch:
                for name in names:
                    bucket.blob(name).delete(timeout=self._timeout)
            # the SDK keeps the sub-responses on the batch (one per delete, in order)
            for response in batch._responses:
                if response.status_code >= 300 and response.status_code != 404:
                    raise from_http_response(response)  # type: ignore[no-untyped-call]

    def move(self, src: str, dst: str) -> None:
        source, target = self._blob(src), self._blob(dst)
        with self._translate(self._where(src)):
            token, _, _ = target.rewrite(source, retry=None, timeout=self._timeout)
            while token is not None:  # large objects are rewritten in several calls
                token, _, _ = target.rewrite(source, token=token, retry=None, timeout=self._timeout)
            with contextlib.suppress(_not_found()):  # a concurrent mover deleted it already
                source.delete(retry=self._retry(), timeout=self._timeout)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        blob = self._blob(key)
        with self._translate(self._where(key), missing="bucket"):
            try:
                # one request: GCS makes the object visible only once it is complete
                blob.upload_from_string(
                    data,
                    content_type="application/octet-stream",
                    if_generation_match=0,
                    retry=None,
                    timeout=self._timeout,
                )
            except PreconditionFailed:
                return False
        return True


class _ResumableUpload(UploadTarget):
    """One object for ``write_with``: a small output is one upload; a larger one is a
    resumable upload fed in ``CHUNK_SIZE`` chunks (the SDK's BlobWriter), which becomes
    visible only when it is closed."""

    def __init__(self, destination: GCSDestination, key: str) -> None:
        self.destination = destination
        self.key = key
        self.writer: Any = None

    def put_whole(self, data: bytes) -> None:
        self.destination.write_bytes(self.key, data)

    def begin(self) -> None:
        blob = self.destination._blob(self.key)
        with self.destination._translate(self.destination._where(self.key), missing="bucket"):
            self.writer = blob.open(
                "wb",
                chunk_size=self.destination.CHUNK_SIZE,
                content_type="application/octet-stream",
                retry=None,
                timeout=self.destination._timeout,
            )

    def put_part(self, number: int, data: bytes) -> None:
        with self.destination._translate(self.destination._where(self.key), missing="bucket"):
            self.writer.write(data)

    def complete(self, parts: list[Any], size: int) -> None:
        with self.destination._translate(self.destination._where(self.key), missing="bucket"):
            self.writer.close()
        self.writer = None

    def abort(self) -> None:
        """Cancel a resumable upload that will not be finished (nothing becomes visible)."""
        if self.writer is not None:
            _close_quietly(self.writer)
            self.writer = None


def _not_found() -> type[Exception]:
    from google.api_core.exceptions import NotFound

    return NotFound


def _reason(response: Any) -> str:
    try:
        error = response.json().get("error", {})
        return str(error.get("message") or response.reason or "")
    except Exception:
        return str(getattr(response, "reason", "") or "")
