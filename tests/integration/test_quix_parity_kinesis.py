"""Quix parity: the same awkward Kafka messages through Quix Streams' ``KinesisSink`` (its
``setup()``/``add()``/``flush()`` called directly, no Kafka) and through the ``kinesis``
sink (a Kafka-shaped DataFrame, a batch write) into two streams of one kinesalite, then
every record's data and partition key compared.

Quix gets each value as a Quix app does: ``orjson.loads`` of the Kafka bytes (None for a
tombstone). Quix's ``KinesisSink`` reads its AWS settings from the environment when its
module is imported (they are its parameters' defaults), so the test sets them and then
imports the module afresh.

The differences normalised here are the ones docs/sinks/kinesis.md lists ("Migrating from
Quix Streams"):

- the data: Quix sends ``json.dumps`` of the parsed message (``{"t": 1e-09}``: spaces,
  ``\\u00fc`` escapes, re-printed numbers, a repeated member collapsed); the sink sends the
  producer's bytes. ``value_serializer=json:dumps`` gives Quix's bytes exactly.
- the dedupe id: by default the sink puts ``"_dedupe_id":"<32 hex>"`` first in each JSON
  object (not into a tombstone's ``null``); ``dedupe_id=none`` leaves the data alone.
- a key that is not UTF-8: Quix's ``bytes.decode`` raises and stops the app; the sink's
  partition key has replacement characters. A null key: Quix raises (``bytes.decode(None)``);
  the sink refuses the row naming it, or ``null_partition_keys=dedupe_id`` uses the dedupe id.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.quix_streams import import_quix

BASE_MS = 1714521600000

#: (key, value) as a producer wrote them: mixed int/float in one member, members missing
#: from some messages, member order differing, 1e-9, raw ü and its \u00fc escape, nested
#: values, a repeated JSON member, repeated Kafka keys, whitespace around an object, an
#: empty object and a tombstone
MESSAGES: list[tuple[bytes, bytes | None]] = [
    (b"sensor-1", b'{"id":1,"temp":21.5,"note":"plain"}'),
    (b"sensor-2", b'{"temp": -34, "id": 2}'),
    (b"sensor-1", b'{"id":3,"temp":1e-9,"city":"M\\u00fcnchen"}'),
    ("s\u00fc-3".encode(), '{"id":4,"city":"Zürich","tags":[5, 2.5],"n":{"a":null}}'.encode()),
    (b"sensor-2", b'{"id":5}'),
    (b"sensor-4", b' {"id":6,"temp":1E+2,"ok":true,"id":7} '),
    (b"sensor-4", b"{}"),
    (b"sensor-1", None),
    (b"sensor-5", b'{"id":"eight","temp":[1]}'),  # other types: written, not refused
]

DEDUPE_FIELD = re.compile(rb'^\{"_dedupe_id":"[0-9a-f]{32}",?')


def quix_sink_class() -> Any:
    return import_quix(
        "quixstreams.sinks.community.kinesis", fresh=True
    ).KinesisSink  # its env defaults


@pytest.fixture
def quix_env(kinesalite: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    options = kinesalite.options()
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", options["endpoint_url"])
    monkeypatch.setenv("AWS_REGION", options["region_name"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["aws_secret_access_key"])


def write_with_quix(
    stream: str, messages: list[tuple[bytes | None, bytes | None]], **options: Any
) -> None:
    import orjson

    sink = quix_sink_class()(stream_name=stream, **options)
    sink.setup()
    for offset, (key, value) in enumerate(messages):
        sink.add(
            value=None if value is None else orjson.loads(value),
            key=key,
            timestamp=BASE_MS + offset,
            headers=[],
            topic="events",
            partition=0,
            offset=offset,
        )
    sink.flush()


def kafka_frame(spark: Any, messages: list[tuple[bytes | None, bytes | None]]) -> Any:
    rows = [
        (
            key,
            value,
            "events",
            0,
            offset,
            datetime.fromtimestamp((BASE_MS + offset) / 1000, UTC),
            0,
        )
        for offset, (key, value) in enumerate(messages)
    ]
    schema = (
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int"
    )
    return spark.createDataFrame(rows, schema).coalesce(1)  # one task: one Kafka partition


def write_with_quixsinks(
    spark: Any,
    kinesis_sink: dict[str, Any],
    messages: list[tuple[bytes | None, bytes | None]],
    **options: str,
) -> None:
    writer = kafka_frame(spark, messages).write.format("kinesis").mode("append")
    for key, value in {**kinesis_sink["options"], **options}.items():
        writer = writer.option(key, value)
    writer.save()


def by_key(server: Any, stream: str) -> dict[str, list[bytes]]:
    """Each partition key's records' data, in the order the stream holds them."""
    out: dict[str, list[bytes]] = defaultdict(list)
    for record in server.read_all(stream):  # shard by shard; a key stays in one shard
        out[record["PartitionKey"]].append(bytes(record["Data"]))
    return dict(out)


@pytest.fixture
def quix_stream(kinesalite: Any) -> str:
    name = f"quix-{uuid.uuid4().hex[:12]}"
    kinesalite.create_stream(name, shards=2)
    return name


def test_value_serializer_json_dumps_gives_quix_records_byte_for_byte(
    spark: Any, kinesis_sink: dict[str, Any], quix_stream: str, quix_env: None
) -> None:
    server = kinesis_sink["server"]
    write_with_quix(quix_stream, MESSAGES)  # type: ignore[arg-type]
    write_with_quixsinks(
        spark, kinesis_sink, MESSAGES, value_serializer="json:dumps", dedupe_id="none"
    )  # type: ignore[arg-type]
    theirs, ours = by_key(server, quix_stream), by_key(server, kinesis_sink["stream"])
    assert sum(len(v) for v in ours.values()) == len(MESSAGES)
    assert ours == theirs
    assert theirs["sensor-2"] == [b'{"temp": -34, "id": 2}', b'{"id": 5}']  # -34 an int
    assert theirs["sensor-1"][-1] == b"null"  # the tombstone


def test_by_default_the_producers_bytes_go_where_quix_re_encodes_them(
    spark: Any, kinesis_sink: dict[str, Any], quix_stream: str, quix_env: None
) -> None:
    server = kinesis_sink["server"]
    write_with_quix(quix_stream, MESSAGES)  # type: ignore[arg-type]
    write_with_quixsinks(spark, kinesis_sink, MESSAGES, dedupe_id="none")  # type: ignore[arg-type]
    theirs, ours = by_key(server, quix_stream), by_key(server, kinesis_sink["stream"])
    expected: dict[str, list[bytes]] = defaultdict(list)
    for key, value in MESSAGES:
        expected[key.decode()].append(b"null" if value is None else value)  # type: ignore[union-attr]
    assert ours == dict(expected)
    # the listed difference: the same JSON values, Quix's text re-encoded by json.dumps
    assert sorted(ours) == sorted(theirs)
    for key in ours:
        assert [json.loads(d) for d in ours[key]] == [json.loads(d) for d in theirs[key]]
    assert b'{"id":3,"temp":1e-9,"city":"M\\u00fcnchen"}' in ours["sensor-1"]
    assert b'{"id": 3, "temp": 1e-09, "city": "M\\u00fcnchen"}' in theirs["sensor-1"]


def test_the_default_dedupe_field_is_the_only_change_to_the_producers_object(
    spark: Any, kinesis_sink: dict[str, Any]
) -> None:
    write_with_quixsinks(spark, kinesis_sink, MESSAGES)  # type: ignore[arg-type]
    ours = by_key(kinesis_sink["server"], kinesis_sink["stream"])
    expected: dict[str, list[bytes]] = defaultdict(list)
    for key, value in MESSAGES:
        expected[key.decode()].append(b"null" if value is None else value.lstrip())  # type: ignore[union-attr]
    normalised = {
        key: [
            b"null" if data == b"null" else DEDUPE_FIELD.sub(b"{", data, count=1) for data in datas
        ]
        for key, datas in ours.items()
    }
    assert normalised == dict(expected)
    ids = [json.loads(d)["_dedupe_id"] for datas in ours.values() for d in datas if d != b"null"]
    assert len(set(ids)) == len(MESSAGES) - 1  # every object has its own id; null has none


def test_keys_quix_cannot_decode_stop_quix_and_are_handled_by_the_sink(
    spark: Any, kinesis_sink: dict[str, Any], quix_stream: str, quix_env: None
) -> None:
    """A key that is not UTF-8 and a null key: Quix's ``bytes.decode`` raises in
    ``add()``. The sink sends the first with replacement characters and refuses the
    second naming its row (or uses the dedupe id with null_partition_keys=dedupe_id)."""
    with pytest.raises(UnicodeDecodeError):
        write_with_quix(quix_stream, [(b"\xff\xfe", b'{"a":1}')])
    with pytest.raises(TypeError):
        write_with_quix(quix_stream, [(None, b'{"a":1}')])
    messages: list[tuple[bytes | None, bytes | None]] = [
        (b"\xff\xfe", b'{"a":1}'),
        (b"caf\xc3\xa9", b'{"a":2}'),
    ]
    write_with_quixsinks(spark, kinesis_sink, messages, dedupe_id="none")
    assert by_key(kinesis_sink["server"], kinesis_sink["stream"]) == {
        "\ufffd\ufffd": [b'{"a":1}'],
        "caf\u00e9": [b'{"a":2}'],
    }
    with pytest.raises(Exception, match=r"row 0 .*null partition key"):
        write_with_quixsinks(spark, kinesis_sink, [(None, b'{"a":3}')])
    write_with_quixsinks(spark, kinesis_sink, [(None, b'{"a":3}')], null_partition_keys="dedupe_id")
    found = by_key(kinesis_sink["server"], kinesis_sink["stream"])
    (key,) = set(found) - {"\ufffd\ufffd", "caf\u00e9"}
    assert found[key] == [b'{"_dedupe_id":"' + key.encode() + b'","a":3}']
