"""on_error for the kinesis, redis and mqtt sinks: their own row-level errors, through Spark.

Each sink gets a Kafka-shaped poison stream (tests/integration/poison.py) holding at least
one row per row-level error it can meet: the good rows land with the sink's guarantee,
each bad one lands exactly once in dead_letter_path (also when a micro-batch fails after
its dead letters were staged and the query restarts from its checkpoint); ``skip`` drops
them, ``fail`` names the row. The redis list/stream ledger keeps commit records, read back
with ``quixsinks.commit_records``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.sinks.kinesis import KinesisSink
from quixsinks.sinks.mqtt import MQTTSink
from quixsinks.sinks.redis import RedisSink
from quixsinks.testing import faulty

from .poison import (
    assert_nothing_staged,
    dead_letter,
    read_dead_letters,
    run_poison_stream,
)


def letters_by_offset(path: Path) -> dict[int, dict[str, Any]]:
    letters = read_dead_letters(path)
    by_offset = {int(letter["row"]["offset"]): letter for letter in letters}
    assert len(by_offset) == len(letters), "a dead letter was published twice"
    return by_offset


def check_letters(path: Path, sink: str, expected: dict[int, tuple[int, str]]) -> None:
    """Each expected offset once, from its batch, with a message saying why."""
    letters = letters_by_offset(path)
    assert sorted(letters) == sorted(expected)
    for offset, (batch_id, why) in expected.items():
        letter = letters[offset]
        assert letter["sink"] == sink
        assert letter["batch_id"] == batch_id
        assert letter["error"]["type"] == "RecordError"
        assert why in letter["error"]["message"], (why, letter["error"]["message"])
    assert_nothing_staged(path)


def restart_after_a_failed_commit(
    spark: Any, tmp_path: Path, sink_class: Any, options: dict[str, str], batches: Any
) -> None:
    """Micro-batch 1 fails in the driver after its tasks staged their dead letters and
    wrote; the query restarts from its checkpoint and replays it."""
    quixsinks.register(spark, faulty(sink_class))
    faults = {
        "fail_batch": "1",
        "fail_phase": "commit-before",
        "fail_marker": str(tmp_path / "fired"),
    }
    fmt = f"faulty_{sink_class.name}"
    with pytest.raises(Exception, match="injected failure"):
        run_poison_stream(spark, tmp_path, fmt, {**options, **faults}, batches)
    run_poison_stream(spark, tmp_path, fmt, {**options, **faults}, batches)
    assert (tmp_path / "fired").exists()


# ---------------------------------------------------------------------------- kinesis

BIG = "x" * (1024 * 1024 + 10)
KINESIS_BATCHES = [
    [("k0", '{"id": 0}'), ("", '{"id": 1}'), ("k" * 300, '{"id": 2}')],
    [(None, '{"id": 3}'), ("k4", json.dumps({"id": 4, "blob": BIG})), ("k5", '{"id": 5}')],
    [("k6", '{"id": 6}')],
]
KINESIS_BAD = {
    1: (0, "partition key has 0 characters"),
    2: (0, "partition key has 300 characters"),
    3: (1, "null partition key"),
    4: (1, "Kinesis takes at most 1048576"),
}


def kinesis_ids(kinesis_sink: dict[str, Any]) -> Counter[int]:
    found = kinesis_sink["server"].read_all(kinesis_sink["stream"])
    return Counter(json.loads(r["Data"])["id"] for r in found)


def test_kinesis_refused_records_go_to_the_dead_letter_path_once(
    spark: Any, tmp_path: Path, kinesis_sink: dict[str, Any]
) -> None:
    options = {**kinesis_sink["options"], **dead_letter(tmp_path)}
    run_poison_stream(spark, tmp_path, "kinesis", options, KINESIS_BATCHES)
    assert kinesis_ids(kinesis_sink) == Counter([0, 5, 6])
    check_letters(tmp_path / "dead", "kinesis", KINESIS_BAD)


def test_kinesis_options_win_for_their_case_and_a_failed_commit_duplicates_no_letter(
    spark: Any, tmp_path: Path, kinesis_sink: dict[str, Any]
) -> None:
    """invalid_records=skip skips the records over a limit (never dead-lettered); the null
    key is still on_error's; a replayed batch re-puts its records (at-least-once) but
    publishes its dead letter once."""
    options = {**kinesis_sink["options"], **dead_letter(tmp_path), "invalid_records": "skip"}
    restart_after_a_failed_commit(spark, tmp_path, KinesisSink, options, KINESIS_BATCHES)
    found = kinesis_ids(kinesis_sink)
    assert set(found) == {0, 5, 6}
    assert (found[0], found[6]) == (1, 1)  # batch 1 alone was replayed
    check_letters(tmp_path / "dead", "faulty_kinesis", {3: KINESIS_BAD[3]})


def test_kinesis_skip_and_fail(spark: Any, tmp_path: Path, kinesis_sink: dict[str, Any]) -> None:
    options = {**kinesis_sink["options"], "on_error": "skip"}
    run_poison_stream(spark, tmp_path, "kinesis", options, KINESIS_BATCHES)
    assert kinesis_ids(kinesis_sink) == Counter([0, 5, 6])
    with pytest.raises(Exception, match="topic 'orders' partition 0 offset 1 was refused"):
        run_poison_stream(
            spark, tmp_path, "kinesis", kinesis_sink["options"], KINESIS_BATCHES, name="fail"
        )


# ---------------------------------------------------------------------------- redis

REDIS_BATCHES = [
    [("k0", '{"id": 0, "v": 0}'), ("k1", '{"id": 1, "v": 1}'), ("k2", '{"v": 2}')],
    [("k3", '{"v": 3}')],  # no row of this batch has the template's field
    [("k4", '{"id": 4, "v": 4}')],
    [("k5", '{"id": "a:b", "x": 5}')],  # the template's separator in a value
]


def test_redis_hash_refused_rows_go_to_the_dead_letter_path_once(
    spark: Any, tmp_path: Path, redis_sink: dict[str, Any]
) -> None:
    r, p = redis_sink["client"], redis_sink["prefix"]
    r.rpush(p + "o:1:k1", "a list")  # HSET answers WRONGTYPE for that row alone
    options = {
        **redis_sink["options"],
        **dead_letter(tmp_path),
        "data_type": "hash",
        "key_template": "o:{id}:{key}",
    }
    run_poison_stream(spark, tmp_path, "redis", options, REDIS_BATCHES)
    assert r.hgetall(p + "o:0:k0") == {b"id": b"0", b"v": b"0"}
    assert r.hgetall(p + "o:4:k4") == {b"id": b"4", b"v": b"4"}
    assert r.lrange(p + "o:1:k1", 0, -1) == [b"a list"]
    assert sorted(k.decode() for k in r.keys(p + "*")) == [p + "o:0:k0", p + "o:1:k1", p + "o:4:k4"]
    check_letters(
        tmp_path / "dead",
        "redis",
        {
            1: (0, "holds a value of another type than hash"),
            2: (0, "the key of row 2 is null"),
            3: (1, "the key of row 0 is null"),
            5: (3, "holds ':', which separates it"),
        },
    )


def test_redis_null_keys_skip_wins_and_skip_and_fail(
    spark: Any, tmp_path: Path, redis_sink: dict[str, Any]
) -> None:
    r, p = redis_sink["client"], redis_sink["prefix"]
    r.rpush(p + "o:1:k1", "a list")
    options = {
        **redis_sink["options"],
        **dead_letter(tmp_path),
        "data_type": "hash",
        "key_template": "o:{id}:{key}",
        "null_keys": "skip",
    }
    run_poison_stream(spark, tmp_path, "redis", options, REDIS_BATCHES)
    check_letters(  # the null keys were skipped, not dead-lettered
        tmp_path / "dead",
        "redis",
        {1: (0, "another type than hash"), 5: (3, "holds ':'")},
    )
    skip = {**options, "on_error": "skip"}
    del skip["dead_letter_path"]
    run_poison_stream(spark, tmp_path, "redis", skip, REDIS_BATCHES, name="skip")
    assert r.hgetall(p + "o:4:k4") == {b"id": b"4", b"v": b"4"}
    fail = {**redis_sink["options"], "data_type": "hash", "key_template": "o:{id}:{key}"}
    # the null key of offset 2 is refused before anything is sent (WRONGTYPE comes later)
    with pytest.raises(Exception, match="topic 'orders' partition 0 offset 2 was refused"):
        run_poison_stream(spark, tmp_path, "redis", fail, REDIS_BATCHES, name="fail")


LIST_BATCHES = [
    [("k0", '{"id": 0}'), ("w", '{"id": 1}'), (None, '{"id": 2}')],
    [("k0", '{"id": 3}'), ("w", '{"id": 4}')],
    [("k0", '{"id": 5}')],
]


@pytest.mark.parametrize("data_type", ["list", "stream"])
def test_redis_appends_refuse_keys_of_another_type_once_across_a_failed_commit_with_records(
    spark: Any, tmp_path: Path, redis_sink: dict[str, Any], data_type: str
) -> None:
    r, p = redis_sink["client"], redis_sink["prefix"]
    r.set(p + "w", "a string")
    options = {**redis_sink["options"], **dead_letter(tmp_path), "data_type": data_type}
    restart_after_a_failed_commit(spark, tmp_path, RedisSink, options, LIST_BATCHES)
    if data_type == "list":
        ids = [json.loads(v)["id"] for v in r.lrange(p + "k0", 0, -1)]
    else:
        ids = [int(e[b"id"]) for _, e in r.xrange(p + "k0")]
    assert ids == [0, 3, 5]  # each once, in order: the replayed batch appended once
    assert r.get(p + "w") == b"a string"
    check_letters(
        tmp_path / "dead",
        "faulty_redis",
        {
            1: (0, f"holds a value of another type than {data_type}"),
            2: (0, "is null"),
            4: (1, f"holds a value of another type than {data_type}"),
        },
    )
    table = quixsinks.commit_records("redis", **redis_sink["options"], data_type=data_type)
    rows = table.select(["batch_id", "rows", "rows_written", "dead_lettered"]).to_pylist()
    assert rows == [
        {"batch_id": 0, "rows": 3, "rows_written": 1, "dead_lettered": 2},
        {"batch_id": 1, "rows": 2, "rows_written": 1, "dead_lettered": 1},
        {"batch_id": 2, "rows": 1, "rows_written": 1, "dead_lettered": 0},
    ]
    assert set(table.column("sink").to_pylist()) == {"faulty_redis"}


# ---------------------------------------------------------------------------- mqtt

MQTT_BATCHES = [
    [("k0", '{"id": 0}'), ("a+b", '{"id": 1}'), ("a#", '{"id": 2}')],
    [(None, '{"id": 3}'), ("k4", '{"id": 4}'), ("a\u0000b", '{"id": 5}')],
    [("k6", '{"id": 6}')],
]
MQTT_BAD = {
    1: (0, "wildcard '+'"),
    2: (0, "wildcard '#'"),
    3: (1, "null key"),
    5: (1, "NUL"),
}


def mqtt_ids(mqtt_sink: dict[str, Any], count: int) -> Counter[int]:
    got = mqtt_sink["recorder"].wait_for(count)
    return Counter(json.loads(m.payload)["id"] for m in got)


def test_mqtt_topics_it_cannot_publish_to_go_to_the_dead_letter_path_once(
    spark: Any, tmp_path: Path, mqtt_sink: dict[str, Any]
) -> None:
    options = {**mqtt_sink["options"], **dead_letter(tmp_path)}
    run_poison_stream(spark, tmp_path, "mqtt", options, MQTT_BATCHES)
    assert mqtt_ids(mqtt_sink, 3) == Counter([0, 4, 6])
    check_letters(tmp_path / "dead", "mqtt", MQTT_BAD)


def test_mqtt_failed_commit_duplicates_no_letter_and_skip_and_fail(
    spark: Any, tmp_path: Path, mqtt_sink: dict[str, Any]
) -> None:
    options = {**mqtt_sink["options"], **dead_letter(tmp_path)}
    restart_after_a_failed_commit(spark, tmp_path, MQTTSink, options, MQTT_BATCHES)
    found = mqtt_ids(mqtt_sink, 4)  # batch 1 is published again: at-least-once
    assert set(found) == {0, 4, 6}
    assert (found[0], found[6]) == (1, 1)
    check_letters(tmp_path / "dead", "faulty_mqtt", MQTT_BAD)
    skip = {**mqtt_sink["options"], "on_error": "skip"}
    run_poison_stream(spark, tmp_path, "mqtt", skip, MQTT_BATCHES, name="skip")
    assert set(mqtt_ids(mqtt_sink, 7)) == {0, 4, 6}
    with pytest.raises(Exception, match="topic 'orders' partition 0 offset 1 was refused"):
        run_poison_stream(spark, tmp_path, "mqtt", mqtt_sink["options"], MQTT_BATCHES, name="f")
