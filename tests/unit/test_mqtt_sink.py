"""The mqtt sink without a broker: options, and the PUBLISH packets it builds in Arrow,
decoded here by an independent reading of the MQTT 3.1.1 / 5 packet format."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quixsinks.core.arrow import uint16_be, varints
from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.delivery import DedupeIds
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.sinks.mqtt import MQTTOptions, MQTTSink

BASE = {"client_id": "c", "server": "127.0.0.1", "port": "1883", "topic_root": "root"}


def read_varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def decode(data: bytes, v5: bool) -> list[dict[str, object]]:
    """Every PUBLISH packet of ``data``."""
    out = []
    at = 0
    while at < len(data):
        first = data[at]
        assert first >> 4 == 3  # PUBLISH
        qos, retain = (first >> 1) & 3, bool(first & 1)
        length, body = read_varint(data, at + 1)
        end = body + length
        size = int.from_bytes(data[body : body + 2], "big")
        topic = data[body + 2 : body + 2 + size].decode()
        cursor = body + 2 + size
        pid = None
        if qos:
            pid = int.from_bytes(data[cursor : cursor + 2], "big")
            cursor += 2
        props: list[tuple[str, str]] = []
        if v5:
            plen, cursor = read_varint(data, cursor)
            stop = cursor + plen
            while cursor < stop:
                assert data[cursor] == 0x26  # user property
                n = int.from_bytes(data[cursor + 1 : cursor + 3], "big")
                name = data[cursor + 3 : cursor + 3 + n].decode()
                cursor += 3 + n
                m = int.from_bytes(data[cursor : cursor + 2], "big")
                props.append((name, data[cursor + 2 : cursor + 2 + m].decode()))
                cursor += 2 + m
        out.append(
            {
                "qos": qos,
                "retain": retain,
                "topic": topic,
                "pid": pid,
                "props": props,
                "payload": data[cursor:end],
            }
        )
        at = end
    return out


def messages(options: dict[str, str], table: pa.Table) -> tuple[MQTTSink, object]:
    sink = MQTTSink(MQTTOptions.from_options({**BASE, **options}))
    sink.prepare(table.schema)
    batch = SinkBatch(table, sink.records, WriteContext("s", 3, 1))  # type: ignore[arg-type]
    dedupe = DedupeIds("s", 3, 1) if sink.options.dedupe_ids else None
    return sink, sink.messages(batch, dedupe)


def test_mqtt311_packets_carry_topic_packet_id_retain_and_json_payload() -> None:
    table = pa.table({"key": ["a", "b/c", "\u00e9"], "id": [1, 2, 3], "ok": [True, False, None]})
    _, built = messages({"retain": "ok", "qos": "2"}, table)
    packets = decode(bytes(built.window([2, 0, 1])), v5=False)  # type: ignore[attr-defined]
    assert [p["topic"] for p in packets] == ["root/\u00e9", "root/a", "root/b/c"]
    assert [p["pid"] for p in packets] == [1, 2, 3]
    assert [p["retain"] for p in packets] == [False, True, False]
    assert {p["qos"] for p in packets} == {2}
    assert [p["payload"] for p in packets] == [
        b'{"id":3,"ok":null}',
        b'{"id":1,"ok":true}',
        b'{"id":2,"ok":false}',
    ]


def test_mqtt5_packets_carry_the_dedupe_id_first_then_the_property_columns() -> None:
    table = pa.table({"key": ["a", "b"], "id": [1, 2], "trace": ["t1", None]})
    _, built = messages({"version": "5", "properties": "trace", "qos": "0"}, table)
    packets = decode(bytes(built.window([0, 1])), v5=True)  # type: ignore[attr-defined]
    assert [p["pid"] for p in packets] == [None, None]
    first, second = (p["props"] for p in packets)
    assert [name for name, _ in first] == ["qs_dedupe_id", "trace"]  # type: ignore[union-attr]
    assert first[1] == ("trace", "t1")  # type: ignore[index]
    assert [name for name, _ in second] == ["qs_dedupe_id"]  # type: ignore[union-attr]
    assert first[0][1] != second[0][1]  # type: ignore[index]
    again = decode(
        bytes(
            messages({"version": "5", "properties": "trace", "qos": "0"}, table)[1].window([0, 1])
        ),
        v5=True,
    )  # type: ignore[attr-defined]
    assert [p["props"] for p in again] == [first, second]  # the same ids on a replay


@pytest.mark.parametrize(
    ("key", "why"),
    [("a+b", "wildcard '\\+'"), ("#", "wildcard '#'"), ("a\x00", "NUL"), (None, "null key")],
)
def test_a_key_mqtt_cannot_carry_is_a_record_error_naming_the_row(
    key: str | None, why: str
) -> None:
    table = pa.table({"key": pa.array(["ok", key], pa.string()), "id": [1, 2]})
    with pytest.raises(RecordError, match=f"row 1 .*{why}"):
        messages({}, table)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"qos": "3"}, "<= 2"),
        ({"properties": "x"}, "needs version=5"),
        ({"topic_root": "a/#"}, "wildcard"),
        ({"version": "3.1", "client_id": "a-very-long-client-id"}, "MQTT 3.1 allows 23"),
        ({"password": "p"}, "without 'username'"),
        ({"tls_enabled": "false", "tls_ca_cert": "/ca.pem"}, "tls_enabled=false"),
        ({"max_inflight": "70000"}, "<= 65535"),
    ],
)
def test_bad_options_are_refused(options: dict[str, str], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        MQTTOptions.from_options({**BASE, **options})


def test_options_and_sink_pickle_without_showing_the_password() -> None:
    opts = MQTTOptions.from_options({**BASE, "username": "u", "password": "s3cr3t-pw"})
    assert "s3cr3t-pw" not in repr(opts)
    sink = pickle.loads(pickle.dumps(MQTTSink(opts)))
    assert sink.options == opts
    assert "s3cr3t-pw" not in repr(sink)


@settings(deadline=None)  # a shared machine: no timed assertions
@given(st.lists(st.integers(0, 268_435_455), max_size=50))
def test_varints_are_mqtt_variable_byte_integers(values: list[int]) -> None:
    encoded = varints(pa.array(values, pa.int64())).to_pylist()
    for value, data in zip(values, encoded, strict=True):
        assert read_varint(data, 0) == (value, len(data))
        assert len(data) <= 4


@settings(deadline=None)
@given(st.lists(st.integers(0, 65535), max_size=50))
def test_uint16_be(values: list[int]) -> None:
    assert uint16_be(pa.array(values, pa.int32())).to_pylist() == [
        v.to_bytes(2, "big") for v in values
    ]


KAFKA_VALUES = [b'{"t":-34,"n":[5],"s":"\\u00fc","x":1e-9}', b'{"x":2.5,"t":0.5}', None]


def kafka_table() -> pa.Table:
    return pa.table(
        {
            "key": pa.array([b"a", b"b", b"c"]),
            "value": pa.array(KAFKA_VALUES, pa.binary()),
            "topic": ["in"] * 3,
            "partition": pa.array([0] * 3, pa.int32()),
            "offset": pa.array([0, 1, 2], pa.int64()),
            "timestamp": pa.array([0] * 3, pa.timestamp("ms")),
            "timestampType": pa.array([0] * 3, pa.int32()),
        }
    )


def payloads(options: dict[str, str]) -> list[bytes]:
    _, built = messages(options, kafka_table())
    return [p["payload"] for p in decode(bytes(built.window([0, 1, 2])), v5=False)]  # type: ignore[attr-defined, misc]


def test_a_kafka_json_value_is_published_as_the_producer_wrote_it() -> None:
    assert payloads({}) == [KAFKA_VALUES[0], KAFKA_VALUES[1], b"null"]


def test_value_serializer_json_dumps_publishes_quixs_payloads() -> None:
    import json

    quix = [json.dumps(None if v is None else json.loads(v)).encode() for v in KAFKA_VALUES]
    assert payloads({"value_serializer": "json:dumps"}) == quix


def fails(value: object) -> bytes:
    raise ValueError("no")


def test_a_value_serializer_that_raises_is_a_record_error_naming_the_row() -> None:
    with pytest.raises(RecordError, match="'value_serializer' failed on row 0: ValueError: no"):
        messages({"value_serializer": f"{__name__}:fails"}, kafka_table())


def test_a_task_hands_the_sink_small_batches_unless_told_otherwise() -> None:
    """A SinkBatch's messages are all built before it is published: 1 MiB SinkBatches keep
    a task's memory flat (bench_memory: the whole partition was one SinkBatch before)."""
    from quixsinks.core.sink import SMALL_BATCH_BYTES, CommonOptions

    default = MQTTOptions.from_options(BASE)
    assert default.max_batch_bytes == SMALL_BATCH_BYTES < CommonOptions().max_batch_bytes
    told = MQTTOptions.from_options({**BASE, "max_batch_bytes": str(64 * 1024 * 1024)})
    assert told.max_batch_bytes == 64 * 1024 * 1024
