"""The kinesalite test server itself: bound to 127.0.0.1, PutRecords and GetRecords work."""

from __future__ import annotations

import pytest

from tests.services.kinesalite import KinesaliteServer


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
