"""BigQuery benchmark: the bigquery sink vs Quix's insertAll path and one load job, on bqemulator.

One local session and one throwaway bqemulator (``BQEmulator`` from
``tests/services/bigquery_emulator.py``: DuckDB-backed, in memory, 127.0.0.1) take the same
cached DataFrame (``--rows`` rows, the foundation benchmark's six mixed columns); each case
writes every row into its own fresh table:

* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (the floor);
* ``bigquery``: the ``bigquery`` sink, ``df.write`` (exactly-once: PENDING streams on the
  staging table, one transaction moving the rows);
* ``bigquery-direct``: ``write_mode=direct`` (PENDING streams on the table, no transaction);
* ``quix-insertall``: Quix Streams' BigQuerySink path re-implemented as documented
  (/work/shared/reference/quix-behaviour.md: ``insert_rows_json`` of JSON row dicts with the
  ``timestamp`` and ``__key`` columns), from the driver process in requests of
  ``QUIX_BATCH`` rows (one Quix checkpoint each), timed on a sample when all rows would
  take more than a minute;
* ``load-job``: the destination's bulk path: the rows as one Parquet file sent by one load
  job from the driver (``load_table_from_file``).

Relative figures only: the emulator is DuckDB on this machine, not BigQuery.
Target (issue): ``bigquery`` >= 5x ``quix-insertall``.

Run: ``.venv/bin/python benchmarks/bench_bigquery.py [--rows N] [--quick]``.
"""

from __future__ import annotations

import io
import sys
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness import Bench, Case, Destination, Page, command_output
from harness.servers import bqemulator_binary

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

QUIX_BATCH = 10_000


@dataclass
class Tables(Destination):
    """One dataset for the run; ``path`` (fresh per run) names the table."""

    emulator: Any
    client: Any
    dataset: str = field(default_factory=lambda: f"bench_{uuid.uuid4().hex[:8]}")

    def table(self, path: str) -> str:
        return "t_" + uuid.uuid5(uuid.NAMESPACE_URL, path).hex[:12]

    def full(self, path: str) -> str:
        return f"{self.client.project}.{self.dataset}.{self.table(path)}"

    def fresh(self, path: str) -> None:
        self.client.create_dataset(self.dataset, exists_ok=True)

    def count_rows(self, path: str) -> int:
        result = self.client.query(f"SELECT count(*) AS n FROM `{self.full(path)}`").result()
        return int(next(iter(result))["n"])

    def cleanup(self, path: str) -> None:
        for suffix in ("", "_qs_staging"):
            self.client.delete_table(self.full(path) + suffix, not_found_ok=True)


def sink_case(tables: Tables, name: str, description: str, **extra: str) -> Case:
    def write(df: DataFrame, path: str) -> None:
        options = {
            **tables.emulator.options,
            "dataset_id": tables.dataset,
            "table_name": tables.table(path),
            **extra,
        }
        df.write.format("bigquery").mode("append").options(**options).save()

    return tables.case(name, write, description)


def _schema(bigquery: Any) -> list[Any]:
    f = bigquery.SchemaField
    return [
        f("timestamp", "TIMESTAMP"),
        f("__key", "STRING"),
        f("id", "FLOAT64"),  # Quix's sink maps Python ints to FLOAT64
        f("value", "FLOAT64"),
        f("flag", "BOOL"),
        f("name", "STRING"),
    ]


@dataclass
class QuixInsertAll:
    """Quix's BigQuerySink.write as documented: rows as JSON dicts, insert_rows_json."""

    tables: Tables
    rows: list[dict[str, Any]] = field(default_factory=list)

    def load(self, arrow: Any) -> None:
        self.rows = [
            {
                "timestamp": r["timestamp"].timestamp(),
                "__key": r["key"],
                "id": r["id"],
                "value": r["value"],
                "flag": r["flag"],
                "name": r["name"],
            }
            for r in arrow.to_pylist()
        ]

    def write(self, df: DataFrame, path: str) -> None:
        from google.cloud import bigquery

        client, table = self.tables.client, self.tables.full(path)
        client.create_table(bigquery.Table(table, schema=_schema(bigquery)), exists_ok=True)
        for start in range(0, len(self.rows), QUIX_BATCH):
            errors = client.insert_rows_json(
                table, self.rows[start : start + QUIX_BATCH], timeout=60
            )
            if errors:
                raise RuntimeError(f"insert_rows_json refused rows: {errors[:3]}")


def load_job_case(tables: Tables, arrow: Any) -> Case:
    import pyarrow.parquet as pq

    def write(df: DataFrame, path: str) -> None:
        from google.cloud import bigquery

        buffer = io.BytesIO()
        pq.write_table(arrow, buffer)
        buffer.seek(0)
        f = bigquery.SchemaField
        schema = [
            f("key", "STRING"),
            f("id", "INT64"),
            f("value", "FLOAT64"),
            f("flag", "BOOL"),
            f("name", "STRING"),
            f("timestamp", "TIMESTAMP"),
        ]
        # the emulator's load jobs need the table (BigQuery would create it)
        tables.client.create_table(bigquery.Table(tables.full(path), schema=schema))
        config = bigquery.LoadJobConfig(source_format="PARQUET")
        job = tables.client.load_table_from_file(buffer, tables.full(path), job_config=config)
        job.result(timeout=600)

    return tables.case(
        "load-job",
        write,
        "one Parquet file, one load job from the driver (the destination's bulk path)",
    )


def cases(bench: Bench) -> list[Case]:
    emulator = bench.servers["bigquery"]
    tables = Tables(emulator, emulator.client())
    binary = bqemulator_binary()
    bench.info["bqemulator"] = (binary.exists() and command_output([str(binary), "version"])) or (
        "unknown"
    )
    found = [
        sink_case(tables, "bigquery", "bigquery sink, write_mode=exactly-once"),
        sink_case(
            tables, "bigquery-direct", "bigquery sink, write_mode=direct", write_mode="direct"
        ),
        load_job_case(tables, bench.arrow()),
    ]
    if bench.wants("quix-insertall"):
        feed = QuixInsertAll(tables)
        description = (
            "Quix BigQuerySink path: insert_rows_json of JSON row dicts, "
            f"{QUIX_BATCH:_} rows per request, from the driver"
        )
        case = tables.case("quix-insertall", feed.write, description)
        found.append(bench.sampled(case, feed.load, sample=50_000, probe=10_000))
    return found


NOTES = """
Relative figures only: the destination is {emulator} (DuckDB, in memory) on this
machine, not BigQuery. `bigquery` is the sink's exactly-once path (Arrow AppendRows into
PENDING streams on a staging table, BatchCommitWriteStreams, one transaction INSERT ...
SELECT plus the ledger row, then the staging rows deleted); `bigquery-direct` commits the
PENDING streams on the table itself. `quix-insertall` re-implements Quix Streams'
`BigQuerySink.write` as documented (JSON row dicts with `timestamp` and `__key`,
`insert_rows_json`), {quix_batch} rows per request from the driver{quix_sample}.
`load-job` sends the rows as one Parquet file in one load job from the driver.
"""


def notes(bench: Bench) -> str:
    return NOTES.format(
        emulator=bench.info["bqemulator"],
        quix_batch=f"{QUIX_BATCH:,}",
        quix_sample=bench.quix_note(),
    )


PAGE = Page(
    name="bigquery",
    title="quixsinks BigQuery benchmark: the bigquery sink vs Quix's insertAll and a load job",
    doc=__doc__ or "",
    cases=cases,
    case_names=("bigquery", "bigquery-direct", "quix-insertall", "load-job"),
    targets=(("bigquery", "quix-insertall", 5.0),),
    notes=notes,
    servers=("bigquery",),
    rows=1_000_000,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
