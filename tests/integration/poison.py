"""Poison input for the dead-letter tests: a Kafka-shaped stream with bad rows, and readers.

Each micro-batch is a list of ``(key, value)`` pairs (value: the Kafka value's text, or
None for a tombstone); the offsets run from 0 across batches, so a dead letter is found
again by its ``row.offset``. Every test of a sink's row-level errors uses these helpers:

    batches = [[("k0", '{"id": 0}'), ("k1", "not json")], [("k2", '{"id": 2}')]]
    run_poison_stream(spark, tmp_path, "file", {"path": ..., **dead_letter(tmp_path)}, batches)
    assert dead_letter_offsets(tmp_path / "dead") == [1]
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

try:
    from .streams import run_available_now
except ImportError:  # imported as a top-level module by a job script (kill_job.py)
    from streams import run_available_now  # type: ignore[no-redef]

T0 = 1714521600000
SCHEMA = "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, ts BIGINT"
Batch = list[tuple[str | None, str | None]]


def write_kafka_batches(folder: Path, batches: list[Batch], topic: str = "orders") -> None:
    """One JSON input file per micro-batch, Kafka's columns as text."""
    folder.mkdir(parents=True, exist_ok=True)
    offset = 0
    for number, rows in enumerate(batches):
        path = folder / f"part-{number:04d}.json"
        with open(path, "w", encoding="utf-8") as out:
            for key, value in rows:
                record = {"key": key, "value": value, "topic": topic, "partition": 0}
                out.write(json.dumps({**record, "offset": offset, "ts": T0 + offset}) + "\n")
                offset += 1
        # the file source takes files in modification-time order: one batch per file
        os.utime(path, (1_700_000_000 + number, 1_700_000_000 + number))


def kafka_shaped(df: Any) -> Any:
    """Spark's Kafka source schema (key and value binary) from the text columns."""
    return df.selectExpr(
        "cast(key AS binary) AS key",
        "cast(value AS binary) AS value",
        "topic",
        "partition",
        "offset",
        "timestamp_millis(ts) AS timestamp",
        "0 AS timestampType",
    )


def run_poison_stream(
    spark: Any,
    tmp_path: Path,
    fmt: str,
    options: dict[str, str],
    batches: list[Batch],
    *,
    name: str = "poison",
) -> None:
    """Stream ``batches`` (one micro-batch each) into ``fmt``; raises if the query fails."""
    folder = tmp_path / f"{name}-in"
    if not folder.exists():
        write_kafka_batches(folder, batches)
    run_available_now(
        spark,
        folder,
        fmt,
        tmp_path / f"{name}-ck",
        options,
        prepare=lambda df: kafka_shaped(df.withColumnRenamed("timestamp", "ts")),
        schema=SCHEMA,
    )


def dead_letter(tmp_path: Path, folder: str = "dead") -> dict[str, str]:
    """The options that send refused rows to ``tmp_path/folder``."""
    return {"on_error": "dead_letter", "dead_letter_path": str(tmp_path / folder)}


def read_dead_letters(path: Path) -> list[dict[str, Any]]:
    """Every published dead letter under ``path`` (staging excluded), in file order."""
    letters = []
    for file in sorted(path.glob("*.jsonl")):
        letters += [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
    return letters


def dead_letter_offsets(path: Path) -> list[int]:
    """The Kafka offsets of the published dead letters, sorted (duplicates kept)."""
    return sorted(int(letter["row"]["offset"]) for letter in read_dead_letters(path))


def assert_nothing_staged(path: Path) -> None:
    """No staged dead letter is left behind once every batch has committed."""
    staging = path / "_quixsinks" / "staging"
    left = [p for p in staging.rglob("*") if p.is_file()] if staging.exists() else []
    assert left == [], left
