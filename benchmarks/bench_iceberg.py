"""Iceberg benchmark: the iceberg sink vs a Quix-like IcebergSink, pyiceberg's append and Spark.

One local session takes the same cached DataFrame (``--rows`` rows, the foundation
benchmark's six mixed columns) and writes it into a fresh, unpartitioned Iceberg table of
an embedded SQLite ``SqlCatalog`` with a local warehouse (one per run):

* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (the floor);
* ``iceberg``: the ``iceberg`` sink (``df.write.format("iceberg")``): executors write
  Parquet data files in parallel, the driver commits one snapshot; table creation included;
* ``quix-like``: what Quix Streams' ``IcebergSink`` does, in the driver: the rows are
  collected to the driver (``toArrow``, timed: Quix receives every record in its one
  process), each batch of ``QUIX_BATCH`` rows is turned into Python records and back into
  an Arrow table (``pa.Table.from_pylist``, as Quix builds its table from record dicts)
  and appended with ``table.append`` (one snapshot per batch);
* ``pyiceberg-append``: pyiceberg's own ``table.append`` of the whole Arrow table, already
  in the driver (the collect is *not* timed): the library's limit from one process;
* ``pyiceberg-collect``: the same append with the collect timed (``df.toArrow()`` then
  ``table.append``): what a user without the sink does with a DataFrame;
* ``spark-parquet``: Spark's JVM Parquet writer (``df.write.parquet``), the floor for files,
  with zstd as the Iceberg table's files (Iceberg's default codec; Spark's is snappy).

Targets (issue): ``iceberg`` >= 1.5x ``pyiceberg-append``; ``iceberg`` >= 0.7x
``spark-parquet``.

Run: ``.venv/bin/python benchmarks/bench_iceberg.py [--rows N]``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import Bench, Case, Page, count_output_rows, log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

TABLE = "bench.events"
QUIX_BATCH = 100_000
#: --quick's commit-curve batches: past the curve's keep_snapshots=20, so expiry runs
QUICK_BATCHES = 30


def catalog(path: str) -> Any:
    from pyiceberg.catalog import load_catalog

    Path(path).mkdir(parents=True, exist_ok=True)
    return load_catalog(
        "quixsinks",  # the sink's default catalog_name: a SqlCatalog's tables are per name
        type="sql",
        uri=f"sqlite:///{path}/catalog.db",
        warehouse=f"file://{path}",
    )


def iceberg_rows(path: str) -> int:
    table = catalog(path).load_table(TABLE)
    return int(table.scan().to_arrow().num_rows)


def create_table(schema: Any) -> Any:
    def setup(path: str) -> None:
        cat = catalog(path)
        cat.create_namespace_if_not_exists("bench")
        cat.create_table(TABLE, schema=schema)

    return setup


def sink_case() -> Case:
    def write(df: DataFrame, path: str) -> None:
        (
            df.write.format("iceberg")
            .mode("append")
            .option("warehouse", path)
            .option("table_name", TABLE)
            .save()
        )

    return Case(
        "iceberg",
        write,
        "iceberg sink: Parquet data files written by the executors, one driver commit",
        count_rows=iceberg_rows,
    )


def quix_case(schema: Any) -> Case:
    import pyarrow as pa

    def write(df: DataFrame, path: str) -> None:
        arrow = df.toArrow()  # Quix receives every record in its one process
        table = catalog(path).load_table(TABLE)
        for start in range(0, arrow.num_rows, QUIX_BATCH):
            rows = arrow.slice(start, QUIX_BATCH).to_pylist()
            table.append(pa.Table.from_pylist(rows, schema=schema))

    return Case(
        "quix-like",
        write,
        f"Quix-like IcebergSink: collect to the driver, Arrow from Python records, "
        f"table.append per {QUIX_BATCH:,} rows",
        count_rows=iceberg_rows,
        setup=create_table(schema),
    )


def append_case(arrow: Any) -> Case:
    def write(df: DataFrame, path: str) -> None:
        catalog(path).load_table(TABLE).append(arrow)

    return Case(
        "pyiceberg-append",
        write,
        "pyiceberg table.append of the whole Arrow table, already in the driver",
        count_rows=iceberg_rows,
        setup=create_table(arrow.schema),
    )


def collect_case(schema: Any) -> Case:
    def write(df: DataFrame, path: str) -> None:
        catalog(path).load_table(TABLE).append(df.toArrow())

    return Case(
        "pyiceberg-collect",
        write,
        "df.toArrow() then pyiceberg table.append, in the driver (the collect timed)",
        count_rows=iceberg_rows,
        setup=create_table(schema),
    )


def parquet_case() -> Case:
    def write(df: DataFrame, path: str) -> None:
        df.write.option("compression", "zstd").parquet(path)  # the codec of the table's files

    return Case(
        "spark-parquet",
        write,
        "Spark's JVM Parquet writer (df.write.parquet), zstd",
        count_rows=count_output_rows,
    )


def commit_curve(batches: int, keep: int | None, workdir: Path) -> list[float]:
    """Seconds of each of ``batches`` one-file micro-batch commits through the sink's
    driver commit (ledger walk + append), with ``keep_snapshots=keep``; no Spark."""
    import time

    import pyarrow as pa

    from quixsinks.core.batch import SinkBatch, WriteContext
    from quixsinks.core.sink import CommitContext, Receipt
    from quixsinks.sinks.iceberg import IcebergOptions, IcebergSink

    options = {"warehouse": str(workdir / f"curve-{keep}"), "table_name": TABLE}
    if keep is not None:
        options["keep_snapshots"] = str(keep)
    sink = IcebergSink(IcebergOptions.from_options(options))
    rows = pa.table({"id": pa.array(range(10), pa.int64())})
    sink.prepare(rows.schema)
    assert sink.records is not None
    seconds = []
    for batch in range(batches):
        context = WriteContext("curve", batch, 0, "a", True, "q")
        staged = sink.write(SinkBatch(rows, sink.records, context))
        receipt: Receipt[Any] = Receipt("curve", batch, 0, "a", query_id="q", staged=[staged])
        started = time.perf_counter()
        sink.commit(CommitContext("curve", batch, True, "q"), [receipt])
        seconds.append(time.perf_counter() - started)
    return seconds


def curve_summary(seconds: list[float]) -> dict[str, float]:
    tenth = max(1, len(seconds) // 10)
    return {
        "batches": len(seconds),
        "first_tenth_ms": 1000 * sum(seconds[:tenth]) / tenth,
        "last_tenth_ms": 1000 * sum(seconds[-tenth:]) / tenth,
    }


NOTES = """
Every case writes the same rows into a fresh unpartitioned table of an embedded SQLite
`SqlCatalog` with a local warehouse (pyiceberg {pyiceberg}, zstd Parquet), or Spark's Parquet
files (zstd too: the same codec on both sides). `quix-like` re-implements Quix Streams'
`IcebergSink` (which talks to AWS Glue only) on the same catalog: the collect to the
driver, Arrow built from Python records and one `table.append` per {quix_batch:,} rows
are timed. `pyiceberg-append` is timed from an Arrow
table already in the driver; `pyiceberg-collect` times the collect (`df.toArrow()`) too.
The floor (`noop-arrow`, a sink that drops every batch) is what Spark's hand-off of the
rows to Python executors costs before any sink runs.

Commit time per micro-batch (the driver's ledger walk and append of one small data file,
no Spark), mean of the first and the last tenth of {curve_batches} consecutive batches:
without expiry {plain_first:.0f} ms -> {plain_last:.0f} ms; with `keep_snapshots=20`
{kept_first:.0f} ms -> {kept_last:.0f} ms.
"""


def cases(bench: Bench) -> list[Case]:
    import pyiceberg

    bench.info["pyiceberg"] = pyiceberg.__version__
    arrow = bench.arrow()
    return [
        sink_case(),
        quix_case(arrow.schema),
        append_case(arrow),
        collect_case(arrow.schema),
        parquet_case(),
    ]


def after(bench: Bench) -> None:
    """The commit-time curve, without and with expiry."""
    batches = bench.args.commit_batches
    if bench.args.quick:
        batches = min(batches, QUICK_BATCHES)
    log(f"commit-time curve: {batches} micro-batches, without and with expiry")
    seconds = {
        "plain": commit_curve(batches, None, bench.workdir),
        "keep_20": commit_curve(batches, 20, bench.workdir),
    }
    bench.extra["commit_curve"] = {
        "plain": curve_summary(seconds["plain"]),
        "keep_20": curve_summary(seconds["keep_20"]),
        "seconds": seconds,
    }


def notes(bench: Bench) -> str:
    curve = bench.extra["commit_curve"]
    plain, kept = curve["plain"], curve["keep_20"]
    return NOTES.format(
        pyiceberg=bench.info["pyiceberg"],
        quix_batch=QUIX_BATCH,
        curve_batches=plain["batches"],
        plain_first=plain["first_tenth_ms"],
        plain_last=plain["last_tenth_ms"],
        kept_first=kept["first_tenth_ms"],
        kept_last=kept["last_tenth_ms"],
    )


def arguments(parser: Any) -> None:
    parser.add_argument(
        "--commit-batches",
        type=int,
        default=1000,
        help=f"micro-batches of the commit-time curve (default 1,000; --quick: {QUICK_BATCHES})",
    )


PAGE = Page(
    name="iceberg",
    title="quixsinks Iceberg benchmark: the iceberg sink vs Quix-like, pyiceberg and Spark",
    doc=__doc__ or "",
    cases=cases,
    case_names=("iceberg", "quix-like", "pyiceberg-append", "pyiceberg-collect", "spark-parquet"),
    targets=(("iceberg", "pyiceberg-append", 1.5), ("iceberg", "spark-parquet", 0.7)),
    notes=notes,
    arguments=arguments,
    after=after,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
