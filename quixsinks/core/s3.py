"""S3 (and S3-compatible stores) as a :class:`~quixsinks.core.destinations.Destination`.

The commit protocol's primitives on S3: ``create_exclusive`` is ``PutObject`` with
``If-None-Match: *`` (a 412 means another committer won), ``move`` is a server-side copy
(multipart ``UploadPartCopy`` above 5 GB) then a delete, ``list`` pages through
``ListObjectsV2``, and ``write_with`` streams through a multipart upload in bounded memory.
boto3 is imported lazily; its clients live in a process-wide ClientCache (never pickled)
with short timeouts and no retries of its own, so the sink's RetryPolicy is in charge.
Every botocore error is translated in :func:`_translate`.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, cast

from .clients import ClientCache
from .destinations import Destination
from .errors import (
    DestinationError,
    DestinationNotFoundError,
    MissingDependencyError,
    OptionError,
    RetryableError,
    S3BucketAccessDeniedError,
    S3BucketNotFoundError,
    SinkBackpressureError,
)

__all__ = ["S3Destination"]

#: Multipart part size (S3 needs >= 5 MiB for every part but the last).
PART_BYTES = 8 * 1024 * 1024

_CLIENTS: ClientCache[Any] = ClientCache("s3 clients", lambda c: c.close())
_THROTTLE = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError"}
_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}


def _boto3() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise MissingDependencyError("boto3", "s3") from exc
    return boto3


class S3Destination(Destination):
    """Keys under ``s3://bucket/prefix``; credentials from the keywords or boto3's chain."""

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
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self._credentials = (aws_access_key_id, aws_secret_access_key, aws_session_token)

    @classmethod
    def from_url(cls, url: str, **credentials: Any) -> S3Destination:
        scheme, _, rest = url.partition("://")
        bucket, _, prefix = rest.partition("/")
        if scheme.lower() not in ("s3", "s3a") or not bucket:
            raise OptionError(
                f"option 'path': {url!r} is not an S3 URL like s3://bucket/prefix",
                option="path",
                value=url,
            )
        return cls(bucket, prefix, **credentials)

    def __repr__(self) -> str:
        return f"S3Destination({self.url!r}, endpoint_url={self.endpoint_url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, S3Destination) and (self.url, self.endpoint_url) == (
            other.url,
            other.endpoint_url,
        )

    def __hash__(self) -> int:
        return hash(self.url)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    # ------------------------------------------------------------------ plumbing

    def _client(self) -> Any:
        key = (self.endpoint_url, self.region_name, _digest(self._credentials))
        return _CLIENTS.get(key, self._new_client)

    def _new_client(self) -> Any:
        boto3 = _boto3()
        from botocore.config import Config

        key_id, secret, token = self._credentials
        session = boto3.session.Session(
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            aws_session_token=token,
            region_name=self.region_name,
        )
        config = Config(
            connect_timeout=10,
            read_timeout=60,
            retries={"max_attempts": 2, "mode": "standard"},
            max_pool_connections=16,
        )
        return session.client("s3", endpoint_url=self.endpoint_url, config=config)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @contextlib.contextmanager
    def _translate(self, key: str = "") -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            raise _translate(exc, self.bucket, f"{self.url}/{key}" if key else self.url) from exc

    # ------------------------------------------------------------------ Destination

    def check(self) -> None:
        probe = "_quixsinks/probe"
        with self._translate():
            self._client().head_bucket(Bucket=self.bucket)
        self.write_bytes(probe, b"")
        self.delete([probe])

    def write_bytes(self, key: str, data: bytes) -> None:
        with self._translate(key):
            self._client().put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def write_with(self, key: str, produce: Callable[[BinaryIO], None]) -> int:
        writer = _MultipartWriter(self, self._key(key))
        try:
            with self._translate(key):
                produce(cast(BinaryIO, writer))
                writer.finish()
        except BaseException:
            writer.cancel()
            raise
        return writer.size

    def read_bytes(self, key: str) -> bytes:
        with self._translate(key):
            body = self._client().get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            data: bytes = body.read()
            return data

    def exists(self, key: str) -> bool:
        return self.modified(key) is not None

    def modified(self, key: str) -> float | None:
        try:
            with self._translate(key):
                head = self._client().head_object(Bucket=self.bucket, Key=self._key(key))
        except DestinationNotFoundError:
            return None
        return float(head["LastModified"].timestamp())

    def list(self, prefix: str = "") -> list[str]:
        base = self._key(prefix.strip("/")) if prefix else self.prefix
        full = f"{base}/" if base else ""
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys: list[str] = []
        with self._translate(prefix):
            pages = self._client().get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(item["Key"][strip:] for item in page.get("Contents", ()))
        return sorted(keys)

    def delete(self, keys: Iterable[str]) -> None:
        batch = [{"Key": self._key(k)} for k in keys]
        with self._translate():
            for start in range(0, len(batch), 1000):  # DeleteObjects takes 1,000 at most
                answer = self._client().delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": batch[start : start + 1000], "Quiet": True},
                )
                errors = [e for e in answer.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
                if errors:
                    raise DestinationError(
                        f"{self.url}: could not delete {errors[0].get('Key')}: "
                        f"{errors[0].get('Code')} {errors[0].get('Message', '')}",
                        location=self.url,
                    )

    def move(self, src: str, dst: str) -> None:
        client = self._client()
        source = {"Bucket": self.bucket, "Key": self._key(src)}
        with self._translate(src):
            try:
                client.copy_object(Bucket=self.bucket, Key=self._key(dst), CopySource=source)
            except Exception as exc:  # over 5 GB: S3 wants a multipart copy
                if "InvalidRequest" not in str(getattr(exc, "response", {}).get("Error", {})):
                    raise
                size = client.head_object(**source)["ContentLength"]
                _multipart_copy(client, self.bucket, self._key(dst), source, size)
            client.delete_object(**source)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        try:
            with self._translate(key):
                self._client().put_object(
                    Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*"
                )
        except _PreconditionFailed:
            return False
        return True


class _PreconditionFailed(DestinationError):
    """412 (or 409 ConditionalRequestConflict) on a conditional write: the key exists."""


class _MultipartWriter(io.RawIOBase):
    """A write-only stream: one PutObject when small, else a multipart upload in
    PART_BYTES parts (memory bounded by one part)."""

    def __init__(self, dest: S3Destination, key: str) -> None:
        self.dest = dest
        self.key = key
        self.buffer = bytearray()
        self.parts: list[dict[str, Any]] = []
        self.upload_id: str | None = None
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.buffer += view
        self.size += len(view)
        while len(self.buffer) >= PART_BYTES:
            self._upload_part(bytes(self.buffer[:PART_BYTES]))
            del self.buffer[:PART_BYTES]
        return len(view)

    def tell(self) -> int:
        return self.size

    def _upload_part(self, data: bytes) -> None:
        client = self.dest._client()
        if self.upload_id is None:
            self.upload_id = client.create_multipart_upload(Bucket=self.dest.bucket, Key=self.key)[
                "UploadId"
            ]
        number = len(self.parts) + 1
        answer = client.upload_part(
            Bucket=self.dest.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=data,
        )
        self.parts.append({"PartNumber": number, "ETag": answer["ETag"]})

    def finish(self) -> None:
        client = self.dest._client()
        if self.upload_id is None:
            client.put_object(Bucket=self.dest.bucket, Key=self.key, Body=bytes(self.buffer))
            return
        if self.buffer:
            self._upload_part(bytes(self.buffer))
            self.buffer.clear()
        client.complete_multipart_upload(
            Bucket=self.dest.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": self.parts},
        )
        self.upload_id = None

    def cancel(self) -> None:
        if self.upload_id is not None:
            with contextlib.suppress(Exception):
                self.dest._client().abort_multipart_upload(
                    Bucket=self.dest.bucket, Key=self.key, UploadId=self.upload_id
                )
            self.upload_id = None


def _multipart_copy(client: Any, bucket: str, key: str, source: dict[str, str], size: int) -> None:
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    part = 1024**3
    try:
        for number, start in enumerate(range(0, size, part), 1):
            end = min(start + part, size) - 1
            answer = client.upload_part_copy(
                Bucket=bucket,
                Key=key,
                UploadId=upload,
                PartNumber=number,
                CopySource=source,
                CopySourceRange=f"bytes={start}-{end}",
            )
            parts.append({"PartNumber": number, "ETag": answer["CopyPartResult"]["ETag"]})
        client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
        )
    except BaseException:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
        raise


def _digest(values: tuple[str | None, ...]) -> str:
    import hashlib

    return hashlib.sha256("\0".join(v or "" for v in values).encode()).hexdigest()


def _translate(exc: Exception, bucket: str, where: str) -> Exception:
    """The quixsinks error for a boto3/botocore exception (never with credentials)."""
    if isinstance(exc, DestinationError | RetryableError | MissingDependencyError):
        return exc
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = f"{where}: {code or status} {error.get('Message', '')}".strip()
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
            return _PreconditionFailed(message, location=where)
        if code == "NoSuchBucket":
            return S3BucketNotFoundError(
                f"{where}: the bucket {bucket!r} does not exist; create it first",
                location=where,
            )
        if code in ("NoSuchKey", "NoSuchUpload") or (code == "404" or status == 404):
            return DestinationNotFoundError(f"{where}: not found", location=where)
        if code in _DENIED or status == 403:
            return S3BucketAccessDeniedError(
                f"{where}: access denied ({code or status}); check the credentials "
                "(aws_access_key_id / aws_secret_access_key or AWS_*) and the bucket policy",
                location=where,
            )
        if code in _THROTTLE or status in (500, 503):
            retry_after = (
                response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("retry-after")
            )
            if retry_after and str(retry_after).isdigit():
                return SinkBackpressureError(float(retry_after), message)
            return RetryableError(message)
        return DestinationError(message, location=where)
    module = type(exc).__module__
    if module.startswith(("botocore", "urllib3")) or isinstance(exc, OSError):
        name = type(exc).__name__
        if name in ("NoCredentialsError", "PartialCredentialsError"):
            return S3BucketAccessDeniedError(
                f"{where}: no AWS credentials found; set aws_access_key_id and "
                "aws_secret_access_key (or AWS_*), or give the executors a role",
                location=where,
            )
        return RetryableError(f"{where}: cannot reach S3: {name}: {exc}")
    return exc
