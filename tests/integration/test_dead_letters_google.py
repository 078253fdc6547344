"""Row-level errors of the `bigquery` and `pubsub` sinks through Spark (on_error).

BigQuery (bqemulator): a value that cannot be converted to its column's type and a row too
large for one append request are refused per row; the good rows land exactly once; the
ledger keeps each micro-batch's commit record. The emulator never answers an append with
``row_errors``: that mapping is covered by tests/unit/test_google_row_errors.py.

Pub/Sub (emulator): the sink checks Pub/Sub's documented per-message limits itself (the
emulator enforces none of them) and refuses the offending rows before anything of them is
published; the good rows are published (at-least-once).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.sinks.bigquery import BigQuerySink
from quixsinks.testing import faulty

from .poison import (
    assert_nothing_staged,
    dead_letter,
    dead_letter_offsets,
    read_dead_letters,
    run_poison_stream,
)

LONG = "x" * 5000

# offsets run from 0 across the batches (see poison.py)
BQ_BATCHES = [
    [("k0", '{"id": 0, "v": 1, "t": "a"}'), ("k1", "{not json"), ("k2", '{"id": 2, "v": 3}')],
    [("k3", '{"id": 3, "v": "six"}'), ("k4", '{"id": 4, "v": 5}')],
    [("k5", json.dumps({"id": 5, "v": 6, "t": LONG})), ("k6", '{"id": 6, "v": 7}')],
]
BQ_GOOD = [0, 2, 4, 6]
BQ_BAD = {1: "RecordError", 3: "RecordError", 5: "RecordError"}


def bq_options(sink: dict[str, Any], **extra: str) -> dict[str, str]:
    return {**sink["options"], "max_request_bytes": "2048", **extra}


def bq_ids(sink: dict[str, Any]) -> list[int]:
    result = sink["client"].query(f"SELECT id FROM `{sink['table']}` ORDER BY id").result()
    return [r["id"] for r in result]


def test_bigquery_refused_rows_go_to_the_dead_letter_path_once(
    spark: Any, bigquery_sink: dict[str, Any], tmp_path: Path
) -> None:
    options = bq_options(bigquery_sink, **dead_letter(tmp_path))
    run_poison_stream(spark, tmp_path, "bigquery", options, BQ_BATCHES)
    assert bq_ids(bigquery_sink) == BQ_GOOD
    letters = read_dead_letters(tmp_path / "dead")
    assert sorted(int(x["row"]["offset"]) for x in letters) == sorted(BQ_BAD)
    for letter in letters:
        offset = int(letter["row"]["offset"])
        assert letter["sink"] == "bigquery"
        assert letter["batch_id"] == offset // 3 if offset < 3 else letter["batch_id"] in (1, 2)
        assert letter["error"]["type"] == BQ_BAD[offset]
    by_offset = {int(x["row"]["offset"]): x for x in letters}
    assert by_offset[3]["batch_id"] == 1
    assert "INT64" in by_offset[3]["error"]["message"] or "six" in by_offset[3]["error"]["message"]
    assert by_offset[5]["batch_id"] == 2
    assert "append request" in by_offset[5]["error"]["message"]
    assert_nothing_staged(tmp_path / "dead")


def test_bigquery_commit_records_are_kept_in_the_ledger(
    spark: Any, bigquery_sink: dict[str, Any], tmp_path: Path
) -> None:
    """A ledger table made before commit records gets the column; its old rows have none."""
    from google.cloud import bigquery

    client = bigquery_sink["client"]
    client.create_dataset(bigquery_sink["dataset"])
    ledger_id = (
        f"{bigquery_sink['options']['project_id']}.{bigquery_sink['dataset']}._quixsinks_ledger"
    )
    old = [
        bigquery.SchemaField("sink_id", "STRING", "REQUIRED"),
        bigquery.SchemaField("batch_id", "INT64", "REQUIRED"),
        bigquery.SchemaField("query_id", "STRING"),
        bigquery.SchemaField("committed_at", "TIMESTAMP"),
    ]
    client.create_table(bigquery.Table(ledger_id, schema=old))
    client.query(
        f"INSERT INTO `{ledger_id}` (sink_id, batch_id, query_id) VALUES ('older', 7, 'q')"
    ).result()
    options = bq_options(bigquery_sink, **dead_letter(tmp_path))
    run_poison_stream(spark, tmp_path, "bigquery", options, BQ_BATCHES)
    table = quixsinks.commit_records("bigquery", **bigquery_sink["options"])
    got = [
        (r["batch_id"], r["rows"], r["rows_written"], r["dead_lettered"]) for r in table.to_pylist()
    ]
    assert got == [(0, 3, 2, 1), (1, 2, 1, 1), (2, 2, 1, 1)]


def test_bigquery_skip_drops_the_refused_rows(
    spark: Any, bigquery_sink: dict[str, Any], tmp_path: Path
) -> None:
    options = bq_options(bigquery_sink, on_error="skip")
    run_poison_stream(spark, tmp_path, "bigquery", options, BQ_BATCHES)
    assert bq_ids(bigquery_sink) == BQ_GOOD
    table = quixsinks.commit_records("bigquery", **bigquery_sink["options"])
    assert table.column("skipped").to_pylist() == [1, 1, 1]


def test_bigquery_fail_names_the_rows_kafka_coordinates(
    spark: Any, bigquery_sink: dict[str, Any], tmp_path: Path
) -> None:
    batches = [BQ_BATCHES[0][:1], BQ_BATCHES[2]]
    with pytest.raises(Exception, match=r"topic 'orders' partition 0 offset 1 was refused"):
        run_poison_stream(spark, tmp_path, "bigquery", bq_options(bigquery_sink), batches)
    assert bq_ids(bigquery_sink) == [0]


def test_bigquery_a_failed_commit_then_a_restart_neither_loses_nor_duplicates_dead_letters(
    spark: Any, bigquery_sink: dict[str, Any], tmp_path: Path
) -> None:
    quixsinks.register(spark, faulty(BigQuerySink))
    options = {
        **bq_options(bigquery_sink, **dead_letter(tmp_path)),
        "fail_batch": "1",
        "fail_phase": "commit-after",
        "fail_marker": str(tmp_path / "fired"),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_poison_stream(spark, tmp_path, "faulty_bigquery", options, BQ_BATCHES)
    run_poison_stream(spark, tmp_path, "faulty_bigquery", options, BQ_BATCHES)
    assert bq_ids(bigquery_sink) == BQ_GOOD
    assert dead_letter_offsets(tmp_path / "dead") == sorted(BQ_BAD)
    assert_nothing_staged(tmp_path / "dead")


# ---------------------------------------------------------------------------- pubsub

HUGE = "y" * 10_000_001
PS_BATCHES = [
    [("k0", '{"id": 0}'), ("k1", "{not json"), ("k" * 1100, '{"id": 2}')],
    [("k3", '{"id": 3}'), ("k4", json.dumps({"id": 4, "s": HUGE}))],
    [("k5", '{"id": 5}'), ("k6", '{"id": 6}')],
]
PS_GOOD = [0, 3, 5, 6]
PS_BAD = [1, 2, 4]


def published_ids(topic: dict[str, Any]) -> list[int]:
    messages = topic["server"].pull_all(topic["topic"], idle_seconds=0.5)
    return sorted({json.loads(m.data)["id"] for m in messages})


def test_pubsub_rows_over_pubsubs_limits_go_to_the_dead_letter_path_once(
    spark: Any, pubsub_topic: dict[str, Any], tmp_path: Path
) -> None:
    options = {**pubsub_topic["options"], **dead_letter(tmp_path)}
    run_poison_stream(spark, tmp_path, "pubsub", options, PS_BATCHES)
    assert published_ids(pubsub_topic) == PS_GOOD
    letters = {int(x["row"]["offset"]): x for x in read_dead_letters(tmp_path / "dead")}
    assert sorted(letters) == PS_BAD
    assert {x["sink"] for x in letters.values()} == {"pubsub"}
    assert [letters[o]["batch_id"] for o in PS_BAD] == [0, 0, 1]
    assert {x["error"]["type"] for x in letters.values()} == {"RecordError"}
    assert "1024 bytes per attribute value" in letters[2]["error"]["message"]
    assert "10000000 bytes per message" in letters[4]["error"]["message"]
    assert_nothing_staged(tmp_path / "dead")


def test_pubsub_skip_with_ordering_keys_drops_a_key_over_1024_bytes(
    spark: Any, pubsub_topic: dict[str, Any], tmp_path: Path
) -> None:
    options = {
        **pubsub_topic["options"],
        "on_error": "skip",
        "ordering_key_column": "key",
        "metadata_attributes": "false",
    }
    run_poison_stream(spark, tmp_path, "pubsub", options, PS_BATCHES)
    assert published_ids(pubsub_topic) == PS_GOOD


def test_pubsub_fail_names_the_rows_kafka_coordinates(
    spark: Any, pubsub_topic: dict[str, Any], tmp_path: Path
) -> None:
    batches = [[PS_BATCHES[0][0], PS_BATCHES[0][2]]]
    with pytest.raises(Exception, match=r"topic 'orders' partition 0 offset 1 was refused"):
        run_poison_stream(spark, tmp_path, "pubsub", pubsub_topic["options"], batches)
    assert published_ids(pubsub_topic) == []


def test_pubsub_a_failed_commit_then_a_restart_neither_loses_nor_duplicates_dead_letters(
    spark: Any, pubsub_topic: dict[str, Any], tmp_path: Path
) -> None:
    from quixsinks.sinks.pubsub import PubSubSink

    quixsinks.register(spark, faulty(PubSubSink))
    options = {
        **pubsub_topic["options"],
        **dead_letter(tmp_path),
        "fail_batch": "1",
        "fail_phase": "commit-before",
        "fail_marker": str(tmp_path / "fired"),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_poison_stream(spark, tmp_path, "faulty_pubsub", options, PS_BATCHES)
    run_poison_stream(spark, tmp_path, "faulty_pubsub", options, PS_BATCHES)
    assert published_ids(pubsub_topic) == PS_GOOD  # batch 1 twice: at-least-once
    assert dead_letter_offsets(tmp_path / "dead") == PS_BAD
    assert_nothing_staged(tmp_path / "dead")
