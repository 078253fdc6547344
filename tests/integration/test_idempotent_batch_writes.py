"""Keyed batch writes: ``df.write`` with ``sink_id`` and ``batch_id`` lands once, however
often the job runs it.

Every sink with a fenced ledger gets the same three writes of one DataFrame: batch 7,
batch 7 again (nothing is written, and the commit logs that the ledger holds it), batch 8
(the rows again). The rows are read back with each destination's own client. The real
fault (a COMMIT that lands, its answer lost) is in test_postgresql_faults.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .streams import INPUT_SCHEMA, write_input_files
from .test_fencing import bigquery_case, read_csvfile, read_file, read_lake, redis_list_case

Case = tuple[str, dict[str, str], Callable[[], list[int]]]

CASES = [
    "file",
    "file-append",
    "csvfile",
    "postgresql",
    "postgresql-prepared",
    "redis-list",
    "iceberg",
    "tsdatalake",
    "tsdatalake-catalog",
    "bigquery",
]


def sink_case(case: str, tmp_path: Path, request: pytest.FixtureRequest) -> Case:
    """The format, options and independent reader (every id, sorted) of one case."""
    out = tmp_path / "out"
    if case in ("file", "file-append"):
        append = {"append": "true"} if case == "file-append" else {}
        return "file", {"path": str(out), **append}, lambda: read_file(out)
    if case == "csvfile":
        target = tmp_path / "out.csv"
        return "csvfile", {"path": str(target)}, lambda: read_csvfile(target)
    if case.startswith("postgresql"):
        pg = request.getfixturevalue("pg")
        mode = {"write_mode": "prepared"} if case == "postgresql-prepared" else {}

        def read_pg() -> list[int]:
            from .test_postgresql import query

            return [row[0] for row in query(pg, "SELECT id FROM events ORDER BY id")]

        return "postgresql", {**pg["options"], "table_name": "events", **mode}, read_pg
    if case == "redis-list":
        return redis_list_case(request.getfixturevalue("redis_sink"))
    if case == "iceberg":
        return iceberg_case(tmp_path)
    if case == "tsdatalake":
        lake = {"path": str(out), "table_name": "events", "hive_columns": "key"}
        return "tsdatalake", lake, lambda: read_lake(out / "events")
    if case == "tsdatalake-catalog":
        return lake_catalog_case(out, request.getfixturevalue("iceberg_rest"))
    if case == "bigquery":
        return bigquery_case(request.getfixturevalue("bigquery_sink"))
    raise AssertionError(case)


def iceberg_case(tmp_path: Path) -> Case:
    options = {"warehouse": str(tmp_path / "warehouse"), "table_name": "db.events"}

    def read() -> list[int]:
        from quixsinks.sinks.iceberg import IcebergOptions
        from quixsinks.sinks.iceberg.client import load_catalog

        table = load_catalog(IcebergOptions.from_options(options)).load_table("db.events")
        return sorted(table.scan().to_arrow().column("id").to_pylist())

    return "iceberg", options, read


def lake_catalog_case(out: Path, rest: Any) -> Case:
    """tsdatalake registering its files in an Iceberg REST catalog: read by the catalog."""
    table = f"events_{uuid.uuid4().hex[:8]}"
    options = {"path": str(out), "table_name": table, "catalog_url": rest.url}

    def read() -> list[int]:
        if not rest.catalog.table_exists(("default", table)):
            return []
        rows = rest.catalog.load_table(("default", table)).scan().to_arrow()
        return sorted(rows.column("id").to_pylist())

    return "tsdatalake", options, read


def write(df: Any, fmt: str, options: dict[str, str]) -> None:
    df.write.format(fmt).mode("append").options(**options).save()


@pytest.mark.parametrize("case", CASES)
def test_a_keyed_batch_write_lands_once_however_often_it_runs(
    spark: Any,
    tmp_path: Path,
    case: str,
    request: pytest.FixtureRequest,
    worker_logs: Callable[[str], int],
) -> None:
    fmt, options, read = sink_case(case, tmp_path, request)
    ids = write_input_files(tmp_path / "in", files=2, rows_per_file=10)
    df = spark.read.schema(INPUT_SCHEMA).json(str(tmp_path / "in"))
    df = df.withColumnRenamed("ts", "timestamp")
    sink_id = f"nightly-{uuid.uuid4().hex[:8]}"  # names this test's log lines
    keyed = {**options, "sink_id": sink_id}

    write(df, fmt, {**keyed, "batch_id": "7"})
    assert read() == ids

    write(df, fmt, {**keyed, "batch_id": "7"})  # the job runs again
    assert read() == ids
    assert worker_logs(f"batch 7 of sink id {sink_id} is in the ledger already") >= 1

    write(df, fmt, {**keyed, "batch_id": "8"})  # the next batch of the job
    assert read() == sorted(ids + ids)
    assert worker_logs(f"batch 8 of sink id {sink_id} is in the ledger already") == 0


#: one case per ledger store (its own pruning code): markers, the append log, SQL, Lua,
#: BigQuery's script; iceberg keeps its entries in snapshots (expiry, not keep_batches)
PRUNED_CASES = ["file", "csvfile", "postgresql", "redis-list", "bigquery", "iceberg"]


@pytest.mark.parametrize("case", PRUNED_CASES)
def test_date_keyed_writes_are_pruned_by_count_not_by_distance(
    spark: Any, tmp_path: Path, case: str, request: pytest.FixtureRequest
) -> None:
    """Daily batch ids jump (20240510 -> 20240710 -> 20250110): the ledger keeps the newest
    ``ledger_keep_batches`` entries and the one it records (a backfill of an older id),
    so an older rerun is still recognised (the ids end in
    0: the file commit's housekeeping runs; the rerun has fewer partitions, so a rerun the
    ledger forgot would leave the first run's other files beside its own). Where each
    commit prunes (SQL, Lua, BigQuery), the oldest entry goes beyond that many and its
    rerun writes again, as docs/index.md says; the file markers and the append log prune in
    steps (every 10th batch id, at twice the count) and iceberg's entries go with expired
    snapshots."""
    fmt, options, read = sink_case(case, tmp_path, request)
    ids = write_input_files(tmp_path / "in", files=1, rows_per_file=6)
    df = spark.read.schema(INPUT_SCHEMA).json(str(tmp_path / "in"))
    df = df.withColumnRenamed("ts", "timestamp")
    keyed = {**options, "sink_id": f"daily-{uuid.uuid4().hex[:8]}", "ledger_keep_batches": "2"}

    write(df.repartition(3), fmt, {**keyed, "batch_id": "20240510"})
    write(df, fmt, {**keyed, "batch_id": "20240710"})
    write(df, fmt, {**keyed, "batch_id": "20240510"})  # two months later, one partition
    assert read() == sorted(ids * 2)
    # a backfill below the newest two keeps its own entry: its rerun writes nothing
    write(df.repartition(3), fmt, {**keyed, "batch_id": "20240110"})
    write(df, fmt, {**keyed, "batch_id": "20240110"})
    assert read() == sorted(ids * 3)
    if case in ("file", "csvfile", "iceberg"):
        return
    write(df, fmt, {**keyed, "batch_id": "20250110"})  # 20240510's and 20240110's go
    write(df, fmt, {**keyed, "batch_id": "20240510"})
    assert read() == sorted(ids * 5)
