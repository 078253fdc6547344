"""A Kafka-shaped stream through every sink: tombstones, keys appearing mid-stream, a type change.

The input has Spark's Kafka source schema (key and value binary, value JSON, topic,
partition, offset, timestamp, timestampType), fed from JSON files, one micro-batch each:

* batch 0: a tombstone first (it used to drop every value column), then two records;
* batch 1: keys ``tag`` and ``at`` (a date-like string) appear, and a ``null`` value;
* batch 2: ``v`` turns from an integer into a string.

Sinks with a lossless representation of any JSON (JSON Lines, CSV) write everything; the
typed ones (Parquet, PostgreSQL, InfluxDB) write batches 0 and 1 and fail batch 2 with an
error naming the key.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from .poison import run_poison_stream

BATCHES: list[list[tuple[str, str | None]]] = [
    [("k0", None), ("k1", '{"id": 1, "v": 10}'), ("k2", '{"id": 2, "v": 20}')],
    [("k3", '{"id": 3, "v": 30, "tag": "a", "at": "2024-05-01"}'), ("k4", "null")],
    [("k5", '{"id": 5, "v": "fifty"}')],
]


def run(spark: Any, tmp_path: Path, fmt: str, options: dict[str, str]) -> None:
    run_poison_stream(spark, tmp_path, fmt, options, BATCHES, name="kafka")


#: each message as it was: the producer's JSON, null for a tombstone (and for "null")
EVERY_VALUE = [
    None,
    {"id": 1, "v": 10},
    {"id": 2, "v": 20},
    {"id": 3, "v": 30, "tag": "a", "at": "2024-05-01"},
    None,
    {"id": 5, "v": "fifty"},
]


def test_json_lines_keep_every_record_as_it_was(spark: Any, tmp_path: Path) -> None:
    run(spark, tmp_path, "file", {"path": str(tmp_path / "out"), "format": "json"})
    records = []
    for name in sorted(os.listdir(tmp_path / "out")):
        if name.endswith(".jsonl"):
            records += [json.loads(line) for line in (tmp_path / "out" / name).open()]
    assert [r["_value"] for r in records] == EVERY_VALUE
    assert [r["_key"] for r in records] == [f"k{i}" for i in range(6)]


@pytest.mark.parametrize("fmt", ["file", "csvfile"])
def test_csv_keeps_every_record_as_it_was(spark: Any, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "out.csv" if fmt == "csvfile" else tmp_path / "out"
    run(spark, tmp_path, fmt, {"path": str(path), **({"format": "csv"} if fmt == "file" else {})})
    files = [path] if fmt == "csvfile" else sorted(path.glob("*.csv"))
    rows = [row for f in files for row in csv.DictReader(f.open(newline=""))]
    assert [json.loads(r["value"]) for r in rows] == EVERY_VALUE
    assert [r["offset"] for r in rows] == [str(i) for i in range(6)]


def test_parquet_keeps_one_type_per_column_and_refuses_the_change(
    spark: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    with pytest.raises(Exception, match=r"column 'v' is string in this batch, but earlier"):
        run(spark, tmp_path, "file", {"path": str(out), "format": "parquet"})
    files = sorted(str(p) for p in out.glob("*.parquet"))
    schema = pa.unify_schemas([pq.read_schema(f) for f in files], promote_options="permissive")
    table = ds.dataset(files, schema=schema, format="parquet").to_table()
    assert table.schema.field("v").type == "int64"
    assert table.schema.field("at").type == "string"  # a date-like string stays a string
    rows = sorted(table.to_pylist(), key=lambda r: r["_key"])
    assert [(r["_key"], r["id"], r["v"], r.get("tag")) for r in rows] == [
        (b"k0", None, None, None),
        (b"k1", 1, 10, None),
        (b"k2", 2, 20, None),
        (b"k3", 3, 30, "a"),
        (b"k4", None, None, None),
    ]


def test_postgresql_evolves_the_table_and_refuses_the_change(
    spark: Any, tmp_path: Path, pg: dict[str, Any]
) -> None:
    from .test_postgresql import column_types, query

    with pytest.raises(Exception, match=r"column 'v' of table public\.orders has type bigint"):
        run(spark, tmp_path, "postgresql", {**pg["options"], "table_name": "orders"})
    assert column_types(pg, "orders") == {
        "timestamp": "timestamp with time zone",
        "__key": "bytea",
        "id": "bigint",
        "v": "bigint",
        "tag": "text",
        "at": "text",
    }
    rows = query(pg, "SELECT convert_from(__key, 'UTF8'), id, v, tag, at FROM orders ORDER BY 1")
    assert rows == [
        ("k0", None, None, None, None),
        ("k1", 1, 10, None, None),
        ("k2", 2, 20, None, None),
        ("k3", 3, 30, "a", "2024-05-01"),
        ("k4", None, None, None, None),
    ]


def test_influxdb_takes_tags_from_the_json_and_refuses_the_change(
    spark: Any, tmp_path: Path, influx: dict[str, Any]
) -> None:
    options = {**influx["options"], "measurement": "orders", "tags_keys": "tag"}
    with pytest.raises(Exception, match="field type conflict"):
        run(spark, tmp_path, "influxdb3", options)
    server, database = influx["server"], influx["database"]
    assert server.field_types(database, "orders") == {
        "id": "integer",
        "v": "integer",
        "at": "string",
    }
    tags = server.query(database, 'SHOW TAG KEYS FROM "orders"')
    assert [t["tagKey"] for t in tags] == ["tag"]
    rows = server.query(database, 'SELECT id, v, at, "tag" FROM orders')
    assert [(r["id"], r["v"], r["at"], r["tag"]) for r in rows] == [
        (1, 10, None, None),
        (2, 20, None, None),
        (3, 30, "2024-05-01", "a"),
    ]
