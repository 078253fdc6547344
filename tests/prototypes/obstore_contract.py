"""The destination contract suite and the object-store fault tests, run over the obstore
prototype (tests/prototypes/obstore_destination.py) on moto_server, Azurite and the GCS
emulator. An evaluation for issue #29: not collected by pytest (no ``test_`` file name);
run it by naming it::

    .venv/bin/python -m pytest tests/prototypes/obstore_contract.py -q -p no:cacheprovider

The contract cases are imported from tests/integration/test_destination_contract.py as
they are (so this runs exactly the suite the three adapters pass) with this module's
``dest`` fixture; the fault cases restate, for the prototype, what
test_azure_destination.py and test_gcs_destination.py demand of AzureDestination and
GCSDestination, with the same proxies and the same expectations, and add two S3 cases (the
cases of test_s3_destination.py run as they are in obstore_s3.py).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from quixsinks.core.backpressure import RetryPolicy, RetryStats
from quixsinks.core.errors import (
    DestinationError,
    DestinationNotFoundError,
    RetryableError,
    SinkBackpressureError,
)
from tests.integration.test_destination_contract import (  # noqa: F401 - collected here
    test_create_exclusive_has_one_winner_among_concurrent_creators,
    test_delete_ignores_missing_keys_and_delete_prefix_clears,
    test_list_is_recursive_sorted_and_paginated,
    test_move_replaces_the_target_and_removes_the_source,
    test_write_read_exists_modified,
    test_write_with_streams_a_large_object,
)
from tests.prototypes.obstore_destination import SDK_RETRIES, ObstoreDestination
from tests.services.azure_faults import FaultProxy
from tests.services.azurite import AzuriteServer
from tests.services.gcs_emulator import GCSEmulator
from tests.services.moto import MotoServer
from tests.services.s3_faults import S3FaultProxy

pytestmark = pytest.mark.integration

KINDS = ["s3", "azure", "gcs"]
MiB = 1024 * 1024
ATTEMPTS = SDK_RETRIES + 1


def make(kind: str, request: pytest.FixtureRequest, *, missing: bool = False) -> Any:
    name = f"qs-{uuid.uuid4().hex[:12]}"
    if kind == "s3":
        server = request.getfixturevalue("s3_server")
        if not missing:
            server.create_bucket(name)
        return ObstoreDestination.s3(name, "prefix/p", **server.options())
    if kind == "azure":
        azurite = request.getfixturevalue("azurite")
        if not missing:
            azurite.create_container(name)
        return ObstoreDestination.azure(name, "prefix/p", **azurite.options())
    gcs = request.getfixturevalue("gcs_server")
    if not missing:
        gcs.create_bucket(name)
    return ObstoreDestination.gcs(name, "prefix/p", **gcs.options())


@pytest.fixture(params=KINDS)
def dest(request: pytest.FixtureRequest) -> Any:
    destination = make(request.param, request)
    destination.check()
    return destination


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_bucket_is_a_not_found_error_on_check(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with pytest.raises(DestinationNotFoundError):
        make(kind, request, missing=True).check()


# -- S3 faults (S3FaultProxy in front of moto) ---------------------------------------------


@pytest.fixture
def s3_proxied(s3_server: MotoServer) -> Iterator[tuple[Any, S3FaultProxy]]:
    bucket = f"qs-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    with S3FaultProxy(s3_server.url) as proxy:
        options = {**s3_server.options(), "endpoint_url": proxy.url}
        yield ObstoreDestination.s3(bucket, "root/p", **options), proxy


def test_s3_a_conditional_request_conflict_is_not_a_lost_race(
    s3_proxied: tuple[Any, S3FaultProxy],
) -> None:
    """S3 answers 409 ConditionalRequestConflict while another conditional write of the key
    is in flight: nobody has won yet. S3Destination asks again; the answer must not be
    "another driver holds the marker" while the key does not exist."""
    dest, proxy = s3_proxied
    proxy.add_fault(409, "ConditionalRequestConflict")
    won = dest.create_exclusive("marker", b"mine")
    assert won or dest.exists("marker"), "create_exclusive said False, yet nobody created it"


def test_s3_a_missing_key_and_a_missing_bucket_are_told_apart(s3_server: MotoServer) -> None:
    """S3Destination raises S3BucketNotFoundError for the bucket and a plain
    DestinationNotFoundError for a key; obstore raises FileNotFoundError for both."""
    from quixsinks.core.errors import S3BucketNotFoundError

    missing = ObstoreDestination.s3(f"qs-missing-{uuid.uuid4().hex[:8]}", **s3_server.options())
    with pytest.raises(S3BucketNotFoundError):
        missing.read_bytes("nope")


# -- Azure faults (FaultProxy in front of Azurite) -----------------------------------------


@pytest.fixture
def azure_proxied(azurite: AzuriteServer, azurite_faults: FaultProxy) -> tuple[Any, FaultProxy]:
    container = f"qs-{uuid.uuid4().hex[:12]}"
    azurite.create_container(container)
    options = {**azurite.options(), "account_url": azurite_faults.account_url(azurite.account)}
    return ObstoreDestination.azure(container, "root", **options), azurite_faults


def test_azure_server_busy_beyond_the_sdk_retries_is_retryable(
    azure_proxied: tuple[Any, FaultProxy],
) -> None:
    dest, proxy = azure_proxied
    proxy.add(503, "ServerBusy", count=ATTEMPTS, methods=("PUT",))
    with pytest.raises(RetryableError):
        dest.write_bytes("x", b"1")
    assert len(proxy.faulted) == ATTEMPTS


def test_azure_retry_after_becomes_sink_backpressure(
    azure_proxied: tuple[Any, FaultProxy],
) -> None:
    dest, proxy = azure_proxied
    proxy.add(503, "ServerBusy", count=ATTEMPTS, retry_after=2)
    with pytest.raises(SinkBackpressureError) as info:
        dest.write_bytes("x", b"1")
    assert info.value.retry_after == 2


def test_azure_throttled_writes_succeed_under_the_retry_policy(
    azure_proxied: tuple[Any, FaultProxy],
) -> None:
    dest, proxy = azure_proxied
    proxy.add(503, "ServerBusy", count=2 * ATTEMPTS, methods=("PUT",))
    stats = RetryStats()
    RetryPolicy(initial_backoff=0.01, jitter=False).call(
        lambda: dest.write_bytes("x", b"1"), stats=stats
    )
    assert stats.retries == 2
    assert dest.read_bytes("x") == b"1"


def test_azure_operation_timed_out_is_retryable_and_other_500s_are_not(
    azure_proxied: tuple[Any, FaultProxy],
) -> None:
    """Azure tells a transient 500 from a permanent one by x-ms-error-code only."""
    dest, proxy = azure_proxied
    proxy.add(500, "OperationTimedOut", count=ATTEMPTS)
    with pytest.raises(RetryableError):
        dest.exists("x")
    proxy.add(500, "InvalidQueryParameterValue", count=ATTEMPTS)
    with pytest.raises(DestinationError) as info:
        dest.exists("x")
    assert not isinstance(info.value, RetryableError)


def test_a_server_that_does_not_answer_is_retryable_within_the_timeout() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/devstoreaccount1"
        dest = ObstoreDestination.azure(
            "data",
            account_url=url,
            account_name="devstoreaccount1",
            account_key="a2V5",
            timeout=0.3,
        )
        started = time.monotonic()
        with pytest.raises(RetryableError):
            dest.write_bytes("x", b"1")
    assert time.monotonic() - started < 5


# -- GCS faults (the front's injection) ------------------------------------------------------


@pytest.fixture
def gcs_dest(gcs_server: GCSEmulator) -> Any:
    assert gcs_server.front is not None
    gcs_server.front.clear_faults()
    bucket = f"qs-{uuid.uuid4().hex[:12]}"
    gcs_server.create_bucket(bucket)
    return ObstoreDestination.gcs(bucket, "root", **gcs_server.options())


def test_gcs_throttling_answers_are_retried_by_the_retry_policy(
    gcs_server: GCSEmulator, gcs_dest: Any
) -> None:
    gcs_server.inject(429, 2 * ATTEMPTS)
    stats = RetryStats()
    RetryPolicy(initial_backoff=0.01, jitter=False).call(
        lambda: gcs_dest.write_bytes("t", b"landed"), stats=stats
    )
    assert stats.retries == 2
    assert gcs_dest.read_bytes("t") == b"landed"


def test_gcs_a_503_with_retry_after_is_backpressure(gcs_server: GCSEmulator, gcs_dest: Any) -> None:
    gcs_server.inject(503, ATTEMPTS, retry_after=2)
    with pytest.raises(SinkBackpressureError) as info:
        gcs_dest.read_bytes("anything")
    assert info.value.retry_after == 2.0


def test_gcs_create_exclusive_keeps_the_first_content(gcs_dest: Any) -> None:
    assert gcs_dest.create_exclusive("marker", b"first")
    assert not gcs_dest.create_exclusive("marker", b"second")
    assert gcs_dest.read_bytes("marker") == b"first"


# -- pickling ---------------------------------------------------------------------------------


def test_pickle_carries_no_store_and_repr_no_secret(s3_server: MotoServer) -> None:
    import pickle

    bucket = f"qs-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    dest = ObstoreDestination.s3(bucket, "p", **s3_server.options())
    dest.write_bytes("k", b"v")
    secret = s3_server.options()["aws_secret_access_key"]
    assert secret not in repr(dest)
    clone = pickle.loads(pickle.dumps(dest))
    assert clone == dest
    assert clone.read_bytes("k") == b"v"


def test_concurrent_create_exclusive_through_threads_has_one_winner_on_s3(
    s3_server: MotoServer,
) -> None:
    bucket = f"qs-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    dest = ObstoreDestination.s3(bucket, "p", **s3_server.options())
    results: list[bool] = []
    barrier = threading.Barrier(16)

    def create() -> None:
        barrier.wait()
        results.append(dest.create_exclusive("m", uuid.uuid4().bytes))

    threads = [threading.Thread(target=create) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 15 + [True]
