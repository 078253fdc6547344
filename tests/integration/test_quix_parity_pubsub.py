"""Quix parity: the same awkward Kafka messages through Quix Streams' ``PubSubSink`` (its
``setup()``/``add()``/``flush()`` called directly, no Kafka) and through the ``pubsub``
sink (a Kafka-shaped DataFrame with headers, a batch write) into two topics of one Pub/Sub
emulator, then every message's data and attributes compared (matched by ``_offset``).

Quix gets each value as a Quix app does: ``orjson.loads`` of the Kafka bytes (None for a
tombstone); its ``PublisherClient`` finds the emulator through ``PUBSUB_EMULATOR_HOST``.

The differences normalised here are the ones docs/sinks/pubsub.md lists ("Migrating from
Quix Streams"):

- the data: Quix publishes ``json.dumps`` of the parsed message (``{"t": 1e-09}``: spaces,
  ``\\u00fc`` escapes, re-printed numbers, a repeated member collapsed); the sink publishes
  the producer's bytes. ``value_serializer=json:dumps`` gives Quix's bytes exactly.
- the ``qs_dedupe_id`` attribute the sink adds to every message (``dedupe_attribute``).
- a key that is not UTF-8: Quix's ``bytes.decode`` raises and stops the app; the sink
  refuses the row naming it (``on_error``). A null key: Quix raises
  (``bytes.decode(None)``); the sink publishes the message without a ``_key`` attribute.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.quix_streams import import_quix

BASE_MS = 1714521600000

Header = tuple[str, bytes]

#: (key, value, headers) as a producer wrote them: mixed int/float in one member, members
#: missing from some messages, member order differing, 1e-9, raw ü and its \u00fc escape,
#: nested values, a repeated JSON member, repeated Kafka keys, whitespace around an
#: object, an empty object, a repeated header name and a tombstone
MESSAGES: list[tuple[bytes, bytes | None, list[Header]]] = [
    (b"sensor-1", b'{"id":1,"temp":21.5,"note":"plain"}', [("trace", b"abc")]),
    (b"sensor-2", b'{"temp": -34, "id": 2}', []),
    (b"sensor-1", b'{"id":3,"temp":1e-9,"city":"M\\u00fcnchen"}', [("h", b"1"), ("h", b"2")]),
    (
        "s\u00fc-3".encode(),
        '{"id":4,"city":"Zürich","tags":[5, 2.5],"n":{"a":null}}'.encode(),
        [("unicode", "\u00fc".encode())],
    ),
    (b"sensor-2", b'{"id":5}', []),
    (b"sensor-4", b' {"id":6,"temp":1E+2,"ok":true,"id":7} ', []),
    (b"sensor-4", b"{}", []),
    (b"sensor-1", None, [("deleted", b"yes")]),
    (b"sensor-5", b'{"id":"eight","temp":[1]}', []),  # other types: written, not refused
]


def quix_sink_class() -> Any:
    return import_quix("quixstreams.sinks.community.pubsub").PubSubSink


@pytest.fixture
def quix_topic(pubsub_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator.emulator_host)
    name = f"quix-{uuid.uuid4().hex[:12]}"
    pubsub_emulator.create_topic(name)
    return name


def write_with_quix(
    server: Any, topic: str, messages: list[tuple[bytes | None, bytes | None, list[Header]]]
) -> None:
    import orjson

    sink = quix_sink_class()(project_id=server.project, topic_id=topic)
    sink.setup()
    for offset, (key, value, headers) in enumerate(messages):
        sink.add(
            value=None if value is None else orjson.loads(value),
            key=key,
            timestamp=BASE_MS + offset,
            headers=headers,
            topic="events",
            partition=0,
            offset=offset,
        )
    sink.flush()


def write_with_quixsinks(
    spark: Any,
    pubsub_topic: dict[str, Any],
    messages: list[tuple[bytes | None, bytes | None, list[Header]]],
    **options: str,
) -> None:
    rows = [
        (
            key,
            value,
            "events",
            0,
            offset,
            datetime.fromtimestamp((BASE_MS + offset) / 1000, UTC),
            0,
            headers,
        )
        for offset, (key, value, headers) in enumerate(messages)
    ]
    schema = (
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
    )
    df = spark.createDataFrame(rows, schema).coalesce(1)  # one task: one Kafka partition
    writer = df.write.format("pubsub").mode("append")
    for key, value in {**pubsub_topic["options"], **options}.items():
        writer = writer.option(key, value)
    writer.save()


def received(server: Any, topic: str) -> dict[str, tuple[bytes, dict[str, str]]]:
    """Each message's data and attributes, by its ``_offset`` attribute."""
    out = {}
    for message in server.pull_all(topic):
        attributes = dict(message.attributes)
        out[attributes["_offset"]] = (bytes(message.data), attributes)
    return out


def without_dedupe(found: dict[str, tuple[bytes, dict[str, str]]]) -> dict[str, Any]:
    """The listed difference: the sink's dedupe attribute taken out (after checking it)."""
    out = {}
    for offset, (data, attributes) in found.items():
        assert len(attributes.pop("qs_dedupe_id")) == 32
        out[offset] = (data, attributes)
    return out


def test_value_serializer_json_dumps_gives_quix_messages_byte_for_byte(
    spark: Any, pubsub_topic: dict[str, Any], quix_topic: str
) -> None:
    server = pubsub_topic["server"]
    write_with_quix(server, quix_topic, MESSAGES)  # type: ignore[arg-type]
    write_with_quixsinks(spark, pubsub_topic, MESSAGES, value_serializer="json:dumps")  # type: ignore[arg-type]
    theirs = received(server, quix_topic)
    ours = without_dedupe(received(server, pubsub_topic["topic"]))
    assert len(ours) == len(MESSAGES)
    assert ours == theirs
    assert theirs["1"][0] == b'{"temp": -34, "id": 2}'  # -34 stays an int
    assert theirs["7"] == (
        b"null",  # the tombstone
        {"_key": "sensor-1", "_timestamp": str(BASE_MS + 7), "_offset": "7", "deleted": "yes"},
    )
    assert theirs["2"][1]["h"] == "2"  # a repeated header: the last one


def test_by_default_the_producers_bytes_go_where_quix_re_encodes_them(
    spark: Any, pubsub_topic: dict[str, Any], quix_topic: str
) -> None:
    server = pubsub_topic["server"]
    write_with_quix(server, quix_topic, MESSAGES)  # type: ignore[arg-type]
    write_with_quixsinks(spark, pubsub_topic, MESSAGES)  # type: ignore[arg-type]
    theirs = received(server, quix_topic)
    ours = without_dedupe(received(server, pubsub_topic["topic"]))
    assert {offset: data for offset, (data, _) in ours.items()} == {
        str(offset): b"null" if value is None else value
        for offset, (_, value, _) in enumerate(MESSAGES)
    }
    # the listed difference: the same JSON values, Quix's text re-encoded by json.dumps
    assert sorted(ours) == sorted(theirs)
    for offset in ours:
        assert json.loads(ours[offset][0]) == json.loads(theirs[offset][0])
        assert ours[offset][1] == theirs[offset][1]  # the same attributes
    assert ours["2"][0] == b'{"id":3,"temp":1e-9,"city":"M\\u00fcnchen"}'
    assert theirs["2"][0] == b'{"id": 3, "temp": 1e-09, "city": "M\\u00fcnchen"}'


def test_keys_quix_cannot_decode_stop_quix_and_are_handled_by_the_sink(
    spark: Any, pubsub_topic: dict[str, Any], quix_topic: str
) -> None:
    """A key that is not UTF-8 and a null key: Quix's ``bytes.decode`` raises in
    ``add()``. The sink refuses the first naming its row (``on_error``: here skip) and
    publishes the second without a ``_key`` attribute."""
    server = pubsub_topic["server"]
    with pytest.raises(UnicodeDecodeError):
        write_with_quix(server, quix_topic, [(b"\xff\xfe", b'{"a":1}', [])])
    with pytest.raises(TypeError):
        write_with_quix(server, quix_topic, [(None, b'{"a":1}', [])])
    messages: list[tuple[bytes | None, bytes | None, list[Header]]] = [
        (b"\xff\xfe", b'{"a":1}', []),
        (None, b'{"a":2}', []),
        (b"caf\xc3\xa9", b'{"a":3}', []),
    ]
    with pytest.raises(Exception, match=r"key of row 0 .*not UTF-8"):
        write_with_quixsinks(spark, pubsub_topic, messages)
    assert server.pull_all(pubsub_topic["topic"]) == []  # nothing of the batch went out
    write_with_quixsinks(spark, pubsub_topic, messages, on_error="skip")
    ours = without_dedupe(received(server, pubsub_topic["topic"]))
    assert ours == {
        "1": (b'{"a":2}', {"_timestamp": str(BASE_MS + 1), "_offset": "1"}),
        "2": (b'{"a":3}', {"_key": "caf\u00e9", "_timestamp": str(BASE_MS + 2), "_offset": "2"}),
    }
