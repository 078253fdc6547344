"""Quix parity, MQTT: the same awkward Kafka messages through Quix Streams' ``MQTTSink``
(its ``setup()``/``add()``/``flush()`` called directly, no Kafka) and through the ``mqtt``
sink (a Kafka-shaped DataFrame, a batch write) to one mosquitto, then every message a
subscriber receives compared: topic and payload bytes.

What a Quix app hands its sink: each Kafka value decoded by ``orjson.loads`` (a tombstone
is ``None``), the Kafka key's bytes (topic ``<topic_root>/<key_serializer(key)>``, by
default ``bytes.decode``). The differences the migration guide lists, and only those, are
allowed for here:

* the default payload: Quix publishes ``json.dumps(value)``, we publish the producer's
  own JSON bytes (``value_serializer=json:dumps`` gives Quix's payloads, byte for byte);
* a Kafka key that is not UTF-8: Quix's ``bytes.decode`` raises and its checkpoint fails;
  ours refuses the batch before anything of it is published, naming the key column.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from tests.quix_streams import import_quix
from tests.services.mosquitto import MosquittoServer, Recorder

#: (key, value) as a producer wrote them: mixed JSON types in one key (ints and floats),
#: keys missing from some messages, key order differing, 1e-9, raw UTF-8 and a \u00fc
#: escape, a repeated JSON key, the producer's own spacing, a repeated Kafka key (both
#: published, in order) and a tombstone
MESSAGES: list[tuple[bytes, bytes | None]] = [
    (b"sensor-1", b'{"temp":21.5,"count":3,"ok":true}'),
    (b"sensor-2", b'{"count":-34,"temp":-34,"tags":["a","b"]}'),
    (b"sensor-3", b'{"temp":1e-9,"name":"\\u00fc","nested":{"b":1,"a":[5]}}'),
    ("caf\u00e9".encode(), '{"name":"\u00fc \U0001d11e","temp":0.1}'.encode()),
    (b"sensor-5", b'{"a":1,"a":2.0}'),
    (b"sensor-1", b'{"temp":22,"count":4.0}'),
    (b"sensor-7", b'{ "temp" : 5, "spaced" : [1, 2] }'),
    (b"sensor-6", None),
]


def quix_sink_class() -> Any:
    return import_quix("quixstreams.sinks.community.mqtt").MQTTSink


def write_with_quix(server: MosquittoServer, root: str, messages: list[Any]) -> None:
    sink = quix_sink_class()(
        client_id=f"quix-{root}",
        server="127.0.0.1",
        port=server.port,
        topic_root=root,
        tls_enabled=False,
        qos=1,
    )
    sink.setup()
    try:
        for offset, (key, value) in enumerate(messages):
            sink.add(
                topic="events",
                partition=0,
                offset=offset,
                key=key,
                value=None if value is None else orjson.loads(value),
                timestamp=1714521600000 + offset,
                headers=[],
            )
        done = threading.Thread(target=sink.flush, daemon=True)
        done.start()
        done.join(60)  # Quix's flush may never return (its timeout never fires)
        assert not done.is_alive()
    finally:
        sink._cleanup()


def write_with_quixsinks(
    spark: Any, server: MosquittoServer, root: str, messages: list[Any], **options: str
) -> None:
    rows = [
        (key, value, "events", 0, offset, datetime.fromtimestamp(1714521600 + offset, UTC), 0)
        for offset, (key, value) in enumerate(messages)
    ]
    schema = (
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int"
    )
    df = spark.createDataFrame(rows, schema).coalesce(1)
    settings = {**server.options(), "topic_root": root, "client_id": f"ours-{root}", **options}
    df.write.format("mqtt").mode("append").options(**settings).save()


def received(server: MosquittoServer, publish: Any) -> list[tuple[str, bytes]]:
    """(topic below the root, payload) of every message ``publish(root)`` sends, sorted."""
    root = f"qp{uuid.uuid4().hex[:10]}"
    with Recorder(server, root) as recorder:
        publish(root)
        got = recorder.wait_for(len(MESSAGES))
    return sorted((m.topic[len(root) :], m.payload) for m in got)


def test_value_serializer_json_dumps_publishes_quixs_payloads(
    spark: Any, mosquitto: MosquittoServer
) -> None:
    quix = received(mosquitto, lambda root: write_with_quix(mosquitto, root, MESSAGES))
    ours = received(
        mosquitto,
        lambda root: write_with_quixsinks(
            spark, mosquitto, root, MESSAGES, value_serializer="json:dumps"
        ),
    )
    assert ours == quix
    assert ("/sensor-2", b'{"count": -34, "temp": -34, "tags": ["a", "b"]}') in quix
    assert ("/sensor-6", b"null") in quix  # a tombstone: json.dumps(None)


def test_the_default_publishes_each_producers_bytes_where_quix_publishes_json_dumps(
    spark: Any, mosquitto: MosquittoServer
) -> None:
    quix = received(mosquitto, lambda root: write_with_quix(mosquitto, root, MESSAGES))
    ours = received(mosquitto, lambda root: write_with_quixsinks(spark, mosquitto, root, MESSAGES))
    producers = sorted(
        ("/" + key.decode(), b"null" if value is None else value) for key, value in MESSAGES
    )
    assert ours == producers
    # the listed difference: the same JSON values, Quix's spelling of them
    assert [(t, orjson.loads(p)) for t, p in ours] == [(t, orjson.loads(p)) for t, p in quix]
    assert ours != quix


def test_a_key_that_is_not_utf8_fails_quix_and_is_refused_here(
    spark: Any, mosquitto: MosquittoServer
) -> None:
    root = f"qp{uuid.uuid4().hex[:10]}"
    with pytest.raises(UnicodeDecodeError):
        write_with_quix(mosquitto, root, [(b"\xff\xfe", b"{}")])
    with pytest.raises(Exception, match="UTF-8") as raised:
        write_with_quixsinks(spark, mosquitto, root, [(b"ok", b"{}"), (b"\xff\xfe", b"{}")])
    assert "'key'" in str(raised.value)
