"""Row-level refusals of the kinesis, redis and mqtt sinks without a server: each bad row
is refused by itself (on_error), the per-sink options win for their case, and
core.rowchecks.RowChecks (the vectorised checks they share)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.delivery import DedupeIds
from quixsinks.core.errors import RecordError
from quixsinks.core.rowchecks import RowChecks
from quixsinks.core.sink import Sink
from quixsinks.sinks.kinesis import KinesisOptions, KinesisSink
from quixsinks.sinks.mqtt import MQTTOptions, MQTTSink
from quixsinks.sinks.redis import RedisOptions, RedisSink


def skipping(sink: Sink[Any, Any], table: pa.Table) -> SinkBatch:
    """A batch of ``table`` in a task of ``sink`` (whose options say on_error)."""
    sink.prepare(table.schema)
    assert sink.records is not None
    context = WriteContext("s", 0)
    task = sink.new_task(context)
    return SinkBatch(table, sink.records, context, task.counters, task=task)


# ---------------------------------------------------------------------------- RowChecks


def test_row_checks_refuse_each_bad_row_once_with_its_first_reason() -> None:
    table = pa.table({"a": [1, -1, 2, -2, None]})
    sink = KinesisSink(KinesisOptions.from_options({"stream_name": "s", "on_error": "skip"}))
    batch = skipping(sink, pa.table({"key": ["k"] * 5, "a": table.column("a")}))
    checks = RowChecks(batch)
    checks.add(pa.array([False] * 5), lambda row: "never")  # no row: not kept
    assert not checks
    checks.add(pa.array([False, True, False, True, None]), lambda row: f"negative {row}")
    checks.add(pa.array([False, True, False, False, True]), lambda row: f"other {row}")
    kept = checks.refuse()
    assert kept.table.column("a").to_pylist() == [1, 2]
    assert batch.counters == {"skipped": 3}


def test_row_checks_under_fail_name_the_first_bad_row() -> None:
    sink = KinesisSink(KinesisOptions.from_options({"stream_name": "s"}))
    batch = skipping(sink, pa.table({"key": ["a", "b", "c"], "n": [1, 2, 3]}))
    checks = RowChecks(batch)
    checks.add(pa.array([False, True, True]), lambda row: f"row {row} is bad", "n")
    with pytest.raises(RecordError, match=r"key 'b' .* was refused: row 1 is bad") as info:
        checks.refuse()
    assert (info.value.row, info.value.column) == (1, "n")


# ---------------------------------------------------------------------------- kinesis


def kinesis_entries(table: pa.Table, **extra: str) -> tuple[list[dict[str, Any]], SinkBatch]:
    sink = KinesisSink(KinesisOptions.from_options({"stream_name": "s", **extra}))
    batch = skipping(sink, table)
    return sink.entries(batch, DedupeIds("s", 0, 0)), batch


def test_kinesis_refuses_each_bad_record_and_invalid_records_skip_wins() -> None:
    table = pa.table({"key": ["a", "", "k" * 300, None, "e"], "id": [0, 1, 2, 3, 4]})
    out, batch = kinesis_entries(table, on_error="skip")
    assert [json.loads(e["Data"])["id"] for e in out] == [0, 4]
    assert batch.counters == {"skipped": 3}
    out, batch = kinesis_entries(table, on_error="skip", invalid_records="skip")
    assert [json.loads(e["Data"])["id"] for e in out] == [0, 4]
    assert batch.counters == {"skipped": 1, "skipped_invalid": 2}  # the null key: on_error's
    out, batch = kinesis_entries(table, on_error="skip", null_partition_keys="dedupe_id")
    assert [json.loads(e["Data"])["id"] for e in out] == [0, 3, 4]


def test_kinesis_refuses_a_null_data_column_row() -> None:
    table = pa.table({"key": ["a", "b"], "d": [b"x", None]})
    out, batch = kinesis_entries(table, on_error="skip", data_column="d", dedupe_id="none")
    assert [e["Data"] for e in out] == [b"x"]
    assert batch.counters == {"skipped": 1}


# ---------------------------------------------------------------------------- redis


def test_redis_refuses_rows_it_cannot_write_and_null_keys_skip_wins() -> None:
    table = pa.table(
        {
            "city": ["a", "b:c", None, "d", "e"],
            "v": ["1", "2", "3", None, "5"],
            "ttl": [10, 10, 10, 10, 0],
            "n": [1, 2, 3, 4, 5],
        }
    )
    common = {"key_template": "s:{city}:{n}", "value_column": "v", "ttl_column": "ttl"}
    sink = RedisSink(RedisOptions.from_options({**common, "on_error": "skip"}))
    batch = skipping(sink, table)
    kept, keys, skipped = sink.encoder.keyed(batch)
    assert keys.to_pylist() == [b"s:a:1"]
    assert (kept.num_rows, skipped, batch.counters) == (1, 0, {"skipped": 4})
    sink = RedisSink(RedisOptions.from_options({**common, "on_error": "skip", "null_keys": "skip"}))
    batch = skipping(sink, table)
    kept, keys, skipped = sink.encoder.keyed(batch)
    assert (kept.num_rows, skipped, batch.counters) == (1, 1, {"skipped": 3})


def test_redis_key_check_refuses_keys_of_another_type() -> None:
    sink = RedisSink(RedisOptions.from_options({"data_type": "list", "on_error": "skip"}))
    batch = skipping(sink, pa.table({"key": ["a", "b", "a"], "v": [1, 2, 3]}))
    commands, _ = sink.encoder.staged_commands(
        batch, "staging", lambda keys: pa.array([k == b"b" for k in keys.to_pylist()])
    )
    assert commands.keys.to_pylist() == [b"a", b"a"]
    assert batch.counters == {"skipped": 1}


# ---------------------------------------------------------------------------- mqtt

MQTT = {"server": "h", "port": "1883", "client_id": "c", "topic_root": "r"}


def test_mqtt_refuses_packets_over_the_brokers_maximum_packet_size() -> None:
    table = pa.table({"key": ["a", "b", "c"], "blob": ["x", "y" * 500, "z"]})
    sink = MQTTSink(MQTTOptions.from_options({**MQTT, "on_error": "skip"}))
    batch = skipping(sink, table)
    messages = sink.messages(batch, None, 0, max_packet_bytes=200)
    assert messages.topics.to_pylist() == ["r/a", "r/c"]
    assert messages.batch is not None
    assert messages.batch.table.column("key").to_pylist() == ["a", "c"]
    assert batch.counters == {"skipped": 1}
    fail = MQTTSink(MQTTOptions.from_options(MQTT))
    with pytest.raises(RecordError, match="the broker takes at most 200"):
        fail.messages(skipping(fail, table), None, 0, max_packet_bytes=200)


def test_mqtt_refuses_a_user_property_a_broker_refuses() -> None:
    table = pa.table({"key": ["a", "b"], "p": ["ok", "bad\x01"], "id": [1, 2]})
    options = {
        **MQTT,
        "version": "5",
        "properties": "p",
    }
    sink = MQTTSink(MQTTOptions.from_options({**options, "on_error": "skip"}))
    batch = skipping(sink, table)
    messages = sink.messages(batch, DedupeIds("s", 0, 0), 0)
    assert messages.topics.to_pylist() == ["r/a"]
    assert batch.counters == {"skipped": 1}
