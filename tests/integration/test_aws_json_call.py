"""``aws.JsonCall`` against kinesalite and the Kinesis fault proxy: a PutRecords body built
by ``kinesis.wire.request_body`` lands as boto3's own call would land it, and every answer
(a success, refused entries, an error, no answer) comes back as boto3's own call gives it.
"""

from __future__ import annotations

import base64
import types
from typing import Any

import pytest

from quixsinks.core.clients import client_key
from quixsinks.core.errors import RetryableError
from quixsinks.core.vendors import aws
from quixsinks.sinks.kinesis import client as kinesis_client
from quixsinks.sinks.kinesis.options import KinesisOptions
from quixsinks.sinks.kinesis.wire import request_body
from tests.services.kinesalite import KinesaliteServer
from tests.services.kinesis_faults import KinesisFaultProxy

#: hostile keys and data: quotes, backslashes, control characters, non-ASCII, bytes
ENTRIES = [
    {"Data": b'{"a":1}', "PartitionKey": "plain"},
    {"Data": bytes(range(256)), "PartitionKey": 'quote " and \\ backslash'},
    {"Data": b"", "PartitionKey": "tab\tnew\nline \x01"},
    {"Data": "ünïcødé ✓".encode(), "PartitionKey": "ключ ✓ 🔑"},
    {"Data": b"x" * 1000, "PartitionKey": "k", "ExplicitHashKey": "170141183460469231731687"},
]


def _boto(url: str, kinesalite: KinesaliteServer) -> Any:
    options = KinesisOptions.from_options(
        {**kinesalite.options(), "endpoint_url": url, "stream_name": "s"}
    )
    return kinesis_client._new_client(options).boto


def _json_call(url: str, kinesalite: KinesaliteServer) -> tuple[Any, aws.JsonCall]:
    """A boto3 client of the sink's make and its JsonCall (this botocore has the parts)."""
    boto = _boto(url, kinesalite)
    call = aws.JsonCall.of(boto)
    assert call is not None
    return boto, call


def _landed(kinesalite: KinesaliteServer, stream: str) -> list[tuple[bytes, str]]:
    return sorted((r["Data"], r["PartitionKey"]) for r in kinesalite.read_all(stream))


def test_a_prebuilt_body_lands_as_boto3s_own_call(
    kinesalite: KinesaliteServer, kinesis_stream: str
) -> None:
    boto, call = _json_call(kinesalite.endpoint_url, kinesalite)
    answer = call("PutRecords", request_body(kinesis_stream, ENTRIES))
    assert answer["FailedRecordCount"] == 0
    assert [sorted(r) for r in answer["Records"]] == [["SequenceNumber", "ShardId"]] * 5
    ours = _landed(kinesalite, kinesis_stream)
    assert ours == sorted((e["Data"], e["PartitionKey"]) for e in ENTRIES)
    # the same records through boto3's own put_records land identically
    boto.put_records(StreamName=kinesis_stream, Records=ENTRIES)
    assert _landed(kinesalite, kinesis_stream) == sorted(ours * 2)


def test_refused_entries_come_back_as_in_boto3s_answer(
    kinesalite: KinesaliteServer, kinesis_stream: str
) -> None:
    entries = [{"Data": f"r{i}".encode(), "PartitionKey": f"k{i}"} for i in range(300)]
    with KinesisFaultProxy(kinesalite.endpoint_url, throttle_fraction=0.3, seed=3) as proxy:
        _, call = _json_call(proxy.url, kinesalite)
        answer = call("PutRecords", request_body(kinesis_stream, entries))
    resend = kinesis_client.refused(answer, len(entries), where="w", stream=kinesis_stream)
    assert answer["FailedRecordCount"] == len(resend) == proxy.entries_refused > 0
    assert {answer["Records"][i]["ErrorCode"] for i in resend} == {
        "ProvisionedThroughputExceededException"
    }
    landed = sorted(r["Data"] for r in kinesalite.read_all(kinesis_stream))
    kept = set(range(len(entries))) - set(resend)
    assert landed == sorted(entries[i]["Data"] for i in kept)


def test_an_error_answer_raises_the_clients_own_exception(
    kinesalite: KinesaliteServer, kinesis_stream: str
) -> None:
    boto, call = _json_call(kinesalite.endpoint_url, kinesalite)
    body = request_body("no-such-stream", ENTRIES[:1])
    with pytest.raises(boto.exceptions.ResourceNotFoundException) as ours:
        call("PutRecords", body)
    with pytest.raises(boto.exceptions.ResourceNotFoundException) as theirs:
        boto.put_records(StreamName="no-such-stream", Records=ENTRIES[:1])
    assert ours.value.response["Error"] == theirs.value.response["Error"]
    status = ours.value.response["ResponseMetadata"]["HTTPStatusCode"]
    assert status == theirs.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    translated = kinesis_client.translate(ours.value, "PutRecords", stream="no-such-stream")
    assert isinstance(translated, kinesis_client.KinesisStreamNotFoundError)


def test_a_throttled_or_unanswered_call_is_retryable(
    kinesalite: KinesaliteServer, kinesis_stream: str
) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    with KinesisFaultProxy(kinesalite.endpoint_url) as proxy:
        _, call = _json_call(proxy.url, kinesalite)
        body = request_body(kinesis_stream, ENTRIES[:1])
        proxy.throttle_calls(1)
        with pytest.raises(ClientError) as throttled:
            call("PutRecords", body)
        assert throttled.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
        proxy.drop_responses(1)
        with pytest.raises(BotoCoreError) as dropped:
            call("PutRecords", body)
        assert call("PutRecords", body)["FailedRecordCount"] == 0
    for exc in (throttled.value, dropped.value):
        assert isinstance(kinesis_client.translate(exc, "PutRecords", stream="s"), RetryableError)
    assert len(kinesalite.read_all(kinesis_stream)) == 2  # the dropped call landed


def test_an_unsigned_request_is_refused_by_the_server(
    kinesalite: KinesaliteServer, kinesis_stream: str
) -> None:
    """kinesalite checks that a request is signed; an unsigned one is refused the same way."""
    _, call = _json_call(kinesalite.endpoint_url, kinesalite)
    call._signer = types.SimpleNamespace(sign=lambda operation, request: None)
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as refused:
        call("PutRecords", request_body(kinesis_stream, ENTRIES[:1]))
    assert refused.value.response["Error"]["Code"] == "MissingAuthenticationTokenException"


def test_without_the_parts_it_falls_back_to_the_clients_method(
    kinesalite: KinesaliteServer, kinesis_stream: str
) -> None:
    boto = _boto(kinesalite.endpoint_url, kinesalite)
    assert aws.JsonCall.of(types.SimpleNamespace(meta=boto.meta)) is None  # no signer/session
    s3 = aws.make_client(
        "s3", extra="s3", region_name="us-east-1", connect_timeout=1, read_timeout=1
    )
    assert aws.JsonCall.of(s3) is None  # not a JSON-protocol service
    options = KinesisOptions.from_options({**kinesalite.options(), "stream_name": kinesis_stream})
    key = client_key(options)
    kinesis_client._CLIENTS.discard(key)
    kinesis_client._CLIENTS.get(key, lambda: kinesis_client._Client(boto, None))
    try:
        answer = kinesis_client.put_records(options, "PutRecords", ENTRIES)
    finally:
        kinesis_client._CLIENTS.discard(key)
    assert answer["FailedRecordCount"] == 0
    assert _landed(kinesalite, kinesis_stream) == sorted(
        (e["Data"], e["PartitionKey"]) for e in ENTRIES
    )


def test_the_body_is_what_botocores_serializer_sends() -> None:
    import json

    import boto3
    from botocore.serialize import create_serializer

    model = boto3.client(
        "kinesis", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    ).meta.service_model
    theirs = create_serializer("json").serialize_to_request(
        {"StreamName": 'str"eam ✓', "Records": ENTRIES}, model.operation_model("PutRecords")
    )["body"]
    ours = request_body('str"eam ✓', ENTRIES)
    assert json.loads(ours) == json.loads(theirs)
    decoded = [base64.b64decode(r["Data"]) for r in json.loads(ours)["Records"]]
    assert decoded == [e["Data"] for e in ENTRIES]
