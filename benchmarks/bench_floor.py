"""Floor benchmark: can Spark's hand-over of rows to Python tasks be made cheaper?

Every quixsinks sink pays the floor (``noop-arrow``: Spark's JVM handing Arrow batches of
the rows to a Python task that writes nothing). Spark cuts those batches by
``spark.sql.execution.arrow.maxRecordsPerBatch`` (default 10,000 rows), and by
``spark.sql.execution.arrow.maxBytesPerBatch`` where it applies. This page writes the
same cached DataFrame (``--rows`` rows, the six mixed columns) through the floor sink and
the ``file`` sink (Parquet) with batches of 2,000, 10,000 (Spark's default), 50,000 and
200,000 rows, each setting applied to the session just before its run (outside the
timing) and put back after it; interleaved runs, best of ``--runs``.

What it answers: whether a batch size other than Spark's default raises the floor (and so
every sink), which would become the documented setting. ``spark.python.worker.reuse``
(quixsinks' ``local_session`` and Spark's default: true) cannot change in a running
session and is not measured here.

Run: ``.venv/bin/python benchmarks/bench_floor.py [--rows N] [--quick]``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness import Bench, Case, Page
from harness.session import NOOP_FORMAT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"
SIZES = {"2k": 2_000, "50k": 50_000, "200k": 200_000}


def _noop(df: DataFrame, path: str) -> None:
    df.write.format(NOOP_FORMAT).mode("append").save()


def _parquet(df: DataFrame, path: str) -> None:
    df.write.format("file").mode("append").option("path", path).save()


def _with_records(spark: SparkSession, records: int) -> tuple[Callable[[str], None], ...]:
    before: dict[str, str | None] = {}

    def setup(path: str) -> None:
        before[RECORDS] = spark.conf.get(RECORDS, None)
        spark.conf.set(RECORDS, str(records))

    def cleanup(path: str) -> None:
        value = before.pop(RECORDS, None)
        if value is None:
            spark.conf.unset(RECORDS)
        else:
            spark.conf.set(RECORDS, value)

    return setup, cleanup


def cases(bench: Bench) -> list[Case]:
    spark = bench.spark
    assert spark is not None
    bench.info["arrow_defaults"] = {
        key: spark.conf.get(key, None)
        for key in (RECORDS, "spark.sql.execution.arrow.maxBytesPerBatch")
    }
    found = [Case("file-parquet", _parquet, "`file` sink, Parquet, Spark's default batches")]
    for label, records in SIZES.items():
        setup, cleanup = _with_records(spark, records)
        found.append(
            Case(
                f"noop-arrow-{label}",
                _noop,
                f"the floor with maxRecordsPerBatch={records:_}",
                count_rows=None,
                setup=setup,
                cleanup=cleanup,
            )
        )
        setup, cleanup = _with_records(spark, records)
        found.append(
            Case(
                f"file-parquet-{label}",
                _parquet,
                f"`file` sink, Parquet, maxRecordsPerBatch={records:_}",
                setup=setup,
                cleanup=cleanup,
            )
        )
    return found


NAMES = ["file-parquet"] + [
    f"{kind}-{label}" for label in SIZES for kind in ("noop-arrow", "file-parquet")
]

PAGE = Page(
    name="floor",
    title="quixsinks floor: Arrow batch sizes of Spark's hand-over to Python",
    doc=__doc__ or "",
    cases=cases,
    case_names=NAMES,
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
