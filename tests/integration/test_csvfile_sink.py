"""The `csvfile` sink end to end: one CSV file, header once, Quix columns, serializers."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from .streams import run_available_now, write_input_files


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_rows_have_quix_columns_and_json_values(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    df = spark.range(3).selectExpr("cast(id AS string) AS key", "id", "'a,\"b\"' AS text")
    df.coalesce(1).write.format("csvfile").option("path", str(target)).mode("append").save()
    rows = read_rows(target)
    assert list(rows[0]) == ["key", "value", "timestamp", "topic", "partition", "offset"]
    assert [json.loads(r["value"]) for r in rows] == [{"id": i, "text": 'a,"b"'} for i in range(3)]
    assert target.read_bytes().startswith(b"key,value,timestamp,topic,partition,offset\r\n")


def test_later_writes_append_without_a_second_header(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    for _ in range(3):
        spark.range(4).write.format("csvfile").option("path", str(target)).mode("append").save()
    assert len(read_rows(target)) == 12
    assert target.read_text().count("key,value") == 1


def test_unix_dialect_quotes_everything_with_lf(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    (
        spark.range(1)
        .selectExpr("'k' AS key", "1 AS v")
        .write.format("csvfile")
        .option("path", str(target))
        .option("dialect", "unix")
        .mode("append")
        .save()
    )
    assert target.read_bytes() == (
        b'"key","value","timestamp","topic","partition","offset"\n"k","{""v"":1}",,,,\n'
    )


def test_custom_value_serializer_from_import_path(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    (
        spark.range(2)
        .selectExpr("'k' AS key", "id")
        .write.format("csvfile")
        .option("path", str(target))
        .option("valueSerializer", "builtins:repr")
        .option("key_serializer", "json")
        .mode("append")
        .save()
    )
    rows = read_rows(target)
    assert sorted(r["value"] for r in rows) == ["{'id': 0}", "{'id': 1}"]
    assert rows[0]["key"] == '"k"'


def test_streaming_appends_every_micro_batch_once(spark: Any, tmp_path: Path) -> None:
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    target = tmp_path / "out.csv"
    run_available_now(spark, tmp_path / "in", "csvfile", tmp_path / "ck", {"path": str(target)})
    rows = read_rows(target)
    assert sorted(json.loads(r["value"])["id"] for r in rows) == ids
    assert {r["key"] for r in rows} == {f"k{i}" for i in range(7)}
    assert all(r["timestamp"].isdigit() for r in rows)


def test_overwrite_is_refused_before_any_task(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    target.write_text("precious\n")
    with pytest.raises(Exception, match="overwrite is not supported"):
        spark.range(2).write.format("csvfile").option("path", str(target)).mode("overwrite").save()
    assert target.read_text() == "precious\n"
