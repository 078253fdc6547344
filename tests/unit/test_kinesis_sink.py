"""The kinesis sink without a server: options, limits, entries, dedupe ids, error mapping."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.delivery import DedupeIds
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    RecordError,
    RetryableError,
)
from quixsinks.core.sink import Task
from quixsinks.sinks.kinesis import KinesisOptions, KinesisSink, KinesisStreamNotFoundError
from quixsinks.sinks.kinesis.client import refused, translate
from quixsinks.sinks.kinesis.wire import (
    MAX_HASH_KEY,
    MAX_RECORD_BYTES,
    entry_size,
    find_problems,
    layers,
)

SECRET = "s3cret-kinesis-key"


def options(**extra: str) -> KinesisOptions:
    return KinesisOptions.from_options(
        {"stream_name": "s", "region_name": "us-east-1", "aws_secret_access_key": SECRET, **extra}
    )


def sink_for(table: pa.Table, **extra: str) -> KinesisSink:
    sink = KinesisSink(options(**extra))
    sink.prepare(table.schema)
    return sink


def entries(sink: KinesisSink, table: pa.Table, batch_id: int = 0) -> list[dict[str, Any]]:
    assert sink.records is not None
    batch = SinkBatch(table, sink.records, WriteContext("sink-1", batch_id))
    return sink.entries(batch, DedupeIds("sink-1", batch_id, 0))


TABLE = pa.table({"key": [b"a", b"b", b"a"], "id": [1, 2, 1], "name": ["x", "y", "x"]})


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"records_per_request": "501"}, "<= 500"),
        ({"data_column": "d", "value_serializer": "json:dumps"}, "exclude each other"),
        ({"partition_key_column": "k", "key_serializer": "json:dumps"}, "exclude each other"),
        ({"dedupe_id": "field", "data_column": "d"}, "dedupe_id=prefix or none"),
        ({"value_serializer": "json.dumps"}, "import path"),
        ({"stream_name": " "}, "non-empty string"),
        ({"max_inflight": "0"}, ">= 1"),
        ({"null_partition_keys": "guess"}, "one of 'error' or 'dedupe_id'"),
    ],
)
def test_bad_options_are_refused(extra: dict[str, str], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        options(**extra)


def test_secrets_stay_out_of_reprs_and_pickles_carry_them() -> None:
    sink = KinesisSink(options(aws_session_token="tok-" + SECRET))
    assert SECRET not in repr(sink)
    assert SECRET not in repr(sink.options)
    assert SECRET not in str(sink.options.redacted())
    assert pickle.loads(pickle.dumps(sink)).options.aws_secret_access_key == SECRET


def test_json_values_get_the_dedupe_id_first_and_the_key_decoded() -> None:
    out = entries(sink_for(TABLE), TABLE)
    values = [json.loads(e["Data"]) for e in out]
    assert [e["PartitionKey"] for e in out] == ["a", "b", "a"]
    assert [next(iter(v)) for v in values] == ["_dedupe_id"] * 3
    assert [{k: v for k, v in d.items() if k != "_dedupe_id"} for d in values] == [
        {"id": 1, "name": "x"},
        {"id": 2, "name": "y"},
        {"id": 1, "name": "x"},
    ]
    ids = [v["_dedupe_id"] for v in values]
    assert len(set(ids)) == 3  # identical rows still get distinct ids


def test_dedupe_ids_are_the_same_on_a_replay_and_differ_between_batches() -> None:
    sink = sink_for(TABLE)
    first = [e["Data"] for e in entries(sink, TABLE)]
    assert [e["Data"] for e in entries(sink, TABLE)] == first
    assert [e["Data"] for e in entries(sink, TABLE, batch_id=1)] != first


def test_kafka_coordinates_make_ids_independent_of_the_spark_partition() -> None:
    table = pa.table(
        {
            "key": [b"a", b"a"],
            "value": [b'{"x":1}', b'{"x":1}'],
            "topic": ["t", "t"],
            "partition": [0, 0],
            "offset": [5, 6],
            "timestamp": pa.array([0, 0], pa.timestamp("ms")),
            "timestampType": [0, 0],
        }
    )
    sink = sink_for(table)
    assert sink.kafka_coordinates == ("topic", "partition", "offset")
    found = []
    for partition in (0, 3):  # the same rows in two Spark partitions: the same ids
        context = WriteContext("sink-1", 0, partition_id=partition)
        task = Task(context)
        sink.setup(task)
        batch = SinkBatch(table, sink.records, context)  # type: ignore[arg-type]
        out = sink.entries(batch, task.state["dedupe"])
        found.append([json.loads(e["Data"])["_dedupe_id"] for e in out])
    assert found[0] == found[1]
    ids = found[0]
    assert len(set(ids)) == 2


def kafka_json_table(values: list[bytes | None], keys: list[bytes | None]) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": ["t"] * n,
            "partition": [0] * n,
            "offset": list(range(n)),
            "timestamp": pa.array([0] * n, pa.timestamp("ms")),
            "timestampType": [0] * n,
        }
    )


AWKWARD = [b'{"t": -34, "u": "\\u00fc"}', b' { "t": 1e-9, "x": "\xc3\xbc" }', b"{ }", None]


def test_a_kafka_json_value_is_sent_as_the_producer_wrote_it() -> None:
    table = kafka_json_table(AWKWARD, [b"a", b"b", b"c", b"d"])
    out = entries(sink_for(table, dedupe_id="none"), table)
    assert [e["Data"] for e in out] == [*AWKWARD[:3], b"null"]  # a tombstone is null


def test_the_dedupe_field_goes_into_the_producers_object_and_not_into_a_tombstone() -> None:
    table = kafka_json_table(AWKWARD, [b"a", b"b", b"c", b"d"])
    out = [e["Data"] for e in entries(sink_for(table), table)]
    ids = [json.loads(d)["_dedupe_id"] for d in out[:3]]
    assert out[0] == b'{"_dedupe_id":"' + ids[0].encode() + b'",' + AWKWARD[0][1:]
    assert out[1] == b'{"_dedupe_id":"' + ids[1].encode() + b'", "t": 1e-9, "x": "\xc3\xbc" }'
    assert out[2] == b'{"_dedupe_id":"' + ids[2].encode() + b'" }'
    assert out[3] == b"null"


def test_value_serializer_json_dumps_gives_quix_bytes() -> None:
    table = kafka_json_table(AWKWARD, [b"a", b"b", b"c", b"d"])
    out = entries(sink_for(table, value_serializer="json:dumps", dedupe_id="none"), table)
    quix = [json.dumps(None if v is None else json.loads(v)).encode() for v in AWKWARD]
    assert [e["Data"] for e in out] == quix
    assert out[0]["Data"] == b'{"t": -34, "u": "\\u00fc"}'  # -34 stays an int


def test_a_value_serializer_that_raises_is_a_record_error_naming_the_row() -> None:
    table = kafka_json_table([b'{"a": 1}', b'{"a": "x"}'], [b"a", b"b"])
    sink = sink_for(table, value_serializer="operator:neg", dedupe_id="none")
    with pytest.raises(RecordError, match=r"'value_serializer' failed on row 0"):
        entries(sink, table)


def test_a_key_that_is_not_utf8_becomes_replacement_characters() -> None:
    table = kafka_json_table([b"{}", b"{}"], [b"caf\xc3\xa9", b"\xff\xfe"])
    out = entries(sink_for(table), table)
    assert [e["PartitionKey"] for e in out] == ["caf\u00e9", "\ufffd\ufffd"]


def test_prefix_ids_go_before_data_column_bytes_with_hash_keys() -> None:
    table = pa.table({"pk": ["p1", "p2"], "body": [b"\x00\x01", b""], "hk": ["7", None]})
    sink = sink_for(
        table, data_column="body", partition_key_column="pk", explicit_hash_key_column="hk"
    )
    out = entries(sink, table)
    assert [e["Data"][33:] for e in out] == [b"\x00\x01", b""]
    assert all(len(e["Data"][:32].decode()) == 32 and e["Data"][32:33] == b" " for e in out)
    assert out[0]["ExplicitHashKey"] == "7"
    assert "ExplicitHashKey" not in out[1]


def test_no_dedupe_id_leaves_the_data_alone() -> None:
    out = entries(sink_for(TABLE, dedupe_id="none"), TABLE)
    assert json.loads(out[0]["Data"]) == {"id": 1, "name": "x"}


def test_null_partition_keys_fail_naming_the_row_or_take_the_dedupe_id() -> None:
    table = pa.table({"key": ["a", None, "c"], "id": [1, 2, 3]})
    with pytest.raises(RecordError, match=r"row 1 .*null partition key") as info:
        entries(sink_for(table), table)
    assert info.value.row == 1
    out = entries(sink_for(table, null_partition_keys="dedupe_id"), table)
    assert out[1]["PartitionKey"] == json.loads(out[1]["Data"])["_dedupe_id"]


def test_without_any_key_column_planning_asks_for_one() -> None:
    table = pa.table({"id": [1]})
    with pytest.raises(OptionError, match="partition_key_column"):
        sink_for(table)
    assert entries(sink_for(table, null_partition_keys="dedupe_id"), table)[0]["PartitionKey"]


def test_limits_name_the_first_offending_row() -> None:
    keys = pa.array(["ok", "k" * 257, "", "ok"])
    data = pa.array([b"x", b"x", b"x", b"x" * MAX_RECORD_BYTES])
    problem = find_problems(data, keys, None)
    assert problem is not None
    assert (problem.count, problem.row) == (3, 1)
    assert "257 characters" in problem.reason
    assert problem.mask.to_pylist() == [False, True, True, True]
    # the partition key counts against the 1 MiB
    exact = pa.array([b"x" * (MAX_RECORD_BYTES - 2)])
    assert find_problems(exact, pa.array(["ab"]), None) is None
    assert find_problems(exact, pa.array(["abc"]), None) is not None
    # a 256-character key of multi-byte characters is fine
    assert find_problems(pa.array([b""]), pa.array(["é" * 256]), None) is None


@pytest.mark.parametrize(
    ("hash_key", "ok"),
    [
        ("0", True),
        (str(MAX_HASH_KEY), True),
        (str(MAX_HASH_KEY + 1), False),
        ("9" * 40, False),
        ("-1", False),
        ("12a", False),
        ("1.5", False),
        (None, True),
    ],
)
def test_explicit_hash_keys_are_decimals_up_to_2_128(hash_key: str | None, ok: bool) -> None:
    problem = find_problems(pa.array([b"d"]), pa.array(["k"]), pa.array([hash_key], pa.string()))
    assert (problem is None) is ok


def test_invalid_records_fail_naming_the_row_or_are_skipped_and_counted() -> None:
    table = pa.table({"key": ["a", "k" * 300, "c"], "id": [1, 2, 3]})
    with pytest.raises(RecordError, match=r"row 1 .*300 characters.*invalid_records=skip"):
        entries(sink_for(table), table)
    sink = sink_for(table, invalid_records="skip")
    batch = SinkBatch(table, sink.records, WriteContext("s", 0))  # type: ignore[arg-type]
    out = sink.entries(batch, DedupeIds("s", 0, 0))
    assert [json.loads(e["Data"])["id"] for e in out] == [1, 3]
    assert batch.counters == {"skipped_invalid": 1}


def test_entry_size_counts_the_partition_key_bytes() -> None:
    assert entry_size({"Data": b"abc", "PartitionKey": "é"}) == 5


def test_ordered_layers_hold_each_key_once_in_order() -> None:
    items = [{"PartitionKey": k, "Data": str(i).encode()} for i, k in enumerate("aabacb")]
    split = layers(items)
    assert [[e["PartitionKey"] for e in layer] for layer in split] == [
        ["a", "b", "c"],
        ["a", "b"],
        ["a"],
    ]
    assert [e["Data"] for e in split[0]] == [b"0", b"2", b"4"]


def _client_error(code: str, status: int = 400, message: str = "m") -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
        },
        "PutRecords",
    )


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ResourceNotFoundException", 400, KinesisStreamNotFoundError),
        ("ProvisionedThroughputExceededException", 400, RetryableError),
        ("LimitExceededException", 400, RetryableError),
        ("KMSThrottlingException", 400, RetryableError),
        ("InternalFailure", 500, RetryableError),
        ("Whatever", 503, RetryableError),
        ("UnrecognizedClientException", 400, DestinationAccessDeniedError),
        ("AccessDeniedException", 400, DestinationAccessDeniedError),
        ("ExpiredTokenException", 400, DestinationAccessDeniedError),
        ("ValidationException", 400, DestinationError),
    ],
)
def test_botocore_errors_are_translated(code: str, status: int, expected: type) -> None:
    error = translate(
        _client_error(code, status, f"echo {SECRET}"), "where", stream="s", secrets=[SECRET]
    )
    assert type(error) is expected
    assert SECRET not in str(error)
    if expected is KinesisStreamNotFoundError:
        assert isinstance(error, DestinationNotFoundError)


def test_a_dropped_connection_is_retryable() -> None:
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError

    for exc in (
        ConnectionClosedError(endpoint_url="http://x"),
        EndpointConnectionError(endpoint_url="http://x"),
    ):
        assert isinstance(translate(exc, "w", stream="s"), RetryableError)


def test_a_timeout_is_retryable_and_names_its_option() -> None:
    from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

    for exc in (ReadTimeoutError(endpoint_url="http://x"), ConnectTimeoutError(endpoint_url="x")):
        error = translate(exc, "PutRecords", stream="s", timeout=2.5)
        assert isinstance(error, RetryableError)
        assert "timed out (no answer in 2.5 s; option 'request_timeout_seconds')" in str(error)


def test_refused_entries_are_resent_and_kms_failures_are_permanent() -> None:
    def _refused(answer: dict[str, Any], sent: int) -> list[int]:
        return refused(answer, sent, where="kinesis stream 's'", stream="s")

    answer = {
        "FailedRecordCount": 2,
        "Records": [
            {"SequenceNumber": "1"},
            {"ErrorCode": "ProvisionedThroughputExceededException"},
            {"ErrorCode": "InternalFailure"},
        ],
    }
    assert _refused(answer, 3) == [1, 2]
    with pytest.raises(RetryableError, match="2 results for 3"):
        _refused({"FailedRecordCount": 0, "Records": [{}, {}]}, 3)
    kms = {"FailedRecordCount": 1, "Records": [{"ErrorCode": "KMSDisabledException"}]}
    with pytest.raises(DestinationError, match="KMSDisabledException"):
        _refused(kms, 1)
