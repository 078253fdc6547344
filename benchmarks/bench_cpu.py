"""CPU benchmark: where a write's time goes, in CPU seconds of Spark's JVM and its Python workers.

The other pages time writes; this one also counts the CPU each run costs, read from
``/proc/<pid>/stat`` of Spark's JVM (this process's ``java`` child) and every process
descending from it (the Python workers, which ``spark.python.worker.reuse`` keeps alive
between runs), before and after the write. Servers are not counted: the cases here write
local files.

It answers two questions of issue #31:

* **How far can a sink get to the floor?** When the floor keeps every core busy
  (``cores busy`` = CPU seconds / wall seconds, near ``--cores``), every CPU second a sink
  adds costs wall time, whatever it overlaps: the ratio to the floor cannot beat
  ``floor CPU / case CPU`` (the *CPU bound* column) unless the sink's own work gets
  cheaper.
* **Does reading ahead help?** ``read_ahead`` (every sink, on by default) lets a task read
  Spark's next batches while the sink encodes the last; it can only pay where a core is
  idle, e.g. one partition on two cores (the ``-1p`` cases, with ``-nora`` beside them:
  ``read_ahead=false``).

Cases (the six mixed columns of the other pages): the floor, ``file`` Parquet and JSON,
``csvfile``, ``iceberg`` (a local SQL catalog), ``tsdatalake`` (hourly Hive partitions),
``influxdb3-lp`` (the ``influxdb3`` sink up to the request body: line protocol in Arrow,
bodies of 10,000 lines, as ``bench_influxdb3``'s ``lp-generation``, with neither request
nor server), Spark's own Parquet writer; and on one partition the floor, ``file`` Parquet
and ``iceberg`` with and without read-ahead.

Run: ``.venv/bin/python benchmarks/bench_cpu.py [--rows N] [--quick]``.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from harness import Bench, Case, Page
from harness.session import NOOP_FORMAT
from influx import NoSendSink, sink_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

FLOOR = "floor"
LINE_PROTOCOL_FORMAT = "influxdb3_cpu"


class LineProtocolSink(NoSendSink):
    """The influxdb3 sink up to the request body, without even a ping: this page starts no
    server."""

    name: ClassVar[str] = LINE_PROTOCOL_FORMAT
    ping: ClassVar[bool] = False


def _sink(fmt: str, partitions: int | None = None, **options: str) -> Callable[..., None]:
    def write(df: DataFrame, path: str) -> None:
        if partitions is not None:
            df = df.coalesce(partitions)
        extra = {key: value.format(path=path) for key, value in options.items()}
        df.write.format(fmt).mode("append").options(**extra).save()

    return write


def _spark_parquet(df: DataFrame, path: str) -> None:
    df.write.mode("append").parquet(path)


def _files(path: str) -> int:
    from harness.timing import count_output_rows

    return count_output_rows(path)


def _iceberg_rows(path: str) -> int:
    from bench_iceberg import iceberg_rows

    return iceberg_rows(path)


ICEBERG = {"warehouse": "{path}", "table_name": "bench.events"}  # bench_iceberg's TABLE
LAKE = {
    "path": "{path}",
    "table_name": "readings",
    "hive_columns": "year,month,day,hour",
    "timestamp_column": "timestamp",
}
NO_READ_AHEAD = {"read_ahead": "false"}
#: bench_influxdb3's options; the host is never asked (no preflight, no request)
LINE_PROTOCOL = sink_options(host="http://127.0.0.1:9", token="unused", database="bench")

#: name -> (write, description, rows check)
SPECS: dict[str, tuple[Callable[..., None], str, Callable[[str], int] | None]] = {
    FLOOR: (_sink(NOOP_FORMAT), "the floor: a BatchingSink that writes nothing", None),
    "file-parquet": (_sink("file", path="{path}", format="parquet"), "`file`, Parquet", _files),
    "file-json": (_sink("file", path="{path}", format="json"), "`file`, JSON Lines", _files),
    "csvfile": (_sink("csvfile", path="{path}"), "`csvfile`", None),
    "iceberg": (_sink("iceberg", **ICEBERG), "`iceberg`, local SQL catalog", _iceberg_rows),
    "tsdatalake": (_sink("tsdatalake", **LAKE), "`tsdatalake`, hourly partitions", None),
    "influxdb3-lp": (
        _sink(LINE_PROTOCOL_FORMAT, **LINE_PROTOCOL),
        "`influxdb3` line protocol, no request",
        None,
    ),
    "spark-parquet": (_spark_parquet, "Spark's own Parquet writer (JVM only)", _files),
    "floor-1p": (_sink(NOOP_FORMAT, 1), "the floor, one partition", None),
    "floor-1p-nora": (
        _sink(NOOP_FORMAT, 1, **NO_READ_AHEAD),
        "the floor, one partition, read_ahead=false",
        None,
    ),
    "file-parquet-1p": (
        _sink("file", 1, path="{path}", format="parquet"),
        "`file` Parquet, one partition",
        _files,
    ),
    "file-parquet-1p-nora": (
        _sink("file", 1, path="{path}", format="parquet", **NO_READ_AHEAD),
        "`file` Parquet, one partition, read_ahead=false",
        _files,
    ),
    "iceberg-1p": (_sink("iceberg", 1, **ICEBERG), "`iceberg`, one partition", _iceberg_rows),
    "iceberg-1p-nora": (
        _sink("iceberg", 1, **ICEBERG, **NO_READ_AHEAD),
        "`iceberg`, one partition, read_ahead=false",
        _iceberg_rows,
    ),
}


def cases(bench: Bench) -> list[Case]:
    found = []
    for name, (write, description, count) in SPECS.items():
        found.append(Case(name, write, description, count_rows=count))
    return found


def notes(bench: Bench) -> str:
    """The CPU table: per case the median over its timed runs (the harness's CPU figures
    of each run, ``CaseResult.cpu``)."""
    results = {r.name: r for r in bench.results if r.cpu}
    if FLOOR not in results:
        return ""
    table: dict[str, dict[str, float]] = {}
    for name, result in results.items():
        jvm = statistics.median(run["jvm"] for run in result.cpu)
        workers = statistics.median(run["workers"] for run in result.cpu)
        wall = result.median_seconds or None
        table[name] = {
            "jvm_cpu_s": round(jvm, 3),
            "python_cpu_s": round(workers, 3),
            "cpu_s": round(jvm + workers, 3),
            "cores_busy": round((jvm + workers) / wall, 2) if wall else 0.0,
        }
    floor_cpu = table[FLOOR]["cpu_s"]
    for name, row in table.items():
        base = table["floor-1p"]["cpu_s"] if "-1p" in name and "floor-1p" in table else floor_cpu
        row["cpu_bound"] = round(base / row["cpu_s"], 3) if row["cpu_s"] else 0.0
    bench.extra["cpu"] = table
    lines = [
        "CPU seconds per run (median of the case's timed runs) of Spark's "
        "JVM and of its Python workers; *cores busy* = CPU seconds / median wall seconds; "
        "*CPU bound* = the floor's CPU seconds / the case's: what the case's ratio to the floor "
        "cannot beat once the floor keeps every core busy; for `-1p` cases both are against "
        "the one-partition floor, `floor-1p`.",
        "",
        "| case | JVM CPU s | Python CPU s | CPU s | cores busy | CPU bound | ratio to floor "
        "(median) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in table.items():
        result = results.get(name)
        base = results.get("floor-1p") if "-1p" in name else results.get(FLOOR)
        ratio = None
        if result and base and result.seconds and len(base.seconds) == len(result.seconds):
            ratio = statistics.median(
                b / r for b, r in zip(base.seconds, result.seconds, strict=True)
            )
        row["ratio_to_floor_median"] = None if ratio is None else round(ratio, 3)
        lines.append(
            f"| {name} | {row['jvm_cpu_s']:.2f} | {row['python_cpu_s']:.2f} | "
            f"{row['cpu_s']:.2f} | {row['cores_busy']:.2f} | {row['cpu_bound']:.2f} | "
            f"{'' if ratio is None else format(ratio, '.2f')} |"
        )
    return "\n".join(lines) + "\n"


PAGE = Page(
    name="cpu",
    title="quixsinks CPU: where a write's time goes, in Spark's JVM and its Python workers",
    doc=__doc__ or "",
    cases=cases,
    case_names=[name for name in SPECS if name != FLOOR],
    notes=notes,
    floor=FLOOR,
    repeat=4,
    sinks=(LineProtocolSink,),
)

main = PAGE.main


if __name__ == "__main__":
    sys.exit(main())
