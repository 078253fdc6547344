"""Helpers for the Spark integration tests: replayable streaming input and runners."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

INPUT_SCHEMA = "id BIGINT, key STRING, name STRING, amount DOUBLE, ts TIMESTAMP"


def write_input_files(folder: Path, files: int, rows_per_file: int) -> list[int]:
    """JSON input files for a file-source stream; ids 0..files*rows-1, one file a batch."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(files):
        with open(folder / f"part-{f:04d}.json", "w", encoding="utf-8") as out:
            for r in range(rows_per_file):
                i = f * rows_per_file + r
                ids.append(i)
                out.write(
                    json.dumps(
                        {
                            "id": i,
                            "key": f"k{i % 7}",
                            "name": f'name "{i}", ok',
                            "amount": i * 0.5,
                            "ts": f"2024-05-01T00:00:{i % 60:02d}Z",
                        }
                    )
                    + "\n"
                )
    return ids


def stream_from(spark: Any, folder: Path, schema: str = INPUT_SCHEMA) -> Any:
    return (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .withColumnRenamed("ts", "timestamp")
    )


def run_available_now(
    spark: Any,
    folder: Path,
    fmt: str,
    checkpoint: Path,
    options: dict[str, str],
    prepare: Callable[[Any], Any] | None = None,
    schema: str = INPUT_SCHEMA,
) -> None:
    """Run the query over every input file and wait for it; re-raises a query failure."""
    df = stream_from(spark, folder, schema)
    if prepare is not None:
        df = prepare(df)
    writer = df.writeStream.format(fmt).option("checkpointLocation", str(checkpoint))
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    try:
        query.awaitTermination(timeout=240)
        if query.isActive:
            raise TimeoutError("streaming query did not finish in 240 s")
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def read_jsonl_ids(folder: Path) -> list[int]:
    """Every record id in the JSON Lines files of a `file` sink output, independently."""
    ids = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".jsonl"):
            with open(folder / name, encoding="utf-8") as f:
                ids.extend(json.loads(line)["_value"]["id"] for line in f if line.strip())
    return ids


def fails_before_any_task(spark: Any, write: Any, match: str) -> None:
    """Run ``write`` in its own job group: it must raise ``match`` on the driver and start
    no Spark job (bad input is refused before any data moves)."""
    group = f"refused-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "refused before any task")
    try:
        with pytest.raises(Exception, match=match):
            write()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
