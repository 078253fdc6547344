"""A user's BatchingSink subclass works as a Spark data source in batch and streaming."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pyspark import cloudpickle

import quixsinks
from quixsinks import BatchingSink, CommonOptions, SinkBackpressureError, SinkBatch, option

from .streams import run_available_now, write_input_files

# Spark ships these classes to its Python workers; notebooks and __main__ scripts are
# pickled by value automatically, a test module has to ask for it.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@dataclass(frozen=True, kw_only=True)
class FolderOptions(CommonOptions):
    sink_name: ClassVar[str] = "folder_sink"
    folder: str = option(doc="Where to drop one JSON file per write")
    slow_down_once: str = option("", doc="Marker file: raise backpressure on the first write")


class FolderSink(BatchingSink[FolderOptions]):
    """Writes each SinkBatch as a JSON file of SinkItems: a minimal custom sink."""

    name: ClassVar[str] = "folder_sink"
    options_class = FolderOptions

    def write(self, batch: SinkBatch) -> None:
        marker = self.options.slow_down_once
        if marker and not os.path.exists(marker):
            open(marker, "w").close()
            raise SinkBackpressureError(retry_after=0.1)
        items = [
            {"key": item.key, "value": item.value, "timestamp": item.timestamp} for item in batch
        ]
        name = f"{batch.batch_id}-{batch.partition_id}-{batch.attempt_id}.json"
        with open(os.path.join(self.options.folder, name), "w") as f:
            json.dump(items, f)


@pytest.fixture(scope="module")
def folder_sink(spark: Any) -> None:
    quixsinks.register(spark, FolderSink)


def read_items(folder: Path) -> list[dict[str, Any]]:
    return [item for p in folder.glob("*.json") for item in json.loads(p.read_text())]


def test_batch_write_reaches_the_custom_sink(spark: Any, folder_sink: None, tmp_path: Path) -> None:
    (
        spark.range(20)
        .selectExpr("cast(id AS string) AS key", "id", "id * 2 AS double")
        .write.format("folder_sink")
        .option("folder", str(tmp_path))
        .mode("append")
        .save()
    )
    items = read_items(tmp_path)
    assert sorted(i["value"]["id"] for i in items) == list(range(20))
    assert all(i["value"]["double"] == 2 * i["value"]["id"] for i in items)
    assert {i["key"] for i in items} == {str(n) for n in range(20)}


def test_streaming_write_reaches_the_custom_sink(
    spark: Any, folder_sink: None, tmp_path: Path
) -> None:
    ids = write_input_files(tmp_path / "in", files=2, rows_per_file=5)
    out = tmp_path / "out"
    out.mkdir()
    run_available_now(spark, tmp_path / "in", "folder_sink", tmp_path / "ck", {"folder": str(out)})
    items = read_items(out)
    assert sorted(i["value"]["id"] for i in items) == ids
    assert all(isinstance(i["timestamp"], int) for i in items)


def test_backpressure_is_retried_within_the_task(
    spark: Any, folder_sink: None, tmp_path: Path
) -> None:
    marker = tmp_path / "slowed"
    out = tmp_path / "out"
    out.mkdir()
    (
        spark.range(5)
        .coalesce(1)
        .write.format("folder_sink")
        .option("folder", str(out))
        .option("slow_down_once", str(marker))
        .mode("append")
        .save()
    )
    assert marker.exists()
    assert sorted(i["value"]["id"] for i in read_items(out)) == list(range(5))


def test_overwrite_is_refused_for_a_sink_that_cannot_truncate(
    spark: Any, folder_sink: None, tmp_path: Path
) -> None:
    with pytest.raises(Exception, match="folder_sink: overwrite is not supported"):
        (
            spark.range(1)
            .write.format("folder_sink")
            .option("folder", str(tmp_path))
            .mode("overwrite")
            .save()
        )
