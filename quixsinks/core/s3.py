"""S3 (and S3-compatible stores: MinIO, Ceph, R2...) as a :class:`Destination`.

Keys live under ``s3://<bucket>/<prefix>/``. The commit protocol's primitives map to:

* ``create_exclusive``: ``PutObject`` with ``If-None-Match: *`` (412 -> False). A PutObject
  is atomic, so the marker's content is complete when its key appears;
* ``move``: server-side ``CopyObject`` (multipart ``UploadPartCopy`` above 5 GiB), then
  ``DeleteObject``;
* ``write_with``: core's streaming upload writer (:mod:`quixsinks.core.upload`) with
  multipart parts of at least 8 MiB (one ``PutObject`` when the whole object is smaller),
  so memory stays bounded;
* ``list``: ``ListObjectsV2``, paginated; ``delete``: ``DeleteObjects``, 1,000 keys a call.

Credentials: explicit keywords win; otherwise boto3's default chain (``AWS_ACCESS_KEY_ID``...,
profiles, instance roles) runs where the client is made. The region is ``region_name``, else
``AWS_REGION`` / ``AWS_DEFAULT_REGION``. Secrets are never shown in reprs, logs or errors.

Every SDK error is translated in :meth:`S3Destination._sdk` (the one boundary, through the
AWS error map of :mod:`quixsinks.core.vendors.aws` with S3's hook): a missing bucket ->
:class:`S3BucketNotFoundError`; refused or wrong credentials ->
:class:`S3BucketAccessDeniedError`; throttling and server errors -> :class:`RetryableError`
(:class:`SinkBackpressureError` when the answer says how long to wait), so the sink's
:class:`~quixsinks.core.backpressure.RetryPolicy` is in charge; the SDK itself retries once
at most (a driver's publish calls the store outside any RetryPolicy), with a connect
timeout of :data:`CONNECT_TIMEOUT` at most and a read timeout of ``timeout``
(``storage_timeout_seconds``); a timeout says so. Anything else -> :class:`DestinationError`
with the location.

boto3 is imported lazily (the ``s3`` extra); clients live in a per-process
:class:`~quixsinks.core.clients.ClientCache`, never on the instance.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, cast

from .backpressure import RetryPolicy
from .clients import ClientCache, Secret
from .errors import (
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    QuixSinksError,
    S3BucketAccessDeniedError,
    S3BucketNotFoundError,
)
from .storage import DEFAULT_STORAGE_TIMEOUT, Destination
from .upload import UploadTarget, upload_stream
from .vendors.aws import AwsService, ClientErrorInfo, client_error_info, make_client, translate

__all__ = ["S3Destination"]

#: Multipart parts are at least this big (S3's minimum is 5 MiB, except the last part).
PART_SIZE = 8 * 1024 * 1024
#: S3 allows 10,000 parts: the part size doubles every this many parts.
_PARTS_PER_SIZE = 1000
#: Largest object one CopyObject may copy; above it, UploadPartCopy.
COPY_LIMIT = 5 * 1024**3
#: Range of one UploadPartCopy.
COPY_PART_SIZE = 512 * 1024**2
#: DeleteObjects takes at most this many keys.
DELETE_BATCH = 1000
#: The SDK's own attempts per call (the first included): our RetryPolicy does the rest.
SDK_MAX_ATTEMPTS = 2
#: The longest wait for a connection (seconds); ``timeout`` when that is shorter.
CONNECT_TIMEOUT = 5.0

_SCHEMES = ("s3", "s3a")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_NOT_FOUND_KEY = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchUpload"})
#: A conditional put racing another one of the same key (409 ConditionalRequestConflict)
#: is asked again: S3 then answers 412 (the other one won) or 200.
_CONFLICT_POLICY = RetryPolicy(max_attempts=5, initial_backoff=0.05, deadline=10.0, jitter=False)

_CLIENTS: ClientCache[Any] = ClientCache("s3 clients", lambda client: client.close())


def _digest(secret: Secret | None) -> str | None:
    return None if secret is None else secret.digest()


class S3Destination(Destination):
    """Objects under ``s3://bucket/prefix`` on AWS S3 or an S3-compatible store.

    Args:
        bucket: the bucket (it must exist: :meth:`check` says so otherwise).
        prefix: a folder-like prefix under which every key lives ('' for the bucket root).
        endpoint_url: another S3-compatible service (MinIO, Ceph, a test server); uses
            path-style addressing and sends checksums only where the API requires them,
            as most of those stores expect.
        region_name: the bucket's region; default ``AWS_REGION`` / ``AWS_DEFAULT_REGION``.
        aws_access_key_id, aws_secret_access_key, aws_session_token: explicit
            credentials; without them boto3's default chain is used.
        timeout: seconds to wait for an answer to one request (``storage_timeout_seconds``).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        timeout: float = DEFAULT_STORAGE_TIMEOUT,
    ) -> None:
        if not bucket or "/" in bucket:
            raise ValueError(f"invalid S3 bucket name {bucket!r}")
        self.bucket = bucket
        self.prefix = "/".join(p for p in prefix.split("/") if p)
        self.endpoint_url = endpoint_url
        self.region_name = (
            region_name or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        )
        self.aws_access_key_id = aws_access_key_id
        self._secret_access_key = Secret.wrap(aws_secret_access_key)
        self._session_token = Secret.wrap(aws_session_token)
        self.timeout = timeout

    @classmethod
    def from_url(cls, url: str, **credentials: Any) -> S3Destination:
        """The destination an ``s3://bucket/prefix`` (or ``s3a://``) URL names.

        ``credentials`` are the constructor's keywords (``endpoint_url``, ``region_name``,
        ``aws_access_key_id``...). A malformed URL is an :class:`OptionError` on ``path``.
        """
        allowed = ("s3://bucket/prefix", "s3a://bucket/prefix")
        scheme, sep, rest = url.partition("://")
        bucket, _, prefix = rest.partition("/")
        problem = None
        if not sep or scheme.lower() not in _SCHEMES:
            problem = "it is not an s3:// or s3a:// URL"
        elif not bucket:
            problem = "it names no bucket"
        elif "@" in bucket or ":" in bucket:
            problem = "credentials and ports do not belong in the URL (use the options)"
        elif "?" in rest or "#" in rest:
            problem = "S3 URLs take no query string or fragment"
        elif not _BUCKET_NAME.match(bucket) or ".." in bucket:
            problem = (
                f"{bucket!r} is not a valid bucket name (3-63 lowercase letters, digits, "
                "dots and hyphens, starting and ending with a letter or digit)"
            )
        if problem:
            shown = re.sub(r"(://)[^/@]*@", r"\1***@", url)  # never echo credentials
            raise OptionError(
                f"option 'path': {shown!r} is not a valid S3 location: {problem}; "
                "write e.g. s3://my-bucket/some/prefix",
                option="path",
                value=shown,
                allowed=allowed,
            )
        return cls(bucket, prefix, **credentials)

    # -- identity ---------------------------------------------------------------------------

    def __repr__(self) -> str:
        extras = "".join(
            f", {name}={value!r}"
            for name, value in (
                ("endpoint_url", self.endpoint_url),
                ("region_name", self.region_name),
                ("aws_access_key_id", self.aws_access_key_id),
            )
            if value is not None
        )
        if self._secret_access_key is not None:
            extras += ", aws_secret_access_key='***'"
        if self._session_token is not None:
            extras += ", aws_session_token='***'"
        return f"S3Destination({self.bucket!r}, {self.prefix!r}{extras})"

    def _identity(self) -> tuple[Any, ...]:
        return (
            self.bucket,
            self.prefix,
            self.endpoint_url,
            self.region_name,
            self.aws_access_key_id,
            _digest(self._secret_access_key),
            _digest(self._session_token),
            self.timeout,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, S3Destination) and other._identity() == self._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def object_key(self, key: str) -> str:
        """The full S3 key of ``key``; ``.``/``..`` components are refused."""
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise DestinationError(f"invalid key {key!r}", location=self.url)
        return "/".join([self.prefix, *parts]) if self.prefix else "/".join(parts)

    def _location(self, key: str | None = None) -> str:
        if key is None:
            return self.url
        return f"s3://{self.bucket}/{key}"

    # -- the client ---------------------------------------------------------------------------

    def _client_key(self) -> tuple[Any, ...]:
        return ("s3", self.endpoint_url, *self._identity()[3:])

    @property
    def _client(self) -> Any:
        """This process's boto3 S3 client for these settings (made on first use)."""
        return _CLIENTS.get(self._client_key(), self._make_client)

    def _make_client(self) -> Any:
        options: dict[str, Any] = {"max_pool_connections": 32}
        if self.endpoint_url is not None:
            # MinIO-style stores: bucket in the path, not the host name; checksums only
            # where the S3 API requires them (newer botocore sends CRC32 on every upload,
            # which several S3-compatible stores refuse).
            options["s3"] = {"addressing_style": "path"}
            options["request_checksum_calculation"] = "when_required"
            options["response_checksum_validation"] = "when_required"
        return make_client(
            "s3",
            extra="s3",
            region_name=self.region_name,
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.aws_access_key_id,
            aws_secret_access_key=(
                self._secret_access_key.reveal() if self._secret_access_key else None
            ),
            aws_session_token=self._session_token.reveal() if self._session_token else None,
            connect_timeout=min(CONNECT_TIMEOUT, self.timeout),
            read_timeout=self.timeout,
            max_attempts=SDK_MAX_ATTEMPTS,
            **options,
        )

    # -- the error boundary -----------------------------------------------------------------

    @contextlib.contextmanager
    def _sdk(self, what: str, key: str | None = None) -> Iterator[None]:
        """Translate every SDK error of ``what`` (on ``key``, or the bucket) to ours."""
        location = self._location(key)
        try:
            yield
        except QuixSinksError:
            raise
        except Exception as exc:
            error = translate(exc, f"{location}: {what}", self._service(location, key))
            if error is exc:
                raise
            raise error from None

    def _service(self, location: str, key: str | None) -> AwsService:
        """S3's hook of the AWS error map: a missing bucket or object, whose bucket."""

        def classify(info: ClientErrorInfo, text: str) -> QuixSinksError | None:
            if info.code == "NoSuchBucket" or (key is None and info.code in ("404", "NotFound")):
                return S3BucketNotFoundError(
                    f"{self.url}: the bucket {self.bucket!r} does not exist "
                    f"(or not in this region / endpoint); create it first ({info.code})",
                    location=self.url,
                )
            if info.code in _NOT_FOUND_KEY:
                return DestinationNotFoundError(f"{location}: no such object", location=location)
            return None

        return AwsService(
            location=location,
            classify=classify,
            denied=lambda message, where: S3BucketAccessDeniedError(message, location=where),
            denied_advice="check the credentials and that they may read, write, list and "
            f"delete in bucket {self.bucket!r}",
            timeout=self.timeout,
            timeout_option="storage_timeout_seconds",
            secrets=(self._secret_access_key, self._session_token),
        )

    # -- Destination ----------------------------------------------------------------------------

    def check(self) -> None:
        """The bucket exists and these credentials may write and delete under the prefix."""
        with self._sdk("HeadBucket"):
            self._client.head_bucket(Bucket=self.bucket)
        probe = self.object_key(f"_quixsinks_probe-{uuid.uuid4().hex}")
        with self._sdk("PutObject (write probe)", probe):
            self._client.put_object(Bucket=self.bucket, Key=probe, Body=b"")
        with self._sdk("DeleteObject (write probe)", probe):
            self._client.delete_object(Bucket=self.bucket, Key=probe)

    def create_root(self) -> None:
        """Create the bucket (in ``region_name``); an existing one of ours is fine."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if self.region_name and self.region_name != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region_name}
        from botocore.exceptions import ClientError

        with self._sdk("CreateBucket"):
            try:
                self._client.create_bucket(**kwargs)
            except ClientError as exc:
                if client_error_info(exc).code != "BucketAlreadyOwnedByYou":
                    raise

    def write_bytes(self, key: str, data: bytes) -> None:
        full = self.object_key(key)
        with self._sdk("PutObject", full):
            self._client.put_object(Bucket=self.bucket, Key=full, Body=data)

    def write_with(self, key: str, produce: Callable[[BinaryIO], None]) -> int:
        return upload_stream(
            _Upload(self, self.object_key(key)),
            produce,
            part_size=PART_SIZE,
            grow_every=_PARTS_PER_SIZE,
        )

    def read_bytes(self, key: str) -> bytes:
        full = self.object_key(key)
        with self._sdk("GetObject", full):
            body = self._client.get_object(Bucket=self.bucket, Key=full)["Body"]
            try:
                data: bytes = body.read()
            finally:
                body.close()
            return data

    def _head(self, full: str) -> dict[str, Any] | None:
        try:
            with self._sdk("HeadObject", full):
                head: dict[str, Any] = self._client.head_object(Bucket=self.bucket, Key=full)
                return head
        except S3BucketNotFoundError:
            raise
        except DestinationNotFoundError:
            return None

    def exists(self, key: str) -> bool:
        return self._head(self.object_key(key)) is not None

    def modified(self, key: str) -> float | None:
        head = self._head(self.object_key(key))
        return None if head is None else float(head["LastModified"].timestamp())

    def _list_prefix(self, prefix: str) -> str:
        parts = [p for p in prefix.split("/") if p]
        folder = "/".join([self.prefix, *parts]) if self.prefix else "/".join(parts)
        return folder + "/" if folder else ""

    def list(self, prefix: str = "") -> list[str]:
        full = self._list_prefix(prefix)
        root = self._list_prefix("")
        keys: list[str] = []
        with self._sdk("ListObjectsV2", full or None):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full
            )
            for page in pages:
                keys.extend(item["Key"][len(root) :] for item in page.get("Contents", ()))
        return sorted(keys)

    def delete(self, keys: Iterable[str]) -> None:
        full = [self.object_key(k) for k in keys]
        for start in range(0, len(full), DELETE_BATCH):
            chunk = full[start : start + DELETE_BATCH]
            with self._sdk("DeleteObjects", chunk[0]):
                answer = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
                )
            errors = [e for e in answer.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
            if errors:  # per-key failures come in a 200 answer: through the boundary too
                from botocore.exceptions import ClientError

                first = errors[0]
                error = {"Code": first.get("Code", ""), "Message": first.get("Message", "")}
                with self._sdk(f"DeleteObjects ({len(errors)} key(s) failed)", first.get("Key")):
                    # cast: boto3-stubs (when installed) type the response as a TypedDict
                    raise ClientError(cast(Any, {"Error": error}), "DeleteObjects")

    def move(self, src: str, dst: str) -> None:
        source, target = self.object_key(src), self.object_key(dst)
        head = self._head(source)
        if head is None:
            location = self._location(source)
            raise DestinationNotFoundError(f"{location}: no such object", location=location)
        size = int(head.get("ContentLength", 0))
        copy_source = {"Bucket": self.bucket, "Key": source}
        if size <= COPY_LIMIT:
            with self._sdk("CopyObject", source):
                self._client.copy_object(Bucket=self.bucket, Key=target, CopySource=copy_source)
        else:
            self._multipart_copy(copy_source, target, size)
        with self._sdk("DeleteObject", source):
            self._client.delete_object(Bucket=self.bucket, Key=source)

    def _multipart_copy(self, copy_source: dict[str, str], target: str, size: int) -> None:
        with self._sdk("CreateMultipartUpload", target):
            upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=target)[
                "UploadId"
            ]
        try:
            parts = []
            for number, start in enumerate(range(0, size, COPY_PART_SIZE), start=1):
                end = min(start + COPY_PART_SIZE, size) - 1
                with self._sdk("UploadPartCopy", target):
                    answer = self._client.upload_part_copy(
                        Bucket=self.bucket,
                        Key=target,
                        UploadId=upload_id,
                        PartNumber=number,
                        CopySource=copy_source,
                        CopySourceRange=f"bytes={start}-{end}",
                    )
                parts.append({"PartNumber": number, "ETag": answer["CopyPartResult"]["ETag"]})
            with self._sdk("CompleteMultipartUpload", target):
                self._client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=target,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
        except BaseException:
            self._abort_upload(target, upload_id)
            raise

    def _abort_upload(self, full: str, upload_id: str) -> None:
        with contextlib.suppress(Exception):
            self._client.abort_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload_id)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        full = self.object_key(key)
        return _CONFLICT_POLICY.call(
            lambda: self._put_if_absent(full, data), what=f"{self._location(full)}: PutObject"
        )

    def _put_if_absent(self, full: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        with self._sdk("PutObject (If-None-Match: *)", full):
            try:
                self._client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
            except ClientError as exc:
                info = client_error_info(exc)
                if info.code == "PreconditionFailed" or info.status == 412:
                    return False
                raise
        return True


class _Upload(UploadTarget):
    """One object streamed to S3: one PutObject when small, else a multipart upload (its
    parts uploaded in order); an aborted upload leaves nothing behind."""

    def __init__(self, destination: S3Destination, full_key: str) -> None:
        self.destination = destination
        self.key = full_key
        self.upload_id: str | None = None

    def put_whole(self, data: bytes) -> None:
        dest = self.destination
        with dest._sdk("PutObject", self.key):
            dest._client.put_object(Bucket=dest.bucket, Key=self.key, Body=data)

    def begin(self) -> None:
        dest = self.destination
        with dest._sdk("CreateMultipartUpload", self.key):
            answer = dest._client.create_multipart_upload(Bucket=dest.bucket, Key=self.key)
        self.upload_id = answer["UploadId"]

    def put_part(self, number: int, data: bytes) -> dict[str, Any]:
        dest = self.destination
        with dest._sdk("UploadPart", self.key):
            answer = dest._client.upload_part(
                Bucket=dest.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=data,
            )
        return {"PartNumber": number, "ETag": answer["ETag"]}

    def complete(self, parts: list[Any], size: int) -> None:
        dest = self.destination
        with dest._sdk("CompleteMultipartUpload", self.key):
            dest._client.complete_multipart_upload(
                Bucket=dest.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": parts},
            )

    def abort(self) -> None:
        if self.upload_id is not None:
            self.destination._abort_upload(self.key, self.upload_id)
            self.upload_id = None
