"""The `mqtt` sink through Spark against Mosquitto, with a subscriber that records everything.

Every test reads what the broker delivered to a QoS 2 subscriber (tests/services/mosquitto.py,
``Recorder``) and checks each input row: there at least once always, exactly once when no
fault was injected, and exactly once after dropping the messages whose ``qs_dedupe_id`` was
seen before (MQTT 5).
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.errors import DeliveryError, DestinationError, RetryableError
from quixsinks.sinks.mqtt import MQTTOptions, MQTTSink
from tests.services.ack_faults import LostAckProxy
from tests.services.mosquitto import MosquittoServer, Received, Recorder

from .streams import fails_before_any_task

SECRET_NOTE = "never-shown"


def write(df: Any, options: dict[str, str], **more: str) -> None:
    df.write.format("mqtt").mode("append").options(**{**options, **more}).save()


def readings(spark: Any, rows: int = 30) -> Any:
    return spark.sql(
        f"""
        SELECT concat('s', cast(id % 10 AS string)) AS key, id, cast(id AS double) / 4 AS temp,
               concat('say "', cast(id AS string), '"') AS note, id % 3 = 0 AS keep
        FROM range({rows})
        """
    )


def by_id(messages: list[Received]) -> Counter[int]:
    return Counter(json.loads(m.payload)["id"] for m in messages)


def deduplicated(messages: list[Received], name: str = "qs_dedupe_id") -> list[Received]:
    """The consumer-side recipe of docs/sinks/mqtt.md: keep the first message of each id."""
    seen: set[str] = set()
    out = []
    for message in messages:
        if message.properties[name] not in seen:
            seen.add(message.properties[name])
            out.append(message)
    return out


def test_rows_become_json_messages_on_root_slash_key_topics(
    spark: Any, mqtt_sink: dict[str, Any]
) -> None:
    write(readings(spark), mqtt_sink["options"])
    got = mqtt_sink["recorder"].wait_for(30)
    assert by_id(got) == Counter(range(30))
    root = mqtt_sink["root"]
    for message in got:
        value = json.loads(message.payload)
        assert message.topic == f"{root}/s{value['id'] % 10}"
        assert value == {
            "id": value["id"],
            "temp": value["id"] / 4,
            "note": f'say "{value["id"]}"',
            "keep": value["id"] % 3 == 0,
        }
        assert (message.qos, message.retain, message.properties) == (1, False, {})


@pytest.mark.parametrize("qos", ["1", "2"])
def test_mqtt5_messages_carry_user_properties_a_dedupe_id_and_a_retain_column(
    spark: Any, mqtt_sink: dict[str, Any], qos: str
) -> None:
    df = readings(spark).selectExpr("key", "id", "note", "keep", "cast(id * 7 AS string) AS trace")
    write(
        df,
        mqtt_sink["options"],
        version="5",
        qos=qos,
        retain="keep",
        properties="trace",
        value_columns="id,note",
    )
    got = mqtt_sink["recorder"].wait_for(30)
    assert by_id(got) == Counter(range(30))
    for message in got:
        value = json.loads(message.payload)
        assert set(value) == {"id", "note"}
        assert message.qos == int(qos)
        assert message.retain == (value["id"] % 3 == 0)
        assert message.properties["trace"] == str(value["id"] * 7)
        assert len(message.properties["qs_dedupe_id"]) == 32
    assert len({m.properties["qs_dedupe_id"] for m in got}) == 30


def test_a_map_column_gives_the_user_properties(spark: Any, mqtt_sink: dict[str, Any]) -> None:
    df = spark.sql(
        "SELECT 'k' AS key, id, map('a', cast(id AS string), 'b', 'x') AS props FROM range(5)"
    )
    write(df, mqtt_sink["options"], version="5", properties="props", value_columns="id")
    got = mqtt_sink["recorder"].wait_for(5)
    for message in got:
        i = json.loads(message.payload)["id"]
        assert {k: v for k, v in message.properties.items() if k != "qs_dedupe_id"} == {
            "a": str(i),
            "b": "x",
        }


def test_no_key_column_publishes_to_the_topic_root(spark: Any, mqtt_sink: dict[str, Any]) -> None:
    write(spark.range(4), mqtt_sink["options"], qos="0")
    got = mqtt_sink["recorder"].wait_for(4)
    assert {m.topic for m in got} == {mqtt_sink["root"]}
    assert sorted(json.loads(m.payload)["id"] for m in got) == [0, 1, 2, 3]
    assert {m.qos for m in got} == {0}


def test_a_lost_acknowledgement_is_resent_with_the_same_dedupe_id(
    spark: Any, mqtt_sink: dict[str, Any]
) -> None:
    server: MosquittoServer = mqtt_sink["server"]
    with LostAckProxy("127.0.0.1", server.port) as proxy:
        # the broker applies the PUBLISH of row 7; its PUBACK is lost with the connection.
        # One message in flight: the broker's next reply is that PUBACK (with a window of
        # several, it could be an earlier one, and the connection would be cut before the
        # broker read row 7: then the resend is its only copy)
        proxy.lose_reply_to(b'{"id":7,', times=1)
        options = {**mqtt_sink["options"], "port": str(proxy.port)}
        df = readings(spark, 40).repartition(1)
        write(df, options, version="5", max_inflight="1", retry_backoff_seconds="0.05")
        assert proxy.lost == 1
    # every publish was acknowledged when write() returned: settle() reads all the broker
    # had, the late resend included (counting to 40 could stop before it arrived)
    got = mqtt_sink["recorder"].settle()
    assert set(by_id(got)) == set(range(40))
    assert by_id(got)[7] >= 2  # resent: the broker had it already
    once = deduplicated(got)
    assert by_id(once) == Counter(range(40))


def test_a_broker_restart_mid_stream_loses_nothing(spark: Any, mosquitto: MosquittoServer) -> None:
    root = f"r{uuid.uuid4().hex[:10]}"
    rows = 60_000
    options = {
        **mosquitto.options(),
        "topic_root": root,
        "client_id": "restart",
        "version": "5",
        "max_inflight": "200",
        "retry_backoff_seconds": "0.2",
        "retry_deadline_seconds": "120",
    }
    restarted: list[int] = []
    with Recorder(mosquitto, root) as recorder:
        df = readings(spark, rows).repartition(2)

        def restart_mid_stream() -> None:
            # the Spark write runs in the test's thread (a Python data source registered
            # with the session is not found from another thread); the restart comes from here
            recorder.wait_until(lambda got: len(got) >= 2_000, timeout=120)
            restarted.append(len(recorder.snapshot()))
            mosquitto.restart()

        restarter = threading.Thread(target=restart_mid_stream, daemon=True)
        restarter.start()
        write(df, options)
        restarter.join(120)
        assert restarted, "the broker did not restart"
        assert restarted[0] < rows, "the broker restarted after the last message"
        got = recorder.wait_for(rows, timeout=120)
    assert set(by_id(got)) == set(range(rows))
    assert by_id(deduplicated(got)) == Counter(range(rows))


def test_the_password_listener_takes_the_password_and_refuses_a_wrong_one(
    spark: Any, mosquitto: MosquittoServer
) -> None:
    root = f"a{uuid.uuid4().hex[:10]}"
    options = {**mosquitto.options(auth=True), "topic_root": root, "client_id": "auth"}
    with Recorder(mosquitto, root) as recorder:
        write(readings(spark, 10), options)
        assert by_id(recorder.wait_for(10)) == Counter(range(10))
    wrong = {**options, "password": f"wrong-{SECRET_NOTE}"}
    fails_before_any_task(spark, lambda: write(readings(spark, 3), wrong), "refused")
    with pytest.raises(
        Exception, match=r"DestinationAccessDeniedError.*(?i:not authorized)"
    ) as caught:
        write(readings(spark, 3), wrong)
    text = str(caught.value)
    assert SECRET_NOTE not in text


def test_tls_with_the_brokers_ca_works_and_an_unknown_ca_is_refused(
    spark: Any, mosquitto: MosquittoServer
) -> None:
    root = f"s{uuid.uuid4().hex[:10]}"
    options = {**mosquitto.options(tls=True), "topic_root": root, "client_id": "tls"}
    with Recorder(mosquitto, root) as recorder:
        write(readings(spark, 10), options, version="5")
        assert by_id(recorder.wait_for(10)) == Counter(range(10))
    untrusted = {k: v for k, v in options.items() if k != "tls_ca_cert"}
    fails_before_any_task(
        spark, lambda: write(readings(spark, 3), untrusted), "TLS certificate was not accepted"
    )
    plain = {**options, "port": str(mosquitto.port)}  # TLS against a plain listener
    fails_before_any_task(spark, lambda: write(readings(spark, 3), plain), "tls_enabled")


def test_bad_rows_fail_naming_the_row_before_anything_is_published(
    spark: Any, mqtt_sink: dict[str, Any]
) -> None:
    options = mqtt_sink["options"]
    for key, why in (("a+b", "wildcard '\\+'"), ("a#", "wildcard '#'"), ("a\u0000b", "NUL")):
        bad = spark.sql(f"SELECT if(id = 3, '{key}', 'ok') AS key, id FROM range(6)")
        bad = bad.coalesce(1)
        with pytest.raises(Exception, match=rf"row 3 .*{why}"):
            write(bad, options)
    nulls = spark.sql("SELECT if(id = 2, NULL, 'k') AS key, id FROM range(4)").coalesce(1)
    with pytest.raises(Exception, match=r"row 2 .*null key"):
        write(nulls, options)
    long_key = spark.sql("SELECT repeat('x', 70000) AS key, 1 AS id")
    with pytest.raises(Exception, match="at most 65535"):
        write(long_key, options)
    assert mqtt_sink["recorder"].snapshot() == []


def test_bad_options_fail_before_any_task(spark: Any, mqtt_sink: dict[str, Any]) -> None:
    options = mqtt_sink["options"]
    df = readings(spark, 3)
    fails_before_any_task(spark, lambda: write(df, options, qos="3"), "<= 2")
    fails_before_any_task(spark, lambda: write(df, options, properties="note"), "needs version=5")
    fails_before_any_task(spark, lambda: write(df, options, topic_root="a/+"), "wildcard")
    fails_before_any_task(spark, lambda: write(df, options, retain="note"), "boolean column")
    fails_before_any_task(spark, lambda: write(df, options, retain="nope"), "does not have")


class MuteBroker:
    """Accepts MQTT connections, answers CONNECT with a CONNACK and then never acknowledges
    anything: the acknowledgements of a window never come."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn: socket.socket) -> None:
        try:
            conn.recv(65536)  # the CONNECT
            conn.sendall(b"\x20\x02\x00\x00")  # CONNACK, accepted
            while conn.recv(65536):
                pass  # every PUBLISH is swallowed
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()
        for conn in self.connections:
            conn.close()


def test_unacknowledged_windows_time_out_after_mqtt_flush_timeout_seconds() -> None:
    """Quix 3.28.1's flush never times out; here the window's wait ends, the messages are
    resent on new connections, and the task fails counting what was never acknowledged."""
    broker = MuteBroker()
    try:
        opts = MQTTOptions.from_options(
            {
                "server": "127.0.0.1",
                "port": str(broker.port),
                "tls_enabled": "false",
                "topic_root": "mute",
                "client_id": "mute",
                "mqtt_flush_timeout_seconds": "0.5",
                "retry_max_attempts": "2",
                "retry_backoff_seconds": "0.01",
            }
        )
        sink = MQTTSink(opts)
        table = pa.table({"key": ["a", "b", "c"], "id": [1, 2, 3]})
        sink.prepare(table.schema)
        with pytest.raises(DeliveryError) as caught:
            sink.write(SinkBatch(table, sink.records, WriteContext("s", 0)))
        assert caught.value.undelivered == 3
        assert "not acknowledged in 0.5 s (mqtt_flush_timeout_seconds)" in str(caught.value)
        assert len(broker.connections) == 2  # the resend went on a new connection
    finally:
        broker.close()


def test_a_broker_that_never_sends_the_connack_times_out() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        opts = MQTTOptions.from_options(
            {
                "server": "127.0.0.1",
                "port": str(listener.getsockname()[1]),
                "tls_enabled": "false",
                "topic_root": "hung",
                "client_id": "hung",
                "mqtt_flush_timeout_seconds": "0.5",
                "retry_max_attempts": "1",
            }
        )
        with pytest.raises(DestinationError, match=r"no CONNACK, timed out"):
            MQTTSink(opts).preflight()
    finally:
        listener.close()


def test_each_connection_has_its_own_client_id(mosquitto: MosquittoServer) -> None:
    from quixsinks.sinks.mqtt.client import Connection

    opts = MQTTOptions.from_options(
        {**mosquitto.options(), "topic_root": "ids", "client_id": "same"}
    )
    first, second = Connection(opts), Connection(opts)
    try:
        first.connect()
        second.connect()
        assert first.client_id != second.client_id
        assert first.client_id.startswith("same-")
        assert len(first.client_id) == len("same-") + 8
        assert first.usable  # neither was kicked off by the other
        assert second.usable
    finally:
        first.close()
        second.close()


def test_retryable_errors_are_what_a_refused_connection_gives(mosquitto: MosquittoServer) -> None:
    from quixsinks.sinks.mqtt.client import Connection

    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    opts = MQTTOptions.from_options(
        {
            "server": "127.0.0.1",
            "port": str(port),
            "tls_enabled": "false",
            "topic_root": "x",
            "client_id": "x",
        }
    )
    with pytest.raises(RetryableError):
        Connection(opts).connect()


#: awkward records: unicode and '/' in keys (extra topic levels), quotes, nested values,
#: nulls and floats in the values
PARITY_ROWS = [
    ("plain", {"id": 0, "text": "hello", "nested": {"a": [1]}, "x": 0.25, "flag": False}),
    (
        "caf\u00e9/\u6771\u4eac",
        {"id": 1, "text": 'say "hi"\n', "nested": {"a": [1, 2]}, "x": -1e-7, "flag": True},
    ),
    ("a b", {"id": 2, "text": None, "nested": None, "x": 1.5, "flag": None}),
    (
        "deep/er/still",
        {
            "id": 3,
            "text": "\u00fcml\u00e4ut \U0001f600",
            "nested": {"a": []},
            "x": 12345678.5,
            "flag": True,
        },
    ),
]


def test_quix_parity(spark: Any, mosquitto: MosquittoServer) -> None:
    """Quix Streams 3.28.1's MQTTSink (its setup/add/flush, no Kafka) and this sink publish
    the same records: the subscriber receives the same topics, payloads, QoS and retain."""
    from quixstreams.sinks.community.mqtt import MQTTSink as QuixMQTTSink

    received: dict[str, list[tuple[str, Any, int, bool]]] = {}
    for side in ("quix", "ours"):
        root = f"p{uuid.uuid4().hex[:10]}"
        with Recorder(mosquitto, root) as recorder:
            if side == "quix":
                quix = QuixMQTTSink(
                    client_id=f"quix-{root}",
                    server="127.0.0.1",
                    port=mosquitto.port,
                    topic_root=root,
                    tls_enabled=False,
                    qos=1,
                    retain=True,
                )
                quix.setup()
                for offset, (key, value) in enumerate(PARITY_ROWS):
                    quix.add("in", 0, offset, key.encode(), value, 0, [])
                done = threading.Thread(target=quix.flush, daemon=True)
                done.start()
                done.join(60)  # Quix's flush may never return (its timeout never fires)
                assert not done.is_alive()
                quix._cleanup()
            else:
                df = spark.createDataFrame(
                    [(k, json.dumps(v)) for k, v in PARITY_ROWS], "key string, value string"
                )
                write(
                    df,
                    {**mosquitto.options(), "topic_root": root, "client_id": "parity"},
                    value_format="json",
                    retain="true",
                )
            got = recorder.wait_for(len(PARITY_ROWS))
        received[side] = sorted(
            (m.topic[len(root) :], json.loads(m.payload), m.qos, m.retain) for m in got
        )
    assert received["ours"] == received["quix"]
    assert [r[0] for r in received["ours"]] == sorted(f"/{k}" for k, _ in PARITY_ROWS)


def test_mqtt5_windows_stay_within_the_brokers_receive_maximum() -> None:
    """Mosquitto's default announces a receive maximum of 20 to MQTT 5 clients and
    disconnects one that has more unacknowledged; windows of 1000 are cut to it."""
    with MosquittoServer(max_inflight=20) as broker:
        opts = MQTTOptions.from_options(
            {
                **broker.options(),
                "topic_root": "rm",
                "client_id": "rm",
                "version": "5",
                "retry_max_attempts": "1",
            }
        )
        with Recorder(broker, "rm") as recorder:
            sink = MQTTSink(opts)
            table = pa.table({"key": [f"k{i % 3}" for i in range(300)], "id": list(range(300))})
            sink.prepare(table.schema)
            sink.write(SinkBatch(table, sink.records, WriteContext("s", 0)))
            got = recorder.wait_for(300)
    assert by_id(got) == Counter(range(300))
