"""GCSDestination: what is specific to Google Cloud Storage (the shared contract is in
test_destination_contract.py).

The server is gcp-storage-emulator behind the front of tests/services/gcs_front.py, which
adds what the emulator lacks: ifGenerationMatch, 1,000-item list pages, service-account
authentication (401/403) and injected throttling. A few translations are also checked at the
boundary with the SDK's real exception classes, for answers no test server gives (an
expired key's refresh error; a 403 whatever the front does).
"""

from __future__ import annotations

import logging
import pickle
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from quixsinks.core.backpressure import RetryPolicy, RetryStats
from quixsinks.core.errors import (
    DestinationError,
    DestinationNotFoundError,
    GCSBucketAccessDeniedError,
    GCSBucketNotFoundError,
    OptionError,
    RetryableError,
    SinkBackpressureError,
)
from quixsinks.core.gcs import GCSDestination
from tests.services.gcs_emulator import GCSEmulator

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


@pytest.fixture
def bucket(gcs_server: GCSEmulator) -> str:
    name = f"qs-{uuid.uuid4().hex[:12]}"
    gcs_server.create_bucket(name)
    return name


@pytest.fixture
def dest(gcs_server: GCSEmulator, bucket: str) -> GCSDestination:
    gcs_server.front.clear_faults()  # type: ignore[union-attr]
    return GCSDestination(bucket, "root", **gcs_server.options())


def _requests(server: GCSEmulator, action: Callable[[], Any]) -> list[str]:
    """The storage requests ``action`` made (method and path)."""
    front = server.front
    assert front is not None
    before = len(front.methods_seen)
    action()
    return front.methods_seen[before:]


def _private_key(server: GCSEmulator, **kwargs: Any) -> str:
    import json

    key: str = json.loads(server.service_account_json(**kwargs))["private_key"]
    return key


# -- large writes ----------------------------------------------------------------------------


def test_a_large_streamed_write_round_trips_in_8_mib_resumable_chunks(
    gcs_server: GCSEmulator, dest: GCSDestination
) -> None:
    piece = bytes(range(256)) * 1024  # 256 KiB
    pieces = 84  # 21 MiB: three chunks, the last one partial

    def produce(out: Any) -> None:
        for _ in range(pieces):
            out.write(piece)

    seen = _requests(gcs_server, lambda: dest.write_with("big/file.bin", produce))
    assert dest.read_bytes("big/file.bin") == piece * pieces
    uploads = [r for r in seen if "/upload/" in r]
    assert uploads[0].startswith("POST")  # the resumable session
    assert len([r for r in uploads if r.startswith("PUT")]) == 3  # 8 + 8 + 5 MiB


def test_a_small_streamed_write_is_one_request(
    gcs_server: GCSEmulator, dest: GCSDestination
) -> None:
    seen = _requests(
        gcs_server, lambda: dest.write_with("small", lambda out: out.write(b"x" * 1000))
    )
    assert len(seen) == 1
    assert dest.read_bytes("small") == b"x" * 1000


def test_a_streamed_write_that_fails_half_way_leaves_no_object(dest: GCSDestination) -> None:
    def produce(out: Any) -> None:
        out.write(b"y" * (9 * MIB))  # past the first chunk: a resumable upload is under way
        raise RuntimeError("the format writer failed")

    with pytest.raises(RuntimeError, match="format writer failed"):
        dest.write_with("half", produce)
    assert not dest.exists("half")


# -- create-only -------------------------------------------------------------------------------


def test_create_exclusive_uses_if_generation_match_0(
    gcs_server: GCSEmulator, dest: GCSDestination
) -> None:
    seen = _requests(gcs_server, lambda: dest.create_exclusive("m.json", b"first"))
    assert seen == [f"POST /upload/storage/v1/b/{dest.bucket}/o"]
    assert dest.create_exclusive("m.json", b"second") is False  # the service's 412
    assert dest.read_bytes("m.json") == b"first"
    dest.write_bytes("m.json", b"overwritten")  # plain writes still replace
    assert dest.create_exclusive("m.json", b"third") is False


def test_the_bare_emulator_ignores_if_generation_match(
    gcs_server: GCSEmulator, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the front exists: without it, create-only would not be create-only."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.emulator_url)
    bare = GCSDestination(bucket, "root")
    assert bare.create_exclusive("m.json", b"first") is True
    assert bare.create_exclusive("m.json", b"second") is True  # real GCS: 412, False
    assert bare.read_bytes("m.json") == b"second"


# -- listing ----------------------------------------------------------------------------------


def test_list_follows_next_page_tokens(gcs_server: GCSEmulator, dest: GCSDestination) -> None:
    dest.PAGE_SIZE = 100  # type: ignore[misc]
    keys = [f"l/{i:04d}" for i in range(250)]
    dest.delete([])  # no request for nothing
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: dest.write_bytes(k, b""), keys))
    front = gcs_server.front
    assert front is not None
    pages = front.list_pages
    assert dest.list("l") == keys
    assert front.list_pages - pages == 3


def test_list_keys_are_relative_to_the_prefix_and_skip_siblings(dest: GCSDestination) -> None:
    dest.write_bytes("a/1", b"")
    dest.write_bytes("a/b/2", b"")
    dest.write_bytes("ab/3", b"")
    other = GCSDestination(dest.bucket, "root2", **_options_of(dest))
    other.write_bytes("a/x", b"")
    assert dest.list("a") == ["a/1", "a/b/2"]
    assert dest.list() == ["a/1", "a/b/2", "ab/3"]


def _options_of(dest: GCSDestination) -> dict[str, Any]:
    return {
        "endpoint": dest.endpoint,
        "project": dest.project,
        "service_account_json": dest._service_account_json,
    }


def test_delete_is_batched_by_100_and_ignores_missing_keys(
    gcs_server: GCSEmulator, dest: GCSDestination
) -> None:
    keys = [f"d/{i:03d}" for i in range(150)]
    for key in keys[:120]:
        dest.write_bytes(key, b"")
    seen = _requests(gcs_server, lambda: dest.delete(keys))
    assert seen == ["POST /batch/storage/v1"] * 2
    assert dest.list("d") == []


# -- credentials and errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nSECRET-abc',
        "SECRET-abc but not JSON, and no such file",
        '["SECRET-abc"]',
        '{"type": "authorized_user", "refresh_token": "SECRET-abc"}',
    ],
)
def test_a_service_account_json_that_does_not_parse_is_an_option_error_that_hides_it(
    bad: str,
) -> None:
    with pytest.raises(OptionError) as caught:
        GCSDestination("some-bucket", service_account_json=bad)
    error = caught.value
    assert error.option == "service_account_json"
    assert "SECRET" not in str(error)
    assert "SECRET" not in repr(error.__dict__)
    assert error.__cause__ is None  # no parser exception (which holds the text) rides along
    assert error.__context__ is None


def test_service_account_json_may_be_a_key_file(
    gcs_server: GCSEmulator, bucket: str, tmp_path: Any
) -> None:
    key_file = tmp_path / "key.json"
    key_file.write_text(gcs_server.service_account_json())
    dest = GCSDestination(bucket, "p", endpoint=gcs_server.url, service_account_json=str(key_file))
    dest.check()


def test_an_unknown_service_account_key_is_access_denied_on_check(
    gcs_server: GCSEmulator, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = gcs_server.service_account_json(registered=False)
    dest = GCSDestination(bucket, "p", endpoint=gcs_server.url, service_account_json=wrong)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(GCSBucketAccessDeniedError) as caught:
        dest.check()
    key = _private_key_of(wrong)
    assert key not in str(caught.value)
    assert "BEGIN PRIVATE KEY" not in caplog.text
    assert key.splitlines()[1] not in caplog.text


def _private_key_of(text: str) -> str:
    import json

    key: str = json.loads(text)["private_key"]
    return key


def test_a_read_only_account_is_access_denied_on_check(
    gcs_server: GCSEmulator, bucket: str
) -> None:
    dest = GCSDestination(bucket, "p", **gcs_server.options(read_only=True))
    with pytest.raises(GCSBucketAccessDeniedError, match="access denied"):
        dest.check()


def test_no_credentials_on_a_private_bucket_is_access_denied(
    gcs_server: GCSEmulator, bucket: str
) -> None:
    dest = GCSDestination(bucket, "p", endpoint=gcs_server.url)  # anonymous
    with pytest.raises(GCSBucketAccessDeniedError):
        dest.check()


@pytest.mark.parametrize("status", [401, 403])
def test_401_and_403_are_access_denied_at_the_boundary(status: int) -> None:
    """The SDK's own classes, as GCS raises them for a revoked key or a missing IAM role."""
    from google.api_core import exceptions

    dest = GCSDestination("some-bucket", "p")
    error = exceptions.from_http_status(status, "caller does not have storage.objects.create")
    with pytest.raises(GCSBucketAccessDeniedError), dest._translate("gs://some-bucket/p/k"):
        raise error


def test_a_refused_token_refresh_is_access_denied_at_the_boundary() -> None:
    from google.auth.exceptions import RefreshError

    dest = GCSDestination("some-bucket", "p")
    with pytest.raises(GCSBucketAccessDeniedError), dest._translate("gs://some-bucket/p/k"):
        raise RefreshError("invalid_grant: Token has been expired or revoked.")


def test_a_412_outside_create_exclusive_is_a_destination_error_at_the_boundary() -> None:
    from google.api_core import exceptions

    dest = GCSDestination("some-bucket", "p")
    with pytest.raises(DestinationError, match="412"), dest._translate("gs://some-bucket/p/k"):
        raise exceptions.PreconditionFailed("conditionNotMet")


def test_a_missing_bucket_is_gcs_bucket_not_found(gcs_server: GCSEmulator) -> None:
    dest = GCSDestination("qs-no-such-bucket", "p", **gcs_server.options())
    with pytest.raises(GCSBucketNotFoundError, match="qs-no-such-bucket"):
        dest.check()
    with pytest.raises(GCSBucketNotFoundError):
        dest.read_bytes("k")
    with pytest.raises(GCSBucketNotFoundError):
        dest.list()


def test_a_missing_object_is_not_found_but_not_a_missing_bucket(dest: GCSDestination) -> None:
    with pytest.raises(DestinationNotFoundError) as caught:
        dest.read_bytes("nope")
    assert not isinstance(caught.value, GCSBucketNotFoundError)
    assert caught.value.location == f"gs://{dest.bucket}/root/nope"


# -- throttling ---------------------------------------------------------------------------------


def test_throttling_answers_are_retried_by_the_retry_policy(
    gcs_server: GCSEmulator, dest: GCSDestination
) -> None:
    gcs_server.inject(429, 2)
    stats = RetryStats()
    policy = RetryPolicy(initial_backoff=0.01, jitter=False)
    policy.call(lambda: dest.write_bytes("t", b"landed"), stats=stats)
    assert stats.retries == 2
    assert dest.read_bytes("t") == b"landed"


def test_a_503_with_retry_after_is_backpressure(
    gcs_server: GCSEmulator, dest: GCSDestination
) -> None:
    gcs_server.inject(503, 1, retry_after=2)
    with pytest.raises(SinkBackpressureError) as caught:
        dest.read_bytes("anything")
    assert caught.value.retry_after == 2.0


def test_a_throttled_chunk_of_a_streamed_write_is_retryable(
    gcs_server: GCSEmulator, dest: GCSDestination
) -> None:
    data = b"z" * (9 * MIB)
    gcs_server.inject(429, 1, methods=("PUT",))  # the first chunk of the resumable upload
    with pytest.raises(RetryableError):
        dest.write_with("s", lambda out: out.write(data))
    assert not dest.exists("s")
    RetryPolicy(initial_backoff=0.01).call(
        lambda: dest.write_with("s", lambda out: out.write(data))
    )
    assert dest.read_bytes("s") == data


# -- configuration, repr, pickle ----------------------------------------------------------------


def test_repr_and_pickle_carry_no_secret_beyond_the_key_itself(
    gcs_server: GCSEmulator, dest: GCSDestination
) -> None:
    dest.check()  # a client exists now, with an access token
    key = _private_key(gcs_server)
    assert key not in repr(dest)
    assert "BEGIN PRIVATE KEY" not in repr(dest)
    assert repr(dest) == (
        f"GCSDestination('gs://{dest.bucket}/root', endpoint={gcs_server.url!r}, service account)"
    )
    front = gcs_server.front
    assert front is not None
    data = pickle.dumps(dest)
    assert not any(token.encode() in data for token in front.tokens)  # no client, no token
    copy = pickle.loads(data)
    assert copy == dest
    copy.write_bytes("from-a-copy", b"ok")  # the key travelled: an executor can write
    assert dest.read_bytes("from-a-copy") == b"ok"


def test_from_url_parses_bucket_and_prefix(gcs_server: GCSEmulator) -> None:
    dest = GCSDestination.from_url("gs://my-bucket/some/prefix/", **gcs_server.options())
    assert (dest.bucket, dest.prefix, dest.url) == (
        "my-bucket",
        "some/prefix",
        "gs://my-bucket/some/prefix",
    )
    assert GCSDestination.from_url("gs://my-bucket").prefix == ""


@pytest.mark.parametrize(
    "url", ["s3://bucket/p", "gs://", "gs:///p", "gs://Bad_Bucket!/p", "bucket/p", "gs:/b/p"]
)
def test_a_malformed_url_is_an_option_error_naming_path(url: str) -> None:
    with pytest.raises(OptionError) as caught:
        GCSDestination.from_url(url)
    assert caught.value.option == "path"


def test_storage_emulator_host_is_honoured(
    gcs_server: GCSEmulator, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.emulator_url)
    dest = GCSDestination(bucket, "env")
    assert "anonymous" in repr(dest)
    dest.write_bytes("k", b"via env")
    assert dest.read_bytes("k") == b"via env"


def test_a_key_that_cannot_be_loaded_is_an_option_error_on_check(
    gcs_server: GCSEmulator, bucket: str
) -> None:
    import json

    broken = json.loads(gcs_server.service_account_json())
    broken["private_key"] = "-----BEGIN PRIVATE KEY-----\nSECRET-abc\n-----END PRIVATE KEY-----\n"
    dest = GCSDestination(
        bucket, "p", endpoint=gcs_server.url, service_account_json=json.dumps(broken)
    )
    with pytest.raises(OptionError) as caught:
        dest.check()
    assert caught.value.option == "service_account_json"
    assert "SECRET" not in str(caught.value)
    assert caught.value.__context__ is None
