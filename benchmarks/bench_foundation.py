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

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_foundation.py [--rows N] [--quick]``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness import Bench, Case, Page, count_output_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Writer = Callable[["DataFrame", str], None]


def _file(file_format: str) -> Writer:
    def write(df: DataFrame, path: str) -> None:
        df.write.format("file").mode("append").option("path", path).option(
            "format", file_format
        ).save()

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


def cases(bench: Bench) -> list[Case]:
    return CASES


PAGE = Page(
    name="foundation",
    title="quixsinks foundation benchmark: file sinks vs the Spark-to-Python floor",
    doc=__doc__ or "",
    cases=cases,
    case_names=[c.name for c in CASES],
    notes=NOTES,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
