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
  take more than ``QUIX_MAX_SECONDS``;
* ``load-job``: the destination's bulk path: the rows as one Parquet file sent by one load
  job from the driver (``load_table_from_file``).

Relative figures only: the emulator is DuckDB on this machine, not BigQuery.
Target (issue): ``bigquery`` >= 5x ``quix-insertall``.

Run: ``.venv/bin/python benchmarks/bench_bigquery.py [--rows N] [--quick]``.
"""

from __future__ import annotations

import io
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import (
    BENCH_DIR,
    FLOOR,
    Case,
    RelativeTarget,
    argument_parser,
    bench_session,
    close_session,
    floor_case,
    judge_targets,
    machine_info,
    mixed_dataframe,
    register_floor,
    run_cases,
    selected_cases,
    targets_markdown,
    write_results,
)

import quixsinks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NAME = "bigquery"
ROOT = BENCH_DIR.parent
QUIX_BATCH = 10_000
QUIX_MAX_SECONDS = 60.0
QUIX_SAMPLE_ROWS = 50_000
QUIX_PROBE_ROWS = 10_000
CASE_NAMES = ("bigquery", "bigquery-direct", "quix-insertall", "load-job")
TARGETS: tuple[RelativeTarget, ...] = (("bigquery", "quix-insertall", 5.0),)


def log(line: str) -> None:
    print(line, flush=True)


@dataclass
class Tables:
    """One fresh dataset per run; ``path`` (fresh per run) names the table."""

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

    def options(self, path: str, **extra: str) -> dict[str, str]:
        return {
            **self.emulator.options,
            "dataset_id": self.dataset,
            "table_name": self.table(path),
            **extra,
        }


def sink_case(tables: Tables, name: str, description: str, **extra: str) -> Case:
    def write(df: DataFrame, path: str) -> None:
        df.write.format("bigquery").mode("append").options(**tables.options(path, **extra)).save()

    return Case(
        name,
        write,
        description,
        count_rows=tables.count_rows,
        setup=tables.fresh,
        cleanup=tables.cleanup,
    )


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

    def run(self, path: str) -> None:
        from google.cloud import bigquery

        client, table = self.tables.client, self.tables.full(path)
        client.create_table(bigquery.Table(table, schema=_schema(bigquery)), exists_ok=True)
        for start in range(0, len(self.rows), QUIX_BATCH):
            errors = client.insert_rows_json(
                table, self.rows[start : start + QUIX_BATCH], timeout=60
            )
            if errors:
                raise RuntimeError(f"insert_rows_json refused rows: {errors[:3]}")

    def case(self, all_rows: int) -> Case:
        count = len(self.rows)
        return Case(
            "quix-insertall",
            lambda df, path: self.run(path),
            "Quix BigQuerySink path: insert_rows_json of JSON row dicts, "
            f"{QUIX_BATCH:_} rows per request, from the driver"
            + ("" if count == all_rows else f" ({count:_} rows)"),
            count_rows=self.tables.count_rows,
            setup=self.tables.fresh,
            cleanup=self.tables.cleanup,
            rows=count,
        )


def quix_sample(feed: QuixInsertAll, arrow: Any, rows: int) -> dict[str, Any]:
    probe = min(rows, QUIX_PROBE_ROWS)
    feed.load(arrow.slice(0, probe))
    path = f"probe-{uuid.uuid4().hex}"
    feed.tables.fresh(path)
    started = time.perf_counter()
    feed.run(path)
    seconds = time.perf_counter() - started
    feed.tables.cleanup(path)
    chosen = rows if rows * seconds / probe <= QUIX_MAX_SECONDS else min(rows, QUIX_SAMPLE_ROWS)
    log(f"Quix probe: {probe:_} rows in {seconds:.2f} s; timing Quix on {chosen:_} rows")
    feed.load(arrow.slice(0, chosen))
    return {"probe_rows": probe, "probe_seconds": round(seconds, 3), "rows": chosen}


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

    return Case(
        "load-job",
        write,
        "one Parquet file, one load job from the driver (the destination's bulk path)",
        count_rows=tables.count_rows,
        setup=tables.fresh,
        cleanup=tables.cleanup,
    )


NOTES = """
Targets (issue), on the best times' rows/s:
{targets}
Relative figures only: the destination is {emulator} (DuckDB, in memory) on this
machine, not BigQuery. `bigquery` is the sink's exactly-once path (Arrow AppendRows into
PENDING streams on a staging table, BatchCommitWriteStreams, one transaction INSERT ...
SELECT plus the ledger row, then the staging rows deleted); `bigquery-direct` commits the
PENDING streams on the table itself. `quix-insertall` re-implements Quix Streams'
`BigQuerySink.write` as documented (JSON row dicts with `timestamp` and `__key`,
`insert_rows_json`), {quix_batch} rows per request from the driver{quix_sample}.
`load-job` sends the rows as one Parquet file in one load job from the driver.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__.splitlines()[0], rows=1_000_000)
    args = parser.parse_args(argv)
    partitions = args.partitions or args.cores
    wanted = selected_cases(args.cases, CASE_NAMES)

    sys.path.insert(0, str(ROOT))
    from tests.services.bigquery_emulator import PREFIX, BQEmulator

    workdir = Path(tempfile.mkdtemp(prefix="quixsinks-bench-bigquery-", dir=args.tmp))
    quix: dict[str, Any] = {}
    with BQEmulator() as emulator:
        tables = Tables(emulator, emulator.client())
        spark = bench_session("quixsinks-bench-bigquery", args.cores, verbose=args.verbose)
        try:
            quixsinks.register(spark)
            register_floor(spark)
            log(f"building {args.rows:_} cached rows in {partitions} partitions ...")
            df = mixed_dataframe(spark, args.rows, partitions)
            arrow = df.toArrow()
            cases = [
                floor_case(),
                sink_case(tables, "bigquery", "bigquery sink, write_mode=exactly-once"),
                sink_case(
                    tables,
                    "bigquery-direct",
                    "bigquery sink, write_mode=direct",
                    write_mode="direct",
                ),
                load_job_case(tables, arrow),
            ]
            if "quix-insertall" in wanted:
                feed = QuixInsertAll(tables)
                quix = quix_sample(feed, arrow, args.rows)
                cases.append(feed.case(args.rows))
            cases = [c for c in cases if c.name in wanted or c.name == FLOOR]
            results = run_cases(
                df,
                cases,
                floor=FLOOR,
                rows=args.rows,
                repeat=args.repeat,
                workdir=workdir,
                log=log,
            )
            version = (PREFIX / "bin" / "bqemulator").exists() and _emulator_version()
            info = machine_info(
                spark,
                rows=args.rows,
                repeat=args.repeat,
                partitions=partitions,
                bqemulator=version,
                quix=quix,
            )
        finally:
            close_session(spark)
    shutil.rmtree(workdir, ignore_errors=True)
    judged, verdict = judge_targets(results, TARGETS, {})
    notes = NOTES.format(
        targets=targets_markdown(judged),
        emulator=info["bqemulator"],
        quix_batch=f"{QUIX_BATCH:,}",
        quix_sample=(
            f"; timed on the first {quix['rows']:,} rows, its rows/s compared as is"
            if quix and quix.get("rows") != args.rows
            else ""
        ),
    )
    markdown = write_results(
        args.out,
        NAME,
        title="quixsinks BigQuery benchmark: the bigquery sink vs Quix's insertAll and a load job",
        info=info,
        results=results,
        floor=FLOOR,
        notes=notes,
        skipped={},
        extra={"targets": judged, "all_targets_passed": verdict},
    )
    print()
    print(markdown)
    failed = [f"{t['case']} vs {t['against']}" for t in judged if t["passed"] is False]
    if failed:
        print(f"below target: {', '.join(failed)}", file=sys.stderr)
        return 1 if args.strict else 0
    return 0


def _emulator_version() -> str:
    import subprocess

    from tests.services.bigquery_emulator import PREFIX

    done = subprocess.run(
        [str(PREFIX / "bin" / "bqemulator"), "version"], capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
