"""AzureDestination on Azurite: what is specific to Azure Blob Storage.

The behaviours every Destination shares are in test_destination_contract.py. Throttling
answers come from `FaultProxy` (tests/services/azure_faults.py), a proxy in front of
Azurite, which has no fault injection of its own.
"""

from __future__ import annotations

import base64
import logging
import pickle
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from quixsinks.core import azure as azure_module
from quixsinks.core.azure import BLOCK_SIZE, SDK_STATUS_RETRIES, AzureDestination
from quixsinks.core.backpressure import RetryPolicy, RetryStats
from quixsinks.core.errors import (
    AzureContainerAccessDeniedError,
    AzureContainerNotFoundError,
    OptionError,
    RetryableError,
    SinkBackpressureError,
)
from tests.services.azure_faults import FaultProxy
from tests.services.azurite import AzuriteServer

pytestmark = pytest.mark.integration

WRONG_KEY = base64.b64encode(b"not the devstoreaccount1 key, but valid base64" * 2).decode()


@pytest.fixture
def container(azurite: AzuriteServer) -> str:
    name = f"qs-{uuid.uuid4().hex[:12]}"
    azurite.create_container(name)
    return name


@pytest.fixture
def dest(azurite: AzuriteServer, container: str) -> AzureDestination:
    return AzureDestination(container, "prefix/p", **azurite.options())


def through(proxy: FaultProxy, azurite: AzuriteServer, container: str) -> AzureDestination:
    """A destination on ``container`` whose requests pass through the fault proxy."""
    options = {**azurite.options(), "account_url": proxy.account_url(azurite.account)}
    return AzureDestination(container, "p", **options)


def blob_client(azurite: AzuriteServer, container: str, name: str) -> Any:
    return azurite.service_client().get_blob_client(container, name)


def write_empty(dest: AzureDestination, keys: list[str]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: dest.write_bytes(key, b""), keys))


# -- uploads ------------------------------------------------------------------------------


def test_a_streamed_upload_above_one_block_is_committed_in_8_mib_blocks(
    dest: AzureDestination, azurite: AzuriteServer, container: str
) -> None:
    piece = bytes(range(251)) * 4177  # ~1 MiB, not a divisor of the block size
    count = 20
    size = dest.write_with("big.bin", lambda out: [out.write(piece) for _ in range(count)])
    assert size == len(piece) * count
    assert dest.read_bytes("big.bin") == piece * count
    committed, uncommitted = blob_client(azurite, container, "prefix/p/big.bin").get_block_list()
    assert [b.size for b in committed] == [BLOCK_SIZE, BLOCK_SIZE, size - 2 * BLOCK_SIZE]
    assert uncommitted == []


def test_a_small_streamed_upload_is_one_put_blob(
    azurite: AzuriteServer, container: str, azurite_faults: FaultProxy
) -> None:
    dest = through(azurite_faults, azurite, container)
    assert dest.write_with("small.json", lambda out: out.write(b'{"a": 1}')) == 8
    puts = [path for method, path in azurite_faults.requests if method == "PUT"]
    assert len(puts) == 1
    assert "comp=block" not in puts[0]
    assert dest.read_bytes("small.json") == b'{"a": 1}'


def test_a_failing_producer_leaves_no_blob(dest: AzureDestination) -> None:
    def produce(out: Any) -> None:
        out.write(b"x" * (BLOCK_SIZE + 1))  # one block staged
        raise RuntimeError("the format writer failed")

    with pytest.raises(RuntimeError, match="format writer failed"):
        dest.write_with("torn.bin", produce)
    assert not dest.exists("torn.bin")


def test_create_exclusive_never_replaces_an_existing_blob(dest: AzureDestination) -> None:
    assert dest.create_exclusive("marker.json", b"first")
    assert not dest.create_exclusive("marker.json", b"second")
    assert dest.read_bytes("marker.json") == b"first"


# -- listing and deleting -----------------------------------------------------------------


def test_list_follows_continuation_markers_across_pages(
    azurite: AzuriteServer, container: str, azurite_faults: FaultProxy
) -> None:
    keys = [f"k/{i:04d}" for i in range(250)]
    write_empty(AzureDestination(container, "p", **azurite.options()), keys)
    dest = through(azurite_faults, azurite, container)
    dest.list_page_size = 100
    assert dest.list("k") == keys
    pages = [p for m, p in azurite_faults.requests if m == "GET" and "comp=list" in p]
    assert len(pages) == 3


def test_delete_sends_batches_of_256_and_ignores_missing_keys(
    azurite: AzuriteServer, container: str, azurite_faults: FaultProxy
) -> None:
    keys = [f"d/{i:04d}" for i in range(300)]
    write_empty(AzureDestination(container, "p", **azurite.options()), keys)
    dest = through(azurite_faults, azurite, container)
    dest.delete([*keys, "d/missing-1", "d/missing-2"])
    assert dest.list("d") == []
    batches = [p for m, p in azurite_faults.requests if m == "POST" and "comp=batch" in p]
    assert len(batches) == 2


def test_a_missing_container_is_azure_container_not_found(azurite: AzuriteServer) -> None:
    dest = AzureDestination(f"qs-missing-{uuid.uuid4().hex[:8]}", "p", **azurite.options())
    with pytest.raises(AzureContainerNotFoundError, match="does not exist"):
        dest.check()


# -- credentials --------------------------------------------------------------------------


def test_a_wrong_account_key_is_access_denied_on_check(
    azurite: AzuriteServer, container: str
) -> None:
    dest = AzureDestination(container, "p", **{**azurite.options(), "account_key": WRONG_KEY})
    with pytest.raises(AzureContainerAccessDeniedError) as info:
        dest.check()
    assert WRONG_KEY not in str(info.value)
    assert "HTTP 403" in str(info.value)


def test_a_read_only_sas_token_is_access_denied_on_check(
    azurite: AzuriteServer, container: str
) -> None:
    token = azurite.sas_token(container, "rl")
    dest = AzureDestination(container, "p", account_url=azurite.account_url, sas_token=token)
    with pytest.raises(AzureContainerAccessDeniedError) as info:
        dest.check()
    assert token not in str(info.value)


def test_a_sas_token_with_write_rights_does_everything(
    azurite: AzuriteServer, container: str
) -> None:
    token = azurite.sas_token(container, "racwdl")
    dest = AzureDestination(container, "p", account_url=azurite.account_url, sas_token=token)
    dest.check()
    dest.write_bytes("s/x", b"1")
    dest.move("s/x", "d/x")  # the copy source URL carries the SAS
    assert dest.list() == ["d/x"]
    assert token not in repr(dest)


def test_the_connection_string_comes_from_the_environment(
    azurite: AzuriteServer, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    dest = AzureDestination(container, "env")
    dest.check()
    assert dest.account_url == azurite.account_url
    dest.write_bytes("x", b"1")
    assert dest.read_bytes("x") == b"1"


def test_no_credentials_at_all_is_an_option_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONNECTION_STRING", "ACCOUNT", "KEY", "SAS_TOKEN"):
        monkeypatch.delenv(f"AZURE_STORAGE_{name}", raising=False)
    with pytest.raises(OptionError, match="no Azure credentials"):
        AzureDestination("container")
    with pytest.raises(OptionError, match="no credential for Azure account 'acct'"):
        AzureDestination("container", account_name="acct")


def test_secrets_stay_out_of_repr_state_errors_and_logs(
    azurite: AzuriteServer, container: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The credentials travel inside the pickled destination (executors authenticate with
    # them), but wrapped: no repr, no str, no vars() dump and no message shows them.
    caplog.set_level(logging.DEBUG)
    sas = azurite.sas_token(container, "rl")
    secrets = [azurite.account_key, WRONG_KEY, sas, azurite.connection_string()]
    good = AzureDestination(container, "p", **azurite.options())
    good.check()  # a client is now cached in this process
    copy = pickle.loads(pickle.dumps(good))
    assert copy == good
    assert not any("Client" in type(v).__name__ for v in vars(copy).values())
    copy.write_bytes("after-pickle", b"ok")

    shown = [repr(good), str(vars(good)), repr(copy), good.url]
    for options in (
        {**azurite.options(), "account_key": WRONG_KEY},
        {"account_url": azurite.account_url, "sas_token": sas},
        {"connection_string": azurite.connection_string().replace(azurite.account_key, WRONG_KEY)},
        {"account_url": "http://127.0.0.1:1/devstoreaccount1", "sas_token": sas},
    ):
        dest = AzureDestination(container, "p", **options)
        shown += [repr(dest), str(vars(dest))]
        with pytest.raises(Exception) as info:  # noqa: PT011 - each its own type
            dest.check()
        shown += [str(info.value), repr(info.value), str(info.value.__cause__)]
    shown += [record.getMessage() for record in caplog.records]
    for secret in secrets:
        for sig in (secret, secret.partition("sig=")[2][:20] or secret):
            leaks = [text for text in shown if sig in text]
            assert not leaks, (sig, leaks)


def test_the_module_imports_no_sdk_and_no_pyspark() -> None:
    code = (
        "import sys, quixsinks.core.azure; "
        "print([m for m in sys.modules if m.startswith(('azure', 'pyspark'))])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- throttling ---------------------------------------------------------------------------


def test_server_busy_beyond_the_sdk_retries_is_a_retryable_error(
    azurite: AzuriteServer, container: str, azurite_faults: FaultProxy
) -> None:
    dest = through(azurite_faults, azurite, container)
    azurite_faults.add(503, "ServerBusy", count=SDK_STATUS_RETRIES + 1, methods=("PUT",))
    with pytest.raises(RetryableError, match="HTTP 503 ServerBusy") as info:
        dest.write_bytes("x", b"1")
    assert not isinstance(info.value, SinkBackpressureError)
    assert len(azurite_faults.faulted) == SDK_STATUS_RETRIES + 1


def test_retry_after_becomes_sink_backpressure(
    azurite: AzuriteServer, container: str, azurite_faults: FaultProxy
) -> None:
    dest = through(azurite_faults, azurite, container)
    azurite_faults.add(503, "ServerBusy", count=SDK_STATUS_RETRIES + 1, retry_after=2)
    with pytest.raises(SinkBackpressureError) as info:
        dest.read_bytes("anything")
    assert info.value.retry_after == 2


def test_throttled_writes_succeed_under_the_retry_policy(
    azurite: AzuriteServer, container: str, azurite_faults: FaultProxy
) -> None:
    dest = through(azurite_faults, azurite, container)
    azurite_faults.add(503, "ServerBusy", count=2 * (SDK_STATUS_RETRIES + 1), methods=("PUT",))
    stats = RetryStats()
    policy = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.05)
    policy.call(lambda: dest.write_bytes("x", b"landed"), stats=stats)
    assert stats.retries == 2
    assert dest.read_bytes("x") == b"landed"


def test_operation_timed_out_is_retryable_and_other_500s_are_not(
    azurite: AzuriteServer, container: str, azurite_faults: FaultProxy
) -> None:
    dest = through(azurite_faults, azurite, container)
    azurite_faults.add(500, "OperationTimedOut", count=SDK_STATUS_RETRIES + 1)
    with pytest.raises(RetryableError, match="OperationTimedOut"):
        dest.exists("x")
    azurite_faults.add(500, "InvalidQueryParameterValue", count=SDK_STATUS_RETRIES + 1)
    with pytest.raises(azure_module.DestinationError) as info:
        dest.exists("x")
    assert not isinstance(info.value, RetryableError)


def test_a_server_that_does_not_answer_is_retryable_within_the_read_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(azure_module, "SDK_RETRY_PAUSE", 0.05)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/devstoreaccount1"
        dest = AzureDestination("data", account_url=url, account_key=WRONG_KEY, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(RetryableError, match=r"timed out \(no answer in 0.3 s"):
            dest.write_bytes("x", b"1")
    # the first try and SDK_RETRIES more, each cut at the read timeout
    assert time.monotonic() - started < 5


# -- URLs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "container", "prefix", "account_url"),
    [
        (
            "abfss://data@myacct.dfs.core.windows.net/out/events",
            "data",
            "out/events",
            "https://myacct.blob.core.windows.net",
        ),
        (
            "abfs://data@myacct.dfs.core.windows.net",
            "data",
            "",
            "https://myacct.blob.core.windows.net",
        ),
        (
            "abfss://data@myacct.dfs.core.chinacloudapi.cn/x/",
            "data",
            "x",
            "https://myacct.blob.core.chinacloudapi.cn",
        ),
        ("az://data/out/events", "data", "out/events", "https://myacct.blob.core.windows.net"),
        (
            "https://myacct.blob.core.windows.net/data/out",
            "data",
            "out",
            "https://myacct.blob.core.windows.net",
        ),
        (
            "http://127.0.0.1:10000/devstoreaccount1/data/out",
            "data",
            "out",
            "http://127.0.0.1:10000/devstoreaccount1",
        ),
    ],
)
def test_url_forms_parse(url: str, container: str, prefix: str, account_url: str) -> None:
    dest = AzureDestination.from_url(url, account_name="myacct", account_key=WRONG_KEY)
    assert (dest.container, dest.prefix, dest.account_url) == (container, prefix, account_url)


def test_a_sas_in_an_https_url_is_the_token_and_is_not_shown() -> None:
    dest = AzureDestination.from_url(
        "https://myacct.blob.core.windows.net/data/out?sv=2024-01-01&sig=SECRETSIG"
    )
    assert dest.prefix == "out"
    assert "SECRETSIG" not in repr(dest) + dest.url


def test_a_sas_url_as_account_url_gives_the_token_and_shows_no_signature(
    azurite: AzuriteServer, container: str
) -> None:
    token = azurite.sas_token(container)
    dest = AzureDestination(container, "p", account_url=f"{azurite.account_url}?{token}")
    assert dest.account_url == azurite.account_url
    assert token not in repr(dest) + dest.url
    dest.check()


@pytest.mark.parametrize(
    "url",
    [
        "abfss://myacct.dfs.core.windows.net/out",  # no container@
        "abfss://data@myacct/out",  # no endpoint suffix
        "az:///out",  # no container
        "https://myacct.blob.core.windows.net/",  # no container
        "https://myacct.blob.core.windows.net/Bad_Name/out?sig=SECRETSIG",
        "wasb://data@myacct.blob.core.windows.net/out",
    ],
)
def test_a_malformed_url_is_an_option_error_naming_path(url: str) -> None:
    with pytest.raises(OptionError, match="option 'path'") as info:
        AzureDestination.from_url(url, account_name="myacct", account_key=WRONG_KEY)
    assert info.value.option == "path"
    assert "SECRETSIG" not in str(info.value)
    assert WRONG_KEY not in str(info.value)
