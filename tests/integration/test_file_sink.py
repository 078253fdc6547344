"""The `file` sink end to end through Spark: layouts, formats, modes and replays."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from .streams import read_jsonl_ids, run_available_now, write_input_files


@pytest.fixture
def frame(spark: Any) -> Any:
    return spark.range(50).selectExpr(
        "concat('k', cast(id % 3 as string)) AS key",
        "timestamp_millis(1714521600000 + id) AS timestamp",
        "id",
        "id * 0.25 AS amount",
        "concat('name \"', cast(id as string), '\",\\n') AS name",
    )


def data_files(folder: Path, suffix: str) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(suffix))


def test_json_records_have_quix_layout(frame: Any, tmp_path: Path) -> None:
    frame.write.format("file").option("path", str(tmp_path)).mode("append").save()
    records = [
        json.loads(line)
        for path in data_files(tmp_path, ".jsonl")
        for line in path.read_text().splitlines()
    ]
    by_id = {r["_value"]["id"]: r for r in records}
    assert sorted(by_id) == list(range(50))
    assert by_id[7] == {
        "_timestamp": 1714521600007,
        "_key": "k1",
        "_value": {"id": 7, "amount": 1.75, "name": 'name "7",\n'},
    }


def test_parquet_files_hold_timestamp_key_and_value_columns(frame: Any, tmp_path: Path) -> None:
    (
        frame.write.format("file")
        .option("path", str(tmp_path))
        .option("format", "parquet")
        .option("compression", "zstd")
        .mode("append")
        .save()
    )
    files = data_files(tmp_path, ".parquet")
    assert files
    table = pq.read_table(files[0])
    assert table.column_names == ["_timestamp", "_key", "id", "amount", "name"]
    assert pq.read_metadata(files[0]).row_group(0).column(0).compression == "ZSTD"
    assert sum(pq.read_metadata(f).num_rows for f in files) == 50


def test_gzip_json_files_decompress_to_json_lines(frame: Any, tmp_path: Path) -> None:
    frame.write.format("file").option("path", str(tmp_path)).option("compress", "true").mode(
        "append"
    ).save()
    files = data_files(tmp_path, ".jsonl.gz")
    lines = [line for f in files for line in gzip.decompress(f.read_bytes()).splitlines()]
    assert len(lines) == 50


def test_camel_case_options_are_accepted(frame: Any, tmp_path: Path) -> None:
    (
        frame.write.format("file")
        .option("path", str(tmp_path))
        .option("keyColumn", "name")
        .option("valueColumns", "id")
        .mode("append")
        .save()
    )
    first = json.loads(data_files(tmp_path, ".jsonl")[0].read_text().splitlines()[0])
    assert set(first["_value"]) == {"id"}
    assert first["_key"].startswith("name ")


def test_spark_reads_the_output_directory_without_the_staging_area(
    spark: Any, frame: Any, tmp_path: Path
) -> None:
    frame.write.format("file").option("path", str(tmp_path)).option("format", "parquet").mode(
        "append"
    ).save()
    assert spark.read.parquet(str(tmp_path)).count() == 50


def test_overwrite_replaces_published_files_only(frame: Any, tmp_path: Path) -> None:
    frame.write.format("file").option("path", str(tmp_path)).mode("append").save()
    frame.limit(5).write.format("file").option("path", str(tmp_path)).mode("overwrite").save()
    ids = read_jsonl_ids(tmp_path)
    assert len(ids) == 5


def test_append_mode_grows_one_file_per_sink(frame: Any, tmp_path: Path) -> None:
    for _ in range(2):
        (
            frame.write.format("file")
            .option("path", str(tmp_path))
            .option("append", "true")
            .option("format", "csv")
            .mode("append")
            .save()
        )
    files = data_files(tmp_path, ".csv")
    # a batch write is a new writer each time: one file each, header once per file
    assert len(files) == 2
    for f in files:
        text = f.read_text()
        assert text.count("key,value,timestamp,topic,partition,offset") == 1


def test_streaming_kafka_shaped_frame_parses_json_values(spark: Any, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    write_input_files(folder, files=2, rows_per_file=5)

    def kafka_shape(df: Any) -> Any:
        return df.selectExpr(
            "cast(key AS binary) AS key",
            "cast(to_json(named_struct('id', id, 'name', name)) AS binary) AS value",
            "'orders' AS topic",
            "cast(id % 2 AS int) AS partition",
            "id AS offset",
            "timestamp",
            "0 AS timestampType",
        )

    run_available_now(
        spark, folder, "file", tmp_path / "ck", {"path": str(tmp_path / "out")}, prepare=kafka_shape
    )
    assert sorted(read_jsonl_ids(tmp_path / "out")) == list(range(10))
    record = json.loads(data_files(tmp_path / "out", ".jsonl")[0].read_text().splitlines()[0])
    assert isinstance(record["_key"], str)
    assert record["_key"].startswith("k")
    assert set(record["_value"]) == {"id", "name"}


def test_complete_output_mode_overwrites_each_batch(spark: Any, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    write_input_files(folder, files=3, rows_per_file=7)
    out = tmp_path / "out"
    df = (
        spark.readStream.schema("id BIGINT, key STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .groupBy("key")
        .count()
    )
    query = (
        df.writeStream.format("file")
        .outputMode("complete")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    rows = [json.loads(line) for f in data_files(out, ".jsonl") for line in f.read_text().split()]
    assert sum(r["_value"]["count"] for r in rows) == 21
    assert len(rows) == 7  # keys k0..k6, the latest complete result only
