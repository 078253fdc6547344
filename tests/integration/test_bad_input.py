"""Bad input fails on the driver with a clear error, before any task runs, touching nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .streams import fails_before_any_task


@pytest.fixture
def existing(tmp_path: Path) -> Iterator[Path]:
    """An output directory that already holds data; it must come out of every test unchanged."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "earlier.jsonl").write_text('{"kept": true}\n')
    before = snapshot(out)
    yield out
    assert snapshot(out) == before


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def frame(spark: Any) -> Any:
    return spark.range(10).selectExpr("cast(id AS string) AS key", "id")


def file_write(spark: Any, path: str, **options: str) -> Any:
    writer = frame(spark).write.format("file").option("path", path).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.save


def test_missing_parent_directory(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "no-such-parent" / "out")
    fails_before_any_task(spark, file_write(spark, path), "parent directory .* does not exist")
    assert not os.path.exists(path)


def test_path_that_is_a_file(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "a-file"
    target.write_text("keep me")
    fails_before_any_task(spark, file_write(spark, str(target)), "not a directory")
    assert target.read_text() == "keep me"


def test_path_that_cannot_be_written(spark: Any) -> None:
    # sysfs refuses new directories even to root, so this runs the same for every user
    fails_before_any_task(spark, file_write(spark, "/sys/quixsinks-out"), "permission denied")


def test_unknown_format(spark: Any, existing: Path) -> None:
    fails_before_any_task(
        spark,
        file_write(spark, str(existing), format="xml"),
        "option 'format' has value 'xml', expected one of 'json', 'parquet' or 'csv'",
    )


def test_append_with_a_format_that_cannot_append(spark: Any, existing: Path) -> None:
    fails_before_any_task(
        spark,
        file_write(spark, str(existing), format="parquet", append="true"),
        "format 'parquet' cannot be appended to",
    )


def test_misspelled_option_suggests_the_right_one(spark: Any, existing: Path) -> None:
    fails_before_any_task(
        spark,
        file_write(spark, str(existing), fromat="json"),
        "unknown option 'fromat'. Did you mean 'format'?",
    )


def test_key_column_the_frame_lacks(spark: Any, existing: Path) -> None:
    fails_before_any_task(
        spark,
        file_write(spark, str(existing), key_column="user_id"),
        "'key_column' names column 'user_id', which the DataFrame does not have; "
        "its columns are: key, id",
    )


def test_missing_path_option(spark: Any) -> None:
    fails_before_any_task(
        spark,
        frame(spark).write.format("file").mode("append").save,
        "option 'path' is required",
    )


def test_csvfile_in_a_missing_directory(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "nope" / "out.csv")
    fails_before_any_task(
        spark,
        frame(spark).write.format("csvfile").option("path", path).mode("append").save,
        "does not exist",
    )


def test_csvfile_bad_serializer_name(spark: Any, tmp_path: Path) -> None:
    writer = (
        frame(spark)
        .write.format("csvfile")
        .option("path", str(tmp_path / "o.csv"))
        .option("value_serializer", "yaml")
        .mode("append")
    )
    fails_before_any_task(spark, writer.save, "expected 'json' or an import path")


def test_streaming_bad_option_fails_at_start(spark: Any, tmp_path: Path) -> None:
    stream = spark.readStream.format("rate").load()
    with pytest.raises(Exception, match="unknown option 'colour'"):
        (
            stream.writeStream.format("file")
            .option("path", str(tmp_path / "o"))
            .option("colour", "blue")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
            .awaitTermination(60)
        )
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*.jsonl"))
