"""A sink id written by one streaming query is never silently reused by another.

A new checkpoint restarts batch ids at 0: if the ledger entries of the old query were read
as "already committed", the new query's first batches would be skipped (data loss). Every
exactly-once sink must instead fail before writing, name both query ids and how to reset,
and, with ``takeover_query_id``, hand the sink id over without touching the old rows.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .streams import read_jsonl_ids, run_available_now, write_input_files

SINK_ID = "shared-sink"


def read_file(out: Path) -> list[int]:
    return sorted(read_jsonl_ids(out))


def read_lake(table: Path) -> list[int]:
    import pyarrow.dataset as ds

    if not table.exists():
        return []
    return sorted(ds.dataset(str(table), partitioning="hive").to_table().column("id").to_pylist())


def read_csvfile(out: Path) -> list[int]:
    with open(out, newline="", encoding="utf-8") as f:
        return sorted(json.loads(row["value"])["id"] for row in csv.DictReader(f))


def cases(
    tmp_path: Path, pg: dict[str, Any]
) -> dict[str, tuple[str, dict[str, str], Callable[[], list[int]]]]:
    def read_pg() -> list[int]:
        conn = pg["server"].connect(pg["dbname"])
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT id FROM events ORDER BY id")
                return [row[0] for row in cur.fetchall()]
        finally:
            conn.close()

    iceberg_options = {"warehouse": str(tmp_path / "warehouse"), "table_name": "db.events"}

    def read_iceberg() -> list[int]:
        from quixsinks.sinks.iceberg import IcebergOptions
        from quixsinks.sinks.iceberg.client import load_catalog

        opts = IcebergOptions.from_options(iceberg_options)
        table = load_catalog(opts).load_table("db.events")
        return sorted(table.scan().to_arrow().column("id").to_pylist())

    out = tmp_path / "out"
    return {
        "file": ("file", {"path": str(out)}, lambda: read_file(out)),
        "file-append": ("file", {"path": str(out), "append": "true"}, lambda: read_file(out)),
        "csvfile": (
            "csvfile",
            {"path": str(tmp_path / "out.csv")},
            lambda: read_csvfile(tmp_path / "out.csv"),
        ),
        "postgresql": ("postgresql", {**pg["options"], "table_name": "events"}, read_pg),
        "tsdatalake": (
            "tsdatalake",
            {"path": str(out), "table_name": "events", "hive_columns": "key"},
            lambda: read_lake(out / "events"),
        ),
        "iceberg": ("iceberg", iceberg_options, read_iceberg),
    }


def redis_list_case(
    redis_sink: dict[str, Any],
) -> tuple[str, dict[str, str], Callable[[], list[int]]]:
    """Redis lists (and streams) keep a fenced ledger; its other types are overwrites."""
    options = {**redis_sink["options"], "data_type": "list", "key_template": "events"}
    key = redis_sink["prefix"] + "events"

    def read() -> list[int]:
        return sorted(json.loads(v)["id"] for v in redis_sink["client"].lrange(key, 0, -1))

    return "redis", options, read


def bigquery_case(
    bigquery_sink: dict[str, Any],
) -> tuple[str, dict[str, str], Callable[[], list[int]]]:
    """BigQuery keeps its fenced ledger in the table's dataset (bqemulator)."""
    options = {**bigquery_sink["options"], "value_columns": "id"}

    def read() -> list[int]:
        result = bigquery_sink["client"].query(f"SELECT id FROM `{bigquery_sink['table']}`")
        return sorted(r["id"] for r in result.result())

    return "bigquery", options, read


@pytest.mark.parametrize(
    "case",
    [
        "file",
        "file-append",
        "csvfile",
        "postgresql",
        "redis-list",
        "tsdatalake",
        "iceberg",
        "bigquery",
    ],
)
def test_new_checkpoint_with_a_used_sink_id_fails_then_takes_over_when_told(
    spark: Any, tmp_path: Path, pg: dict[str, Any], case: str, request: pytest.FixtureRequest
) -> None:
    if case == "redis-list":
        fmt, options, read = redis_list_case(request.getfixturevalue("redis_sink"))
    elif case == "bigquery":
        fmt, options, read = bigquery_case(request.getfixturevalue("bigquery_sink"))
    else:
        fmt, options, read = cases(tmp_path, pg)[case]
    options = {**options, "sink_id": SINK_ID}
    ids = write_input_files(tmp_path / "in", files=2, rows_per_file=10)
    run_available_now(spark, tmp_path / "in", fmt, tmp_path / "ckpt-a", options)
    assert read() == ids

    with pytest.raises(Exception, match="belongs to streaming query") as raised:
        run_available_now(spark, tmp_path / "in", fmt, tmp_path / "ckpt-b", options)
    assert read() == ids  # nothing lost, nothing written twice
    match = re.search(r"takeover_query_id='([0-9a-f-]+)'", str(raised.value))
    assert match, str(raised.value)[-2000:]

    taken = {**options, "takeover_query_id": match.group(1)}
    run_available_now(spark, tmp_path / "in", fmt, tmp_path / "ckpt-b", taken)
    assert read() == sorted(ids + ids)  # the old query's rows stay, the new query's land once

    write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    with pytest.raises(Exception, match="belongs to streaming query"):  # the old one is out
        run_available_now(spark, tmp_path / "in", fmt, tmp_path / "ckpt-a", options)


def test_complete_mode_with_a_restarted_query_keeps_the_newest_result(
    spark: Any, tmp_path: Path
) -> None:
    """Complete mode rewrites the whole directory per micro-batch; after a restart from the
    checkpoint the output is exactly the last result."""
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    out = tmp_path / "out"

    def counts(df: Any) -> Any:
        return df.groupBy("key").count()

    options = {"path": str(out), "format": "parquet", "sink_id": "counts"}
    from .streams import stream_from

    for _ in range(2):
        query = (
            counts(stream_from(spark, tmp_path / "in"))
            .writeStream.format("file")
            .outputMode("complete")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .options(**options)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(240)
        assert query.exception() is None
        write_input_files(tmp_path / "in", files=4, rows_per_file=10)
    import pyarrow.parquet as pq

    table = pq.read_table(str(out))
    assert sum(table.column("count").to_pylist()) == 40
    assert len(ids) == 30
