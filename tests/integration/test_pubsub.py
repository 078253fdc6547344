"""The `pubsub` sink through Spark against the Google Pub/Sub emulator.

Every test reads the messages back through a subscription of its own topic. Transient
publish failures come from a TCP fault proxy (tests/services/tcp_faults.py) between the
sink and the emulator: it cuts every connection for a while, which the gRPC client sees as
UNAVAILABLE, as it would for a real network outage (the emulator itself never fails a
publish). A "dead endpoint" is a port nothing listens on.
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.core.errors import DeliveryError
from quixsinks.sinks.pubsub import PubSubSink
from quixsinks.testing import faulty
from tests.services.common import free_port
from tests.services.tcp_faults import TCPFaultProxy

from .streams import run_available_now, write_input_files


def write(df: Any, options: dict[str, str], fmt: str = "pubsub") -> None:
    writer = df.write.format(fmt).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def pull(topic: dict[str, Any], idle_seconds: float = 1.0) -> list[Any]:
    return list(topic["server"].pull_all(topic["topic"], idle_seconds=idle_seconds))


def dedupe(messages: list[Any]) -> list[Any]:
    seen: dict[str, Any] = {}
    for m in messages:
        seen.setdefault(m.attributes["qs_dedupe_id"], m)
    return list(seen.values())


@pytest.fixture
def readings(spark: Any) -> Any:
    return spark.sql(
        """
        SELECT concat('s', cast(id AS string)) AS key, id, cast(id AS double) / 4 AS temp,
               concat('say "', cast(id AS string), '"') AS note,
               timestamp_millis(1714521600000 + id) AS timestamp
        FROM range(40)
        """
    ).repartition(3)


def test_each_row_is_one_message_with_quix_attributes_and_a_dedupe_id(
    readings: Any, pubsub_topic: dict[str, Any]
) -> None:
    write(readings, pubsub_topic["options"])
    messages = pull(pubsub_topic)
    assert len(messages) == 40  # no fault: exactly once
    by_key = {m.attributes["_key"]: m for m in messages}
    m = by_key["s7"]
    assert json.loads(m.data) == {"id": 7, "temp": 1.75, "note": 'say "7"'}
    assert m.attributes["_timestamp"] == str(1714521600000 + 7)
    assert set(m.attributes) == {"_key", "_timestamp", "qs_dedupe_id"}
    assert len({m.attributes["qs_dedupe_id"] for m in messages}) == 40


def test_data_column_attributes_and_ordering_keys_arrive_as_sent(
    spark: Any, pubsub_topic: dict[str, Any]
) -> None:
    df = spark.sql(
        """
        SELECT concat('dev', cast(id % 3 AS string)) AS device, id AS seq,
               cast(concat('payload-', cast(id AS string)) AS binary) AS body,
               map('source', 'spark', 'n', cast(id AS string)) AS attrs
        FROM range(300)
        """
    ).coalesce(1)
    options = {
        **pubsub_topic["options"],
        "data_column": "body",
        "ordering_key_column": "device",
        "attributes_columns": "attrs",
        "key_column": "none",
        "max_messages": "7",  # many publish requests per ordering key
    }
    write(df, options)
    messages = pull(pubsub_topic)
    assert len(messages) == 300
    per_key: dict[str, list[int]] = collections.defaultdict(list)
    for m in messages:
        n = int(m.attributes["n"])
        assert m.data == f"payload-{n}".encode()
        assert m.attributes["source"] == "spark"
        assert m.ordering_key == f"dev{n % 3}"
        per_key[m.ordering_key].append(n)
    for key, seen in per_key.items():
        assert seen == sorted(seen), key  # each key's messages in row order


def test_named_attribute_columns_and_a_value_serializer(
    readings: Any, pubsub_topic: dict[str, Any]
) -> None:
    options = {
        **pubsub_topic["options"],
        "attributes_columns": "id,note",
        "value_serializer": "json:dumps",
        "value_columns": "temp",
    }
    write(readings, options)
    m = {m.attributes["id"]: m for m in pull(pubsub_topic)}["3"]
    assert m.data == b'{"temp": 0.75}'
    assert m.attributes["note"] == 'say "3"'


def test_streaming_with_a_checkpoint_delivers_every_row(
    spark: Any, pubsub_topic: dict[str, Any], tmp_path: Path
) -> None:
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=20)
    run_available_now(spark, tmp_path / "in", "pubsub", tmp_path / "ck", pubsub_topic["options"])
    messages = pull(pubsub_topic)
    assert sorted(json.loads(m.data)["id"] for m in messages) == ids
    assert {m.attributes["_key"] for m in messages} == {f"k{i}" for i in range(7)}


@pytest.mark.parametrize("phase", ["write", "commit-before", "commit-after"])
def test_failed_batches_replay_at_least_once_and_dedupe_ids_make_it_exactly_once(
    spark: Any, pubsub_topic: dict[str, Any], tmp_path: Path, phase: str
) -> None:
    quixsinks.register(spark, faulty(PubSubSink))
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    options = {
        **pubsub_topic["options"],
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_pubsub", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_pubsub", tmp_path / "ck", options)
    messages = pull(pubsub_topic)
    got = [json.loads(m.data)["id"] for m in messages]
    assert set(got) == set(ids)  # every row at least once
    if phase != "write":
        assert len(got) > len(ids)  # batch 1 was published twice...
    assert sorted(json.loads(m.data)["id"] for m in dedupe(messages)) == ids  # ...same ids


def test_publishes_failing_transiently_are_resent_until_delivered(
    spark: Any, pubsub_topic: dict[str, Any]
) -> None:
    server = pubsub_topic["server"]
    df = spark.sql("SELECT id, concat('k', cast(id % 5 AS string)) AS okey FROM range(1000)")
    with TCPFaultProxy(server.host, server.port) as proxy:
        options = {
            **pubsub_topic["options"],
            "emulator_host": proxy.address,
            "ordering_key_column": "okey",
            "round_messages": "125",
            "publish_timeout": "2",
            "flush_timeout": "3",
            "retry_backoff_seconds": "0.2",
            "retry_max_attempts": "30",
            "retry_deadline_seconds": "60",
            "check_topic": "false",
        }
        proxy.cut_after(bytes_forwarded=10_000, seconds=1.0)  # mid-write, once
        write(df.coalesce(2), options)
        assert proxy.cuts == 1
    messages = pull(pubsub_topic)
    got = [json.loads(m.data)["id"] for m in messages]
    assert set(got) == set(range(1000))  # every row at least once
    assert sorted(json.loads(m.data)["id"] for m in dedupe(messages)) == list(range(1000))
    per_key: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
    for m in dedupe(messages):
        n = json.loads(m.data)["id"]
        per_key[m.ordering_key, n // 500].append(n)  # ordered per key within a task
    for key, seen in per_key.items():  # resumed keys: still in row order
        assert seen == sorted(seen), key


def test_a_dead_endpoint_fails_within_the_deadline_counting_undelivered(
    readings: Any, pubsub_topic: dict[str, Any]
) -> None:
    options = {
        **pubsub_topic["options"],
        "emulator_host": f"127.0.0.1:{free_port()}",
        "publish_timeout": "1",
        "retry_backoff_seconds": "0.1",
        "retry_deadline_seconds": "3",
    }
    started = time.monotonic()
    with pytest.raises(Exception, match="cannot reach projects/quixsinks-test/topics/"):
        write(readings, options)  # the driver's get_topic, before any task
    options["check_topic"] = "false"
    with pytest.raises(Exception, match=r"of \d+ item\(s\) not delivered") as failure:
        write(readings, options)
    assert "UNAVAILABLE" in str(failure.value)
    assert time.monotonic() - started < 60


def test_a_deleted_topic_fails_clearly(readings: Any, pubsub_topic: dict[str, Any]) -> None:
    pubsub_topic["server"].delete_topic(pubsub_topic["topic"])
    with pytest.raises(Exception, match=r"PubSubTopicNotFoundError|does not exist"):
        write(readings, pubsub_topic["options"])
    started = time.monotonic()
    options = {**pubsub_topic["options"], "check_topic": "false"}
    with pytest.raises(Exception, match=r"topic projects/.+ does not exist") as failure:
        write(readings, options)  # from the first failed publish
    assert "PubSubTopicNotFoundError" in str(failure.value)
    assert time.monotonic() - started < 60


def test_a_message_over_10_mb_is_a_record_error_naming_its_row(
    spark: Any, pubsub_topic: dict[str, Any]
) -> None:
    df = spark.sql(
        "SELECT id, IF(id = 2, repeat('x', 10000001), 'small') AS body FROM range(4)"
    ).coalesce(1)
    options = {**pubsub_topic["options"], "data_column": "body"}
    with pytest.raises(Exception, match=r"row 2 is 10000001 bytes"):
        write(df, options)
    assert pull(pubsub_topic, idle_seconds=0.3) == []  # nothing of the batch was published


def test_bad_input_fails_before_any_data_moves(readings: Any, pubsub_topic: dict[str, Any]) -> None:
    opts = pubsub_topic["options"]
    with pytest.raises(Exception, match="'data_column' 'temp' has type double"):
        write(readings, {**opts, "data_column": "temp"})
    with pytest.raises(Exception, match="'ordering_key_column' names 'nope'"):
        write(readings, {**opts, "ordering_key_column": "nope"})
    with pytest.raises(Exception, match="option 'topic_id' has value"):
        write(readings, {**opts, "topic_id": "projects/x/topics/y"})
    with pytest.raises(Exception, match="'max_messages' has value '5000'"):
        write(readings, {**opts, "max_messages": "5000"})
    assert pull(pubsub_topic, idle_seconds=0.3) == []


def test_the_service_account_json_never_shows_in_errors(
    readings: Any, pubsub_topic: dict[str, Any]
) -> None:
    secret = '{"type": "service_account", "private_key": "TOPSECRET-KEY"}'
    options = {**pubsub_topic["options"], "service_account_json": secret}
    del options["emulator_host"]
    with pytest.raises(Exception, match="service_account_json") as failure:
        write(readings, options)
    assert "TOPSECRET" not in str(failure.value)
    assert "service_account_json" in str(failure.value)
    assert "TOPSECRET" not in repr(PubSubSink.options_class.from_options(options))


def test_hostile_values_and_attribute_names_arrive_intact(
    spark: Any, pubsub_topic: dict[str, Any]
) -> None:
    df = spark.createDataFrame(
        [("k\u00e9y\n\"'", "v\u0000\u2603 \U0001f600", "a=b;c")],
        "key string, value string, `odd name` string",
    )
    options = {**pubsub_topic["options"], "attributes_columns": "odd name"}
    write(df, options)
    (m,) = pull(pubsub_topic)
    assert m.attributes["_key"] == "k\u00e9y\n\"'"
    assert m.attributes["odd name"] == "a=b;c"
    assert json.loads(m.data) == {"value": "v\u0000\u2603 \U0001f600", "odd name": "a=b;c"}


def test_delivery_error_is_raised_when_the_round_never_completes(
    pubsub_topic: dict[str, Any],
) -> None:
    """Unit-level through a real publisher: a proxy that stays cut makes write() raise
    DeliveryError with the count of undelivered messages (no Spark)."""
    import pyarrow as pa

    from quixsinks.core.batch import SinkBatch, WriteContext

    server = pubsub_topic["server"]
    with TCPFaultProxy(server.host, server.port) as proxy:
        proxy.cut_after(bytes_forwarded=0, seconds=30)
        options = PubSubSink.options_class.from_options(
            {
                **pubsub_topic["options"],
                "emulator_host": proxy.address,
                "publish_timeout": "1",
                "retry_backoff_seconds": "0.1",
                "retry_deadline_seconds": "2",
                "check_topic": "false",
            }
        )
        sink = PubSubSink(options)
        table = pa.table({"id": list(range(10))})
        sink.prepare(table.schema)
        assert sink.records is not None
        batch = SinkBatch(table, sink.records, WriteContext("s", 0))
        with pytest.raises(DeliveryError) as failure:
            sink.write(batch)
    assert failure.value.undelivered == 10
    assert failure.value.total == 10
