"""The Kinesis test services: kinesalite on 127.0.0.1 and the fault proxy in front of it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.services.kinesalite import KinesaliteServer
from tests.services.kinesis_faults import KinesisFaultProxy


def test_kinesalite_round_trip(kinesalite: KinesaliteServer, kinesis_stream: str) -> None:
    assert kinesalite.host == "127.0.0.1"
    client = kinesalite.client()
    entries = [{"Data": f"r{i}".encode(), "PartitionKey": f"k{i}"} for i in range(50)]
    answer = client.put_records(StreamName=kinesis_stream, Records=entries)
    assert answer["FailedRecordCount"] == 0
    data = sorted(r["Data"] for r in kinesalite.read_all(kinesis_stream))
    assert data == sorted(e["Data"] for e in entries)


def test_missing_stream_is_resource_not_found(kinesalite: KinesaliteServer) -> None:
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        kinesalite.client().describe_stream(StreamName="no-such-stream")


def _client(url: str, kinesalite: KinesaliteServer) -> Any:
    import boto3
    from botocore.config import Config

    options = {**kinesalite.options(), "endpoint_url": url}
    return boto3.client("kinesis", config=Config(retries={"total_max_attempts": 1}), **options)


def test_fault_proxy_refuses_a_fraction_without_forwarding_it(
    kinesalite: KinesaliteServer, kinesis_stream: str
) -> None:
    entries = [{"Data": f"r{i}".encode(), "PartitionKey": f"k{i}"} for i in range(400)]
    with KinesisFaultProxy(kinesalite.endpoint_url, throttle_fraction=0.25) as proxy:
        answer = _client(proxy.url, kinesalite).put_records(
            StreamName=kinesis_stream, Records=entries
        )
    refused = [i for i, r in enumerate(answer["Records"]) if r.get("ErrorCode")]
    assert answer["FailedRecordCount"] == len(refused) == proxy.entries_refused
    assert 50 < len(refused) < 150
    landed = sorted(r["Data"] for r in kinesalite.read_all(kinesis_stream))
    expected = sorted(e["Data"] for i, e in enumerate(entries) if i not in set(refused))
    assert landed == expected


def test_fault_proxy_throttles_and_drops_whole_calls(
    kinesalite: KinesaliteServer, kinesis_stream: str
) -> None:
    from botocore.exceptions import ClientError

    entries = [{"Data": b"x", "PartitionKey": "k"}]
    with KinesisFaultProxy(kinesalite.endpoint_url) as proxy:
        client = _client(proxy.url, kinesalite)
        proxy.throttle_calls(1)
        with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
            client.put_records(StreamName=kinesis_stream, Records=entries)
        proxy.drop_responses(1)
        with pytest.raises(Exception, match=r"(?i)connection|closed|endpoint"):
            client.put_records(StreamName=kinesis_stream, Records=entries)
        assert (
            client.put_records(StreamName=kinesis_stream, Records=entries)["FailedRecordCount"] == 0
        )
    assert (proxy.calls_throttled, proxy.responses_dropped) == (1, 1)
    assert len(kinesalite.read_all(kinesis_stream)) == 2  # the dropped call landed
