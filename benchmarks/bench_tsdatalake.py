"""Time-series data lake benchmark: tsdatalake vs Spark's partitioned Parquet writer.

``--rows`` rows (default 2M) of sensor readings whose timestamps spread over 48 hours,
written with hive columns year/month/day/hour (48 partitions) to local disk, through:

* ``spark-partitioned``: Spark's own ``partitionBy("year", "month", "day", "hour")
  .parquet(...)`` (JVM; the year..hour columns computed by Spark first): **the
  baseline** every ratio is taken against;
* ``tsdatalake``: the quixsinks sink (Hive paths, staged, published exactly once);
* ``file-parquet``: quixsinks' ``file`` sink, the same rows unpartitioned;
* ``quix-like``: Quix's QuixTSDataLakeSink's approach, re-implemented as a quixsinks
  BatchingSink (Quix's sink needs quixportal and a Quix workspace): every record becomes
  a Python dict, its hive path is computed per record from a datetime, rows are grouped
  in Python and each group becomes a Parquet file with a random uuid name;
* ``noop-arrow``: the quixsinks Arrow writer path with a do-nothing sink (JVM -> Python
  transfer), for reference.

Target (issue): ``tsdatalake`` >= 0.8x ``spark-partitioned``.

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_tsdatalake.py [--rows N]``.
"""

from __future__ import annotations

import datetime as dt
import io
import sys
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from harness import Case, Page, cached

from quixsinks.core.batch import SinkBatch
from quixsinks.core.options import option
from quixsinks.core.sink import BatchingSink, CommonOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BASELINE = "spark-partitioned"
HIVE = ("year", "month", "day", "hour")
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SPAN_MS = 48 * 3_600_000


def readings(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    """Cached sensor readings: sensor (100 distinct), id, temperature, humidity, ts_ms
    (integer epoch ms spread evenly over 48 hours)."""
    from pyspark.sql import functions as F

    step = max(1, SPAN_MS // max(1, rows))
    df = spark.range(0, rows, 1, partitions).select(
        F.concat(F.lit("s"), (F.col("id") % 100).cast("string")).alias("sensor"),
        F.col("id"),
        (F.lit(20.0) + (F.col("id") % 1000) / F.lit(100.0)).alias("temperature"),
        ((F.col("id") % 97) / F.lit(97.0)).alias("humidity"),
        (F.lit(BASE_MS) + F.col("id") * F.lit(step)).alias("ts_ms"),
    )
    return cached(df, rows)


def _tsdatalake(df: DataFrame, path: str) -> None:
    (
        df.write.format("tsdatalake")
        .mode("append")
        .option("path", path)
        .option("table_name", "readings")
        .option("hive_columns", ",".join(HIVE))
        .save()
    )


def _file_parquet(df: DataFrame, path: str) -> None:
    df.write.format("file").mode("append").option("path", path).option("format", "parquet").save()


def _spark_partitioned(df: DataFrame, path: str) -> None:
    from pyspark.sql import functions as F

    ts = F.timestamp_millis(F.col("ts_ms"))
    utc = F.to_utc_timestamp(ts, "UTC")
    (
        df.withColumn("year", F.date_format(utc, "yyyy"))
        .withColumn("month", F.date_format(utc, "MM"))
        .withColumn("day", F.date_format(utc, "dd"))
        .withColumn("hour", F.date_format(utc, "HH"))
        .write.mode("append")
        .partitionBy(*HIVE)
        .parquet(path)
    )


@dataclass(frozen=True, kw_only=True)
class QuixLikeOptions(CommonOptions):
    path: str = option(doc="output folder")


class QuixLikeLake(BatchingSink[QuixLikeOptions]):
    """QuixTSDataLakeSink's per-record approach (see the module docstring)."""

    name: ClassVar[str] = "quix_like_tsdatalake"
    options_class = QuixLikeOptions

    def write(self, batch: SinkBatch) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        root = self.options.path
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for item in batch:
            record = dict(item.value)
            when = dt.datetime.fromtimestamp(record["ts_ms"] / 1000, tz=dt.UTC)
            hive = (
                f"year={when.year:04d}/month={when.month:02d}/"
                f"day={when.day:02d}/hour={when.hour:02d}"
            )
            groups[hive].append(record)
        for hive, records in groups.items():
            table = pa.Table.from_pylist(records)
            out = io.BytesIO()
            pq.write_table(table, out)
            folder = Path(root) / "readings" / hive
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"data_{uuid.uuid4()}.parquet").write_bytes(out.getvalue())


def _quix_like(df: DataFrame, path: str) -> None:
    (
        df.write.format("quix_like_tsdatalake")
        .mode("append")
        .option("path", path)
        .option("key_column", "none")
        .option("timestamp_column", "none")
        .save()
    )


CASES = [
    Case(
        BASELINE,
        _spark_partitioned,
        "Spark's partitionBy(year, month, day, hour).parquet(): the baseline",
    ),
    Case(
        "tsdatalake",
        _tsdatalake,
        "quixsinks `tsdatalake`: hive columns year/month/day/hour, exactly-once publish",
        target=0.80,
    ),
    Case("file-parquet", _file_parquet, "quixsinks `file` sink, parquet, unpartitioned"),
    Case(
        "quix-like",
        _quix_like,
        "QuixTSDataLakeSink's approach: per-record dicts and datetimes, grouped in Python",
    ),
]

NOTES = """
Ratios are rows/s divided by `spark-partitioned`'s rows/s in the same session.
`spark-partitioned` never leaves the JVM; every quixsinks case pays the JVM -> Python
Arrow transfer (`noop-arrow` shows that cost alone). `quix-like` is a re-implementation
of Quix's per-record approach, not Quix's code (its sink needs quixportal and a Quix
workspace); it runs through the same Spark path, so the difference is the sink's own work.
"""


PAGE = Page(
    name="tsdatalake",
    title="quixsinks tsdatalake benchmark: Hive-partitioned Parquet vs Spark's writer",
    doc=__doc__ or "",
    cases=lambda bench: CASES,
    case_names=[c.name for c in CASES] + ["noop-arrow"],
    notes=NOTES,
    floor=BASELINE,
    data=readings,
    sinks=(QuixLikeLake,),
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
