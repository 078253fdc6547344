"""Row-level errors of the file-like sinks (`file`, `csvfile`, `tsdatalake`) through Spark.

Each sink meets its own poison: a JSON field name too long for a file name (written, no
longer "File name too long"), a value whose Parquet type changed against earlier batches
(refused row by row, the rest of the batch in one file), a JSON field clashing with a
column the sink adds, a Hive partition value too long for a directory name, a custom
serializer failing on one row. The good rows land exactly once, each bad one lands
exactly once in the dead-letter output, also when a micro-batch fails after staging;
commit records are read back from the sinks' ledgers.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import quixsinks
from quixsinks.sinks.file import FileSink
from quixsinks.sinks.tsdatalake import TSDataLakeSink
from quixsinks.testing import faulty

from .poison import (
    assert_nothing_staged,
    dead_letter,
    dead_letter_offsets,
    read_dead_letters,
    run_poison_stream,
)

LONG = "f" * 120  # a JSON field name of 120 bytes: 240 hex digits, too long for a file name

# offsets 0..8, one micro-batch per list; a key keeps one type within a batch (a conflict
# inside a batch is the glue's, tested in test_dead_letters.py)
PARQUET_BATCHES = [
    [("k0", json.dumps({"id": 0, "v": 1, LONG: 1})), ("k1", "{not json"), ("k2", '{"id": 2}')],
    [
        ("k3", '{"id": 3, "v": "three"}'),
        ("k4", '{"id": 4, "w": 5}'),
        ("k5", '{"id": 5, "_key": 1}'),
    ],
    [("k6", '{"id": 6, "v": "six"}'), ("k7", '{"id": 7}'), ("k8", '{"id": 8, "w": 9}')],
]
WRITTEN = [0, 2, 4, 7, 8]


def parquet_ids(folder: Path) -> list[int]:
    return sorted(ds.dataset(str(folder), format="parquet").to_table().column("id").to_pylist())


def errors_by_offset(dead: Path) -> dict[int, tuple[str, int]]:
    """offset -> (error type, batch id) of every dead letter; fails on a duplicate."""
    letters = read_dead_letters(dead)
    offsets = [letter["row"]["offset"] for letter in letters]
    assert len(offsets) == len(set(offsets)), offsets
    return {d["row"]["offset"]: (d["error"]["type"], d["batch_id"]) for d in letters}


def letters_at(dead: Path, offset: int) -> list[dict[str, Any]]:
    return [d for d in read_dead_letters(dead) if d["row"]["offset"] == offset]


# ---------------------------------------------------------------------------------- file


def test_file_parquet_refuses_each_bad_row_once_and_writes_long_field_names(
    spark: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    options = {"path": str(out), "format": "parquet", **dead_letter(tmp_path)}
    run_poison_stream(spark, tmp_path, "file", options, PARQUET_BATCHES)
    assert parquet_ids(out) == WRITTEN
    table = ds.dataset(str(out), format="parquet").to_table()
    assert LONG in table.column_names
    assert errors_by_offset(tmp_path / "dead") == {
        1: ("RecordError", 0),  # not JSON (the glue)
        3: ("TypeChangeError", 1),  # v: string after int64 in batch 0
        5: ("RecordError", 1),  # a field named like the sink's _key column
        6: ("TypeChangeError", 2),
    }
    [letter] = letters_at(tmp_path / "dead", 6)
    assert letter["sink"] == "file"
    assert "'v'" in letter["error"]["message"]
    assert json.loads(letter["row"]["value"]) == {"id": 6, "v": "six"}
    # the refused rows did not split their batches: one file each
    assert [len(list(out.glob(f"*-000000000{b}-*.parquet"))) for b in range(3)] == [1, 1, 1]
    assert_nothing_staged(tmp_path / "dead")


def test_file_skip_counts_refused_rows_in_commit_records(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = {"path": str(out), "format": "parquet", "on_error": "skip", "sink_id": "orders"}
    run_poison_stream(spark, tmp_path, "file", options, PARQUET_BATCHES)
    assert parquet_ids(out) == WRITTEN
    assert not (tmp_path / "dead").exists()
    records = quixsinks.commit_records("file", path=str(out), sink_id="orders").to_pylist()
    got = [(r["batch_id"], r["rows"], r["rows_written"], r["skipped"]) for r in records]
    assert got == [(0, 3, 2, 1), (1, 3, 1, 2), (2, 3, 2, 1)]
    assert {r["sink"] for r in records} == {"file"}
    assert all(r["dead_lettered"] == 0 and r["counters"] for r in records)


def test_file_fail_names_the_row_whose_type_changed(spark: Any, tmp_path: Path) -> None:
    options = {"path": str(tmp_path / "out"), "format": "parquet"}
    batches = [PARQUET_BATCHES[0][:1], PARQUET_BATCHES[1][:1]]
    with pytest.raises(Exception, match=r"topic 'orders' partition 0 offset 1 was refused.*'v'"):
        run_poison_stream(spark, tmp_path, "file", options, batches)


@pytest.fixture(scope="module")
def faulty_files(spark: Any) -> None:
    quixsinks.register(spark, faulty(FileSink))
    quixsinks.register(spark, faulty(TSDataLakeSink))


@pytest.mark.parametrize("phase", ["write", "commit-after"])
def test_file_dead_letters_survive_a_failed_micro_batch_and_its_replay(
    spark: Any, faulty_files: None, tmp_path: Path, phase: str
) -> None:
    """Batch 1 fails once (a task, or after its commit landed); the restart from the
    checkpoint replays it: no dead letter and no row is lost or duplicated."""
    out = tmp_path / "out"
    marker = tmp_path / "fired"
    options = {
        "path": str(out),
        "format": "parquet",
        **dead_letter(tmp_path),
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(marker),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_poison_stream(spark, tmp_path, "faulty_file", options, PARQUET_BATCHES)
    assert marker.exists()
    run_poison_stream(spark, tmp_path, "faulty_file", options, PARQUET_BATCHES)
    assert parquet_ids(out) == WRITTEN
    assert dead_letter_offsets(tmp_path / "dead") == [1, 3, 5, 6]
    assert_nothing_staged(tmp_path / "dead")


# ------------------------------------------------------------------------------- csvfile


def csv_rows(target: Path) -> list[dict[str, str]]:
    with open(target, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def picky_value(value: dict[str, Any]) -> str:
    """A value_serializer that refuses values without an id (imported by the workers)."""
    if value.get("id") is None:
        raise ValueError("the value has no id")
    return json.dumps(value)


PICKY = f"{__name__}:picky_value"
CSV_BATCHES = [
    [("k0", '{"id": 0}'), ("k1", "{not json"), ("k2", "{}")],
    [("k3", '{"id": 3}'), ("k4", "{}")],
]


def test_csvfile_refuses_a_row_its_serializer_fails_on(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    options = {"path": str(target), "value_serializer": PICKY, **dead_letter(tmp_path)}
    run_poison_stream(spark, tmp_path, "csvfile", options, CSV_BATCHES)
    assert sorted(r["offset"] for r in csv_rows(target)) == ["0", "3"]
    assert errors_by_offset(tmp_path / "dead") == {
        1: ("RecordError", 0),
        2: ("RecordError", 0),
        4: ("RecordError", 1),
    }
    [letter] = letters_at(tmp_path / "dead", 2)
    assert "'value_serializer' failed" in letter["error"]["message"]
    assert letter["sink"] == "csvfile"
    assert_nothing_staged(tmp_path / "dead")


def test_csvfile_skip_is_counted_in_commit_records(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    options = {
        "path": str(target),
        "value_serializer": PICKY,
        "on_error": "skip",
        "sink_id": "orders",
    }
    run_poison_stream(spark, tmp_path, "csvfile", options, CSV_BATCHES)
    assert sorted(r["offset"] for r in csv_rows(target)) == ["0", "3"]
    records = quixsinks.commit_records("csvfile", path=str(target)).to_pylist()
    got = [(r["sink_id"], r["batch_id"], r["rows_written"], r["skipped"]) for r in records]
    assert got == [("orders", 0, 1, 2), ("orders", 1, 1, 1)]


def test_csvfile_fail_names_the_row(spark: Any, tmp_path: Path) -> None:
    options = {"path": str(tmp_path / "out.csv"), "value_serializer": PICKY}
    with pytest.raises(Exception, match=r"offset 1 was refused.*'value_serializer' failed"):
        run_poison_stream(
            spark, tmp_path, "csvfile", options, [[("k0", '{"id": 0}'), ("k1", "{}")]]
        )


# ---------------------------------------------------------------------------- tsdatalake

REGION = "r" * 300  # a partition directory name of 307 bytes
LAKE_BATCHES = [
    [
        ("k0", json.dumps({"id": 0, "region": "eu", "v": 1, LONG: "x"})),
        ("k1", json.dumps({"id": 1, "region": REGION, "v": 2})),
        ("k2", "{not json"),
    ],
    [
        ("k3", json.dumps({"id": 3, "region": "eu", "v": "three"})),
        ("k4", json.dumps({"id": 4, "region": "us"})),
        ("k5", json.dumps({"id": 5, "region": "eu"})),
    ],
    [("k6", json.dumps({"id": 6, "region": "us", "v": 7}))],
]


def lake_options(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "path": str(tmp_path / "lake"),
        "table_name": "events",
        "hive_columns": "region",
        "sink_id": "lake",
        **extra,
    }


def lake_ids(tmp_path: Path) -> list[int]:
    folder = tmp_path / "lake" / "events"
    table = ds.dataset(str(folder), format="parquet", partitioning="hive").to_table()
    return sorted(table.column("id").to_pylist())


def test_tsdatalake_refuses_long_partition_values_and_type_changes_row_by_row(
    spark: Any, tmp_path: Path
) -> None:
    options = lake_options(tmp_path, **dead_letter(tmp_path))
    run_poison_stream(spark, tmp_path, "tsdatalake", options, LAKE_BATCHES)
    assert lake_ids(tmp_path) == [0, 4, 5, 6]
    folder = tmp_path / "lake" / "events"
    assert any(LONG in pq.read_schema(f).names for f in folder.rglob("*.parquet"))
    assert errors_by_offset(tmp_path / "dead") == {
        1: ("RecordError", 0),  # partition directory too long
        2: ("RecordError", 0),  # not JSON
        3: ("TypeChangeError", 1),
    }
    [letter] = letters_at(tmp_path / "dead", 1)
    assert letter["sink"] == "tsdatalake"
    assert "307 bytes" in letter["error"]["message"]
    # batch 1's good rows: one file per partition, not split by the refused row
    assert len(list((folder / "region=eu").glob("*.parquet"))) == 2  # batches 0 and 1
    records = quixsinks.commit_records(
        "tsdatalake", path=str(tmp_path / "lake"), table_name="events", sink_id="lake"
    ).to_pylist()
    got = [(r["batch_id"], r["rows_written"], r["dead_lettered"]) for r in records]
    assert got == [(0, 1, 2), (1, 2, 1), (2, 1, 0)]
    assert_nothing_staged(tmp_path / "dead")


def test_tsdatalake_skip_drops_the_rows(spark: Any, tmp_path: Path) -> None:
    run_poison_stream(
        spark, tmp_path, "tsdatalake", lake_options(tmp_path, on_error="skip"), LAKE_BATCHES
    )
    assert lake_ids(tmp_path) == [0, 4, 5, 6]
    assert not (tmp_path / "dead").exists()


def test_tsdatalake_fail_names_the_row_with_the_long_partition_value(
    spark: Any, tmp_path: Path
) -> None:
    batches = [LAKE_BATCHES[0][:2]]  # (an unparseable value would be named first)
    with pytest.raises(Exception, match=r"offset 1 was refused: tsdatalake: hive column 'region'"):
        run_poison_stream(spark, tmp_path, "tsdatalake", lake_options(tmp_path), batches)


def test_tsdatalake_dead_letters_survive_a_commit_that_fails_after_landing(
    spark: Any, faulty_files: None, tmp_path: Path
) -> None:
    marker = tmp_path / "fired"
    options = lake_options(
        tmp_path,
        **dead_letter(tmp_path),
        fail_batch="1",
        fail_phase="commit-after",
        fail_marker=str(marker),
    )
    with pytest.raises(Exception, match="injected failure"):
        run_poison_stream(spark, tmp_path, "faulty_tsdatalake", options, LAKE_BATCHES)
    run_poison_stream(spark, tmp_path, "faulty_tsdatalake", options, LAKE_BATCHES)
    assert lake_ids(tmp_path) == [0, 4, 5, 6]
    assert dead_letter_offsets(tmp_path / "dead") == [1, 2, 3]
    assert_nothing_staged(tmp_path / "dead")
