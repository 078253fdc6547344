"""Quix parity, Redis: the same awkward Kafka messages through Quix Streams' ``RedisSink``
(its ``setup()``/``add()``/``flush()`` called directly, no Kafka) and through the ``redis``
sink (a Kafka-shaped DataFrame, a batch write) into two databases of one redis-server,
then every key's bytes compared.

What a Quix app hands its sink: each Kafka value decoded by ``orjson.loads`` (a tombstone
is ``None``), the Kafka key's bytes. The differences the migration guide lists, and only
those, are allowed for here:

* the default value: Quix writes ``json.dumps(value)``, we write the producer's own JSON
  bytes (``value_serializer=json:dumps`` gives Quix's bytes, tested byte for byte);
* a null Kafka key: Quix's batch fails (redis-py refuses a ``None`` key) with nothing
  written; ours fails naming the row, or with ``null_keys=skip`` skips and counts it.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from tests.quix_streams import import_quix

#: (key, value) as a producer wrote them: mixed JSON types in one key (ints and floats),
#: keys missing from some messages, key order differing, 1e-9, raw UTF-8 and a \u00fc
#: escape, a repeated JSON key, the producer's own spacing, a repeated Kafka key (the
#: later message wins), a non-UTF-8 Kafka key, a tombstone and a key whose type differs
MESSAGES: list[tuple[bytes, bytes | None]] = [
    (b"sensor-1", b'{"temp":21.5,"count":3,"ok":true}'),
    (b"sensor-2", b'{"count":-34,"temp":-34,"tags":["a","b"]}'),
    (b"sensor-3", b'{"temp":1e-9,"name":"\\u00fc","nested":{"b":1,"a":[5]}}'),
    (b"sensor-4", '{"name":"\u00fc \U0001d11e","temp":0.1}'.encode()),
    (b"sensor-5", b'{"a":1,"a":2.0}'),
    (b"sensor-1", b'{"temp":22,"count":4.0}'),
    (b"\xff\xfe-binary", b'{ "temp" : 5, "spaced" : [1, 2] }'),
    (b"sensor-6", None),
    # a key holding a string here and numbers elsewhere: no refusal, as in Quix (the sink
    # writes each value's text, so nothing types the batch: Sink.types_json_values)
    (b"sensor-7", b'{"temp":"n/a","count":[1]}'),
]

#: a null Kafka key, which Quix's RedisSink cannot write
NULL_KEY: tuple[None, bytes] = (None, b'{"temp":1}')


def quix_sink_class() -> Any:
    return import_quix("quixstreams.sinks.community.redis").RedisSink


def tagged_key(key: bytes, value: Any) -> bytes:
    """A Quix ``key_serializer(key, value)``: the Kafka key and its message's shape."""
    shape = "tombstone" if value is None else ",".join(value)
    return key + b"|" + shape.encode()


def prefixed(run: str, messages: list[tuple[bytes | None, bytes | None]]) -> list[Any]:
    """The messages with the run's prefix in front of every key (isolates test runs)."""
    return [(None if k is None else run.encode() + k, v) for k, v in messages]


def write_with_quix(server: Any, db: int, messages: list[Any], **options: Any) -> None:
    sink = quix_sink_class()(
        host=server.host, port=server.port, db=db, password=server.password, **options
    )
    sink.setup()
    for offset, (key, value) in enumerate(messages):
        sink.add(
            value=None if value is None else orjson.loads(value),
            key=key,
            timestamp=1714521600000 + offset,
            headers=[],
            topic="events",
            partition=0,
            offset=offset,
        )
    sink.flush()


def write_with_quixsinks(
    spark: Any, server: Any, db: int, messages: list[Any], **options: str
) -> None:
    rows = [
        (key, value, "events", 0, offset, datetime.fromtimestamp(1714521600 + offset, UTC), 0)
        for offset, (key, value) in enumerate(messages)
    ]
    schema = (
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int"
    )
    # one partition: the later of two messages with one key is written last, as in Quix
    df = spark.createDataFrame(rows, schema).coalesce(1)
    writer = df.write.format("redis").mode("append")
    for name, value in {**server.options, "db": str(db), **options}.items():
        writer = writer.option(name, value)
    writer.save()


def stored(server: Any, db: int, run: str) -> dict[bytes, bytes]:
    import redis

    client = redis.Redis(host=server.host, port=server.port, password=server.password, db=db)
    try:
        return {key: client.get(key) for key in client.keys(run + "*")}
    finally:
        client.close()


def producers_bytes(messages: list[Any]) -> dict[bytes, bytes]:
    """What each key holds when every value is written as the producer wrote it."""
    return {key: b"null" if value is None else value for key, value in messages}


@pytest.fixture
def run() -> str:
    return f"qp{uuid.uuid4().hex[:10]}:"


def test_value_serializer_json_dumps_gives_quixs_bytes_for_every_key(
    spark: Any, redis_server: Any, run: str
) -> None:
    messages = prefixed(run, MESSAGES)
    write_with_quix(redis_server, 1, messages)
    write_with_quixsinks(
        spark,
        redis_server,
        2,
        [*messages, NULL_KEY],
        value_serializer="json:dumps",
        null_keys="skip",
    )
    quix, ours = stored(redis_server, 1, run), stored(redis_server, 2, run)
    assert ours == quix
    assert len(quix) == 8
    assert quix[run.encode() + b"sensor-2"] == b'{"count": -34, "temp": -34, "tags": ["a", "b"]}'
    assert quix[run.encode() + b"sensor-6"] == b"null"  # a tombstone: json.dumps(None)


def test_the_default_writes_each_producers_bytes_where_quix_writes_json_dumps(
    spark: Any, redis_server: Any, run: str
) -> None:
    messages = prefixed(run, MESSAGES)
    write_with_quix(redis_server, 1, messages)
    write_with_quixsinks(spark, redis_server, 2, messages)
    quix, ours = stored(redis_server, 1, run), stored(redis_server, 2, run)
    assert ours == producers_bytes(messages)
    assert ours[run.encode() + b"sensor-1"] == b'{"temp":22,"count":4.0}'  # the later one
    # the listed difference: the same JSON values, Quix's spelling of them
    assert ours.keys() == quix.keys()
    assert {k: json.loads(v) for k, v in ours.items()} == {
        k: json.loads(v) for k, v in quix.items()
    }
    assert ours != quix


def test_a_quix_key_serializer_is_migrated_by_its_import_path(
    spark: Any, redis_server: Any, run: str
) -> None:
    messages = prefixed(run, MESSAGES)
    write_with_quix(redis_server, 1, messages, key_serializer=tagged_key)
    write_with_quixsinks(
        spark,
        redis_server,
        2,
        messages,
        key_serializer=f"{__name__}:tagged_key",
        value_serializer="json:dumps",
    )
    quix, ours = stored(redis_server, 1, run), stored(redis_server, 2, run)
    assert ours == quix
    assert run.encode() + b"sensor-6|tombstone" in ours
    assert run.encode() + b"sensor-2|count,temp,tags" in ours


def test_a_null_kafka_key_fails_quixs_batch_and_is_a_row_error_here(
    spark: Any, redis_server: Any, run: str
) -> None:
    import redis

    messages = prefixed(run, MESSAGES)
    with pytest.raises(redis.exceptions.DataError):
        write_with_quix(redis_server, 1, [*messages, NULL_KEY])
    assert stored(redis_server, 1, run) == {}  # Quix's MULTI never ran
    with pytest.raises(
        Exception, match=r"offset 9 was refused: redis: the key of row 9 is null"
    ) as raised:
        write_with_quixsinks(spark, redis_server, 2, [*messages, NULL_KEY])
    assert "null_keys=skip" in str(raised.value)
