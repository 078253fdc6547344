"""Foundation benchmark: quixsinks' file sinks against the Spark-to-Python floor.

One local session writes the same cached DataFrame (``--rows`` rows, six mixed
columns) in batch mode through:

* ``noop-arrow``: a quixsinks BatchingSink that does nothing. It goes through exactly
  the same DataSource Arrow writer path as every quixsinks sink, so its time is the
  cost of moving the rows from the JVM to Python as Arrow: **the floor**;
* ``file-parquet``, ``file-json``, ``csvfile``: quixsinks' file sinks;
* ``spark-parquet``, ``spark-json``, ``spark-csv``: Spark's native (JVM) writers;
* ``spark-noop``: Spark's built-in ``noop`` format, the JVM-only floor (no Python).

Targets (issue): ``file-parquet`` reaches 70% of the floor's rows/s or better,
``file-json`` and ``csvfile`` 40% or better.

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_foundation.py [--rows N]``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from common import (
    FLOOR,
    Case,
    argument_parser,
    bench_session,
    close_session,
    count_output_rows,
    floor_case,
    machine_info,
    mixed_dataframe,
    register_floor,
    run_cases,
    select_cases,
    write_results,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NAME = "foundation"

Writer = Callable[["DataFrame", str], None]


def _file(file_format: str) -> Writer:
    def write(df: DataFrame, path: str) -> None:
        (
            df.write.format("file")
            .mode("append")
            .option("path", path)
            .option("format", file_format)
            .save()
        )

    return write


def _csvfile(df: DataFrame, path: str) -> None:
    df.write.format("csvfile").mode("append").option("path", path).save()


def _csvfile_rows(path: str) -> int:
    return count_output_rows(path) - 1  # one header line


def _spark(file_format: str) -> Writer:
    def write(df: DataFrame, path: str) -> None:
        df.write.mode("append").format(file_format).save(path)

    return write


def _spark_noop(df: DataFrame, path: str) -> None:
    df.write.format("noop").mode("append").save()


CASES = [
    floor_case(),
    Case(
        "file-parquet",
        _file("parquet"),
        "quixsinks `file` sink, format parquet (snappy)",
        target=0.70,
    ),
    Case(
        "file-json", _file("json"), "quixsinks `file` sink, format json (JSON Lines)", target=0.40
    ),
    Case(
        "csvfile",
        _csvfile,
        "quixsinks `csvfile` sink (one CSV file, value as JSON)",
        target=0.40,
        count_rows=_csvfile_rows,
    ),
    Case("spark-parquet", _spark("parquet"), "Spark's native parquet writer (JVM)"),
    Case("spark-json", _spark("json"), "Spark's native json writer (JVM)"),
    Case("spark-csv", _spark("csv"), "Spark's native csv writer (JVM)"),
    Case(
        "spark-noop",
        _spark_noop,
        "Spark's built-in `noop` format: reads the cached rows, "
        "no Python, writes nothing (the JVM-only floor)",
        count_rows=None,
    ),
]

NOTES = """
`vs floor` is the case's rows/s divided by `noop-arrow`'s rows/s (both measured in this
session). `noop-arrow` runs quixsinks' Arrow writer path with a sink that writes nothing,
so it is the fastest any quixsinks sink can be here; a ratio of 0.70 means the sink's own
work (serialising, staging, publishing) costs 30% of the rows/s the transfer to Python
allows. Spark's native writers never leave the JVM, so their ratio can exceed 1.
`spark-noop` is the JVM-only floor. Compare ratios, not absolute timings, across machines.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    cases = select_cases(CASES, args.cases, floor=FLOOR)
    partitions = args.partitions or args.cores

    import quixsinks

    spark = bench_session("quixsinks-bench-foundation", args.cores, verbose=args.verbose)
    try:
        quixsinks.register(spark)
        register_floor(spark)
        print(f"building {args.rows:_} cached rows in {partitions} partitions ...", flush=True)
        df = mixed_dataframe(spark, args.rows, partitions)
        results = run_cases(
            df,
            cases,
            floor=FLOOR,
            rows=args.rows,
            repeat=args.repeat,
            workdir=args.tmp,
            log=lambda line: print(line, flush=True),
        )
        info = machine_info(
            spark,
            rows=args.rows,
            repeat=args.repeat,
            partitions=partitions,
            cores=args.cores,
            columns=dict(df.dtypes),
        )
        df.unpersist()
    finally:
        close_session(spark)

    markdown = write_results(
        args.out,
        NAME,
        title="quixsinks foundation benchmark: file sinks vs the Spark-to-Python floor",
        info=info,
        results=results,
        floor=FLOOR,
        notes=NOTES,
    )
    print()
    print(markdown)
    print(f"wrote {args.out / (NAME + '.json')} and {args.out / (NAME + '.md')}")
    failed = [r.name for r in results if r.passed is False]
    if failed:
        print(f"below target: {', '.join(failed)}", file=sys.stderr)
        return 1 if args.strict else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
