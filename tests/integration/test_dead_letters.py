"""on_error through Spark, sink-independent parts: the `file` sink as the example.

What every sink shares (the glue): unparseable Kafka values are refused before the sink
writes; dead letters are published with the micro-batch, exactly once across a replay;
skip counts; fail names the row; commit records are logged and read back. Each sink's own
row-level errors are tested in its own test file (test_dead_letters_*.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import quixsinks

from .poison import (
    assert_nothing_staged,
    dead_letter,
    dead_letter_offsets,
    read_dead_letters,
    run_poison_stream,
)

BATCHES = [
    [("k0", '{"id": 0, "v": 1}'), ("k1", "{not json"), ("k2", '{"id": 2, "v": 3}')],
    [("k3", "\u00ff\u00fe"), ("k4", '{"id": 4, "v": 5}')],
    [("k5", '{"id": 5, "v": "six"}'), ("k6", '{"id": 6, "v": 7}')],
]


def written_ids(out: Path) -> list[int]:
    rows = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.open()]
    return sorted(r["_value"]["id"] for r in rows)


def test_unparseable_values_go_to_the_dead_letter_path_once(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = {"path": str(out), "format": "json", **dead_letter(tmp_path)}
    run_poison_stream(spark, tmp_path, "file", options, BATCHES)
    assert written_ids(out) == [0, 2, 4, 5, 6]
    letters = read_dead_letters(tmp_path / "dead")
    assert sorted(letter["row"]["offset"] for letter in letters) == [1, 3]
    first = min(letters, key=lambda letter: letter["row"]["offset"])
    assert first["sink"] == "file"
    assert first["batch_id"] == 0
    assert first["error"]["type"] == "RecordError"
    assert first["row"]["key"] == "k1"
    assert first["row"]["value"] == "{not json"
    assert_nothing_staged(tmp_path / "dead")


def test_a_type_parquet_refuses_for_one_row_is_isolated(spark: Any, tmp_path: Path) -> None:
    """`v` turns from an integer into a string in batch 2: that row alone is refused."""
    import pyarrow.dataset as ds

    out = tmp_path / "out"
    options = {"path": str(out), "format": "parquet", **dead_letter(tmp_path)}
    run_poison_stream(spark, tmp_path, "file", options, BATCHES)
    ids = ds.dataset(str(out), format="parquet").to_table().column("id").to_pylist()
    assert sorted(ids) == [0, 2, 4, 6]
    assert dead_letter_offsets(tmp_path / "dead") == [1, 3, 5]


def test_skip_drops_the_rows(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = {"path": str(out), "format": "json", "on_error": "skip"}
    run_poison_stream(spark, tmp_path, "file", options, BATCHES)
    assert written_ids(out) == [0, 2, 4, 5, 6]
    assert not (tmp_path / "dead").exists()


def test_a_batch_writes_commit_record_is_in_python_worker_logs(spark: Any, tmp_path: Path) -> None:
    """Spark's python_worker_logs holds the JSON commit record of a batch write next to its
    own logs (streaming commits run in workers it does not collect: see docs/errors.md)."""
    from pyspark.sql import functions as F

    from .poison import kafka_shaped

    rows = [(k, v, "orders", 0, i, 0) for i, (k, v) in enumerate(BATCHES[0] + BATCHES[1])]
    df = kafka_shaped(
        spark.createDataFrame(
            rows, "key string, value string, topic string, partition int, offset bigint, ts bigint"
        )
    )
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")  # ends with the test
    df.coalesce(1).write.format("file").mode("append").option("on_error", "skip").save(
        str(tmp_path / "out")
    )
    logs = spark.tvf.python_worker_logs().where(F.col("logger") == "quixsinks.commits")
    records = [quixsinks.CommitRecord.from_json(row.msg) for row in logs.collect()]
    [record] = [r for r in records if r.sink == "file" and r.skipped]
    assert (record.rows, record.skipped, record.rows_written) == (5, 2, 3)


def test_fail_names_the_rows_kafka_coordinates(spark: Any, tmp_path: Path) -> None:
    options = {"path": str(tmp_path / "out"), "format": "json"}
    with pytest.raises(Exception, match="topic 'orders' partition 0 offset 1"):
        run_poison_stream(spark, tmp_path, "file", options, BATCHES)


def test_commit_records_are_read_back_and_a_listener_sees_them(spark: Any, tmp_path: Path) -> None:
    """The records stored with the `file` sink's ledger: quixsinks.commit_records, the CLI,
    and a StreamingQueryListener in the driver that reads each batch's record (docs/errors.md)."""
    import io

    from pyspark.sql.streaming import StreamingQueryListener

    from quixsinks.cli import main

    out = tmp_path / "out"
    seen: list[tuple[int, int, int]] = []

    class CommitRecords(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            records = quixsinks.commit_records("file", path=str(out), sink_id=str(progress.id))
            for record in records.to_pylist():
                if record["batch_id"] == progress.batchId:
                    seen.append(
                        (record["batch_id"], record["rows_written"], record["dead_lettered"])
                    )

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = CommitRecords()
    spark.streams.addListener(listener)
    try:
        options = {"path": str(out), "format": "json", **dead_letter(tmp_path)}
        run_poison_stream(spark, tmp_path, "file", options, BATCHES)
        deadline = time.monotonic() + 60  # listener events arrive asynchronously
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        spark.streams.removeListener(listener)
    records = quixsinks.commit_records("file", path=str(out))
    assert records.column("batch_id").to_pylist() == [0, 1, 2]
    assert records.column("dead_lettered").to_pylist() == [1, 1, 0]
    assert records.column("rows_written").to_pylist() == [2, 1, 2]
    assert sorted(seen) == [(0, 2, 1), (1, 1, 1), (2, 2, 0)]
    text = io.StringIO()
    assert main(["history", "--format", "file", "-o", f"path={out}"], text) == 0
    assert "(3 committed batches)" in text.getvalue()
    text = io.StringIO()
    assert main(["history", "--format", "file", "-o", f"path={out}", "--json"], text) == 0
    lines = [json.loads(line) for line in text.getvalue().splitlines()]
    assert [line["dead_lettered"] for line in lines] == [1, 1, 0]
