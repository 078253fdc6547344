"""Through Spark: sinks that write a Kafka JSON value as its text write the producer's bytes
and do not type the batch (a key holding a number in one message and a string in another is
no error), while a typed sink (Parquet) still refuses what its columns cannot hold."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

#: "id" and "temp" change type between messages; spacing and escapes are the producer's
VALUES = [
    b'{"id": 1, "temp": 21.5}',
    b'{"id":"a-7","temp":[1, 2]}',
    b'{"temp" : "n/a",  "name":"\\u00fc"}',
    None,
]
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)


def kafka(spark: Any) -> Any:
    rows = [
        (f"k{i}".encode(), v, "t", 0, i, datetime.fromtimestamp(1714521600 + i, UTC), 0)
        for i, v in enumerate(VALUES)
    ]
    return spark.createDataFrame(rows, SCHEMA).coalesce(1)


def test_file_json_writes_each_producers_bytes_whatever_the_types(
    spark: Any, tmp_path: Path
) -> None:
    kafka(spark).write.format("file").option("path", str(tmp_path)).mode("append").save()
    lines = [line for f in sorted(tmp_path.glob("*.jsonl")) for line in f.read_bytes().splitlines()]
    assert len(lines) == len(VALUES)
    values = [line[line.index(b'"_value":') + 9 : -1] for line in lines]
    assert sorted(values) == sorted(v if v is not None else b"null" for v in VALUES)


def test_csvfile_writes_each_producers_text_whatever_the_types(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    kafka(spark).write.format("csvfile").option("path", str(path)).mode("append").save()
    import csv

    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["value"] for r in rows] == [v.decode() if v is not None else "null" for v in VALUES]


def test_parquet_still_types_the_batch_and_refuses_what_a_column_cannot_hold(
    spark: Any, tmp_path: Path
) -> None:
    out, dead = tmp_path / "out", tmp_path / "dead"
    (
        kafka(spark)
        .write.format("file")
        .option("path", str(out))
        .option("format", "parquet")
        .option("on_error", "dead_letter")
        .option("dead_letter_path", str(dead))
        .mode("append")
        .save()
    )
    written = sum(pq.read_table(f).num_rows for f in out.glob("*.parquet"))
    letters = [
        json.loads(line) for f in dead.rglob("*.jsonl") for line in f.read_text().splitlines()
    ]
    assert written + len(letters) == len(VALUES)
    assert letters  # the types conflict: at least one row is a dead letter
    assert {letter["error"]["type"] for letter in letters} <= {"RecordError", "TypeChangeError"}
