"""S3Destination beyond the shared contract: what is specific to S3 and S3-compatible stores.

Runs against moto_server (fixture ``s3_server``: load ``-p tests.services.fixtures_s3``);
throttling and server errors are injected by a small proxy (tests/services/s3_faults.py),
since moto cannot produce them.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from quixsinks.core import s3 as s3_module
from quixsinks.core.backpressure import RetryPolicy, RetryStats
from quixsinks.core.errors import (
    DestinationNotFoundError,
    MissingDependencyError,
    OptionError,
    RetryableError,
    S3BucketAccessDeniedError,
    S3BucketNotFoundError,
    SinkBackpressureError,
)
from quixsinks.core.s3 import S3Destination
from tests.services.moto import MotoServer
from tests.services.s3_faults import S3FaultProxy

MiB = 1024 * 1024


@pytest.fixture
def bucket(s3_server: MotoServer) -> str:
    name = f"qs-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    return name


@pytest.fixture
def dest(s3_server: MotoServer, bucket: str) -> S3Destination:
    return S3Destination(bucket, "root/p", **s3_server.options())


@pytest.fixture
def proxy(s3_server: MotoServer) -> Iterator[S3FaultProxy]:
    with S3FaultProxy(s3_server.url) as p:
        yield p


@pytest.fixture
def proxied(s3_server: MotoServer, bucket: str, proxy: S3FaultProxy) -> S3Destination:
    """A destination whose requests go through the fault proxy."""
    return S3Destination(bucket, "root/p", **{**s3_server.options(), "endpoint_url": proxy.url})


def _raw(server: MotoServer) -> Any:
    return server.client()


# -- streaming writes ---------------------------------------------------------------------


def test_a_write_over_8_mib_is_a_multipart_upload_that_round_trips(
    dest: S3Destination, s3_server: MotoServer, bucket: str
) -> None:
    chunk = os.urandom(MiB)
    size = dest.write_with("big.bin", lambda out: [out.write(chunk) for _ in range(20)])
    assert size == 20 * MiB
    assert dest.read_bytes("big.bin") == chunk * 20
    etag = _raw(s3_server).head_object(Bucket=bucket, Key="root/p/big.bin")["ETag"]
    assert etag.strip('"').endswith("-3")  # parts of 8 + 8 + 4 MiB


def test_a_small_streamed_write_is_one_put(
    dest: S3Destination, s3_server: MotoServer, bucket: str
) -> None:
    assert dest.write_with("small", lambda out: out.write(b"abc")) == 3
    etag = _raw(s3_server).head_object(Bucket=bucket, Key="root/p/small")["ETag"]
    assert "-" not in etag
    assert dest.read_bytes("small") == b"abc"


def test_a_failed_streamed_write_leaves_no_object_and_no_pending_upload(
    dest: S3Destination, s3_server: MotoServer, bucket: str
) -> None:
    def produce(out: Any) -> None:
        out.write(b"x" * (9 * MiB))  # one part uploaded already
        raise RuntimeError("the format writer failed")

    with pytest.raises(RuntimeError, match="format writer"):
        dest.write_with("broken", produce)
    assert not dest.exists("broken")
    assert _raw(s3_server).list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


# -- create-only, move ------------------------------------------------------------------------


def test_create_exclusive_is_put_if_none_match_and_keeps_the_first_content(
    proxied: S3Destination, proxy: S3FaultProxy
) -> None:
    assert proxied.create_exclusive("marker", b"first")
    assert not proxied.create_exclusive("marker", b"second")
    assert proxied.read_bytes("marker") == b"first"
    puts = [r for r in proxy.requests if r.method == "PUT"]
    assert [r.status for r in puts] == [200, 412]  # the server refused the second one


def test_create_exclusive_on_a_missing_bucket_is_a_bucket_error(s3_server: MotoServer) -> None:
    missing = S3Destination(f"qs-missing-{uuid.uuid4().hex[:8]}", **s3_server.options())
    with pytest.raises(S3BucketNotFoundError):
        missing.create_exclusive("marker", b"x")


def test_move_above_the_copy_limit_uses_multipart_copy(
    dest: S3Destination, proxy: S3FaultProxy, proxied: S3Destination, monkeypatch: Any
) -> None:
    monkeypatch.setattr(s3_module, "COPY_LIMIT", MiB)  # instead of 5 GiB
    monkeypatch.setattr(s3_module, "COPY_PART_SIZE", 5 * MiB)  # S3's minimum part size
    data = os.urandom(12 * MiB)
    dest.write_bytes("src", data)
    proxied.move("src", "dst")
    assert dest.read_bytes("dst") == data
    assert not dest.exists("src")
    copies = [r for r in proxy.requests if r.method == "PUT" and "partNumber=" in r.query]
    assert len(copies) == 3  # UploadPartCopy of 5 + 5 + 2 MiB


# -- listing and deleting -----------------------------------------------------------------


def test_list_pages_past_1000_keys_and_delete_batches_them(
    proxied: S3Destination, proxy: S3FaultProxy, s3_server: MotoServer, bucket: str
) -> None:
    raw = _raw(s3_server)
    keys = [f"root/p/many/{i:04d}" for i in range(1001)]
    with ThreadPoolExecutor(8) as pool:  # the raw client keeps 10 connections
        list(pool.map(lambda k: raw.put_object(Bucket=bucket, Key=k, Body=b""), keys))
    raw.put_object(Bucket=bucket, Key="root/p-sibling/not-mine", Body=b"")
    proxy.clear()

    listed = proxied.list()
    assert listed == [k.removeprefix("root/p/") for k in keys]  # relative, sorted, only ours
    lists = [r for r in proxy.requests if r.method == "GET" and "list-type=2" in r.query]
    assert len(lists) == 2

    proxy.clear()
    proxied.delete_prefix("many")
    deletes = [r for r in proxy.requests if r.method == "POST" and "delete" in r.query]
    assert len(deletes) == 2  # 1000 + 1 keys
    assert proxied.list() == []
    assert raw.head_object(Bucket=bucket, Key="root/p-sibling/not-mine")


# -- endpoints, URLs, credentials ---------------------------------------------------------


def test_endpoint_url_addresses_buckets_in_the_path_as_minio_expects(
    proxied: S3Destination, proxy: S3FaultProxy, bucket: str
) -> None:
    proxied.write_bytes("k", b"v")
    assert proxy.requests[-1].path == f"/{bucket}/root/p/k"


def test_from_url_reads_bucket_and_prefix(s3_server: MotoServer, bucket: str) -> None:
    dest = S3Destination.from_url(f"s3a://{bucket}/a/b/", **s3_server.options())
    assert (dest.bucket, dest.prefix, dest.url) == (bucket, "a/b", f"s3://{bucket}/a/b")
    dest.check()
    dest.write_bytes("x", b"1")
    assert S3Destination.from_url(f"s3://{bucket}", **s3_server.options()).list() == ["a/b/x"]


@pytest.mark.parametrize(
    "url",
    [
        "bucket/prefix",
        "gs://bucket/prefix",
        "s3://",
        "s3:///prefix",
        "s3://key:secret@bucket/prefix",
        "s3://bucket:9000/prefix",
        "s3://Bad_Bucket/prefix",
        "s3://bucket/prefix?versionId=1",
    ],
)
def test_a_malformed_url_is_an_option_error_on_path(url: str) -> None:
    with pytest.raises(OptionError) as info:
        S3Destination.from_url(url)
    assert info.value.option == "path"
    assert "secret" not in f"{info.value} {info.value.value}"  # credentials in a URL: hidden


def test_region_comes_from_the_environment_unless_given(monkeypatch: Any) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert S3Destination("b").region_name == "eu-west-1"
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    assert S3Destination("b").region_name == "eu-west-3"
    assert S3Destination("b", region_name="us-west-2").region_name == "us-west-2"


def test_without_explicit_keys_the_default_chain_reads_the_environment(
    s3_server: MotoServer, bucket: str, monkeypatch: Any
) -> None:
    options = s3_server.options()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["aws_secret_access_key"])
    dest = S3Destination(
        bucket, endpoint_url=options["endpoint_url"], region_name=f"us-east-1-{uuid.uuid4().hex}"
    )  # an unseen region: a new client, made from the environment
    dest.check()
    assert options["aws_secret_access_key"].encode() not in pickle.dumps(dest)


def test_no_credentials_anywhere_is_an_access_denied_error(
    s3_server: MotoServer, bucket: str, monkeypatch: Any, tmp_path: Any
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    dest = S3Destination(
        bucket, endpoint_url=s3_server.url, region_name=f"us-east-1-{uuid.uuid4().hex}"
    )
    with pytest.raises(S3BucketAccessDeniedError, match="no usable AWS credentials"):
        dest.check()


def test_wrong_credentials_are_access_denied_on_check(s3_server: MotoServer, bucket: str) -> None:
    good = s3_server.create_user(f"writer-{uuid.uuid4().hex[:8]}")
    powerless = s3_server.create_user(f"reader-{uuid.uuid4().hex[:8]}", actions=[])
    wrong_secret = {**good, "aws_secret_access_key": "not-the-secret-" + uuid.uuid4().hex}
    unknown_key = {**good, "aws_access_key_id": "AKIA" + uuid.uuid4().hex[:16].upper()}
    with s3_server.enforce_auth():
        S3Destination(bucket, "p", **good).check()
        for options, code in (
            (wrong_secret, "SignatureDoesNotMatch"),
            (unknown_key, "InvalidAccessKeyId"),
            (powerless, "AccessDenied"),
        ):
            denied = S3Destination(bucket, "p", **options)
            with pytest.raises(S3BucketAccessDeniedError, match="HeadBucket failed: 403") as info:
                denied.check()  # a HEAD answer has no body: only the status tells
            shown = f"{info.value} {info.value!r} {info.value._kwargs}"
            assert options["aws_secret_access_key"] not in shown
            assert info.value.location == f"s3://{bucket}/p"
            with pytest.raises(S3BucketAccessDeniedError, match=code):
                denied.write_bytes("k", b"v")  # other answers name the S3 error code


def test_repr_shows_no_secret_and_pickle_carries_no_client(dest: S3Destination) -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    token = "t0k3n-" + uuid.uuid4().hex
    keyed = S3Destination("b", "p", aws_secret_access_key=secret, aws_session_token=token)
    for text in (repr(keyed), str(keyed), repr(vars(keyed))):
        assert secret not in text
        assert token not in text
    # explicit keys must reach the executors, so they are pickled (never a client); keys
    # from the default chain are not (see the test above)
    dest.write_bytes("k", b"v")  # a client exists in this process now
    data = pickle.dumps(dest)
    assert b"botocore" not in data
    assert b"boto3" not in data
    clone = pickle.loads(data)
    assert clone == dest
    assert clone.read_bytes("k") == b"v"


def test_the_module_imports_neither_boto3_nor_pyspark() -> None:
    code = (
        "import sys, quixsinks.core.s3; "
        "print(sorted(m for m in ('boto3', 'botocore', 'pyspark') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_without_boto3_the_error_names_the_extra(monkeypatch: Any) -> None:
    for name in ("boto3", "botocore", "botocore.config", "botocore.exceptions"):
        monkeypatch.setitem(sys.modules, name, None)
    dest = S3Destination("b", region_name=f"nowhere-{uuid.uuid4().hex}")
    with pytest.raises(MissingDependencyError, match=r"quixsinks\[s3\]"):
        dest.exists("k")


# -- throttling and server errors -----------------------------------------------------------


def test_slow_down_is_retryable_and_the_sdk_tries_only_twice(
    proxied: S3Destination, proxy: S3FaultProxy
) -> None:
    proxy.add_fault(503, "SlowDown", count=s3_module.SDK_MAX_ATTEMPTS)
    with pytest.raises(RetryableError, match="SlowDown") as info:
        proxied.write_bytes("k", b"v")
    assert not isinstance(info.value, SinkBackpressureError)
    assert len(proxy.requests) == s3_module.SDK_MAX_ATTEMPTS


@pytest.mark.parametrize(
    ("status", "code"), [(503, "SlowDown"), (500, "InternalError"), (400, "RequestTimeout")]
)
def test_throttling_and_server_errors_are_retried_by_the_retry_policy(
    proxied: S3Destination, proxy: S3FaultProxy, status: int, code: str
) -> None:
    proxy.add_fault(status, code, count=s3_module.SDK_MAX_ATTEMPTS + 1)  # one call and a bit
    stats = RetryStats()
    policy = RetryPolicy(initial_backoff=0.01, jitter=False)
    policy.call(lambda: proxied.write_bytes("k", b"v"), stats=stats)
    assert stats.retries == 1
    assert proxied.read_bytes("k") == b"v"


def test_a_retry_after_header_becomes_backpressure(
    proxied: S3Destination, proxy: S3FaultProxy
) -> None:
    proxy.add_fault(503, "SlowDown", count=s3_module.SDK_MAX_ATTEMPTS, retry_after=7)
    with pytest.raises(SinkBackpressureError) as info:
        proxied.exists("k")
    assert info.value.retry_after == 7


def test_a_missing_key_is_not_found_and_a_missing_bucket_is_a_bucket_error(
    dest: S3Destination, s3_server: MotoServer
) -> None:
    with pytest.raises(DestinationNotFoundError) as info:
        dest.read_bytes("nope")
    assert not isinstance(info.value, S3BucketNotFoundError)
    assert info.value.location == f"s3://{dest.bucket}/root/p/nope"
    missing = S3Destination(f"qs-missing-{uuid.uuid4().hex[:8]}", **s3_server.options())
    with pytest.raises(S3BucketNotFoundError):
        missing.read_bytes("nope")
    with pytest.raises(S3BucketNotFoundError):
        missing.list()
