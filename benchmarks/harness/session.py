"""The Spark session, the cached input and the floor.

:func:`bench_session` starts quixsinks' local session (127.0.0.1, UI off, Python workers
reused), or, inside :func:`shared_session` (the quick runner, ``benchmarks/quick.py``),
hands out the one running session, so that several benchmarks run in one process pay for
the JVM and the Python workers once. End it with :func:`close_session`, never
``spark.stop()``.

The floor, ``noop-arrow``, is :class:`NoopArrowSink`: a quixsinks ``BatchingSink`` whose
``write`` only touches the batch. It runs exactly the Arrow writer path of every quixsinks
sink (JVM to Python Arrow transfer, SinkBatch, retry policy, receipts, driver commit) and
nothing else: the baseline every ratio of a sink is taken against.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import quixsinks
from quixsinks.core.batch import SinkBatch
from quixsinks.core.sink import BatchingSink, CommonOptions

from .timing import Case

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark.sql import DataFrame, SparkSession

#: Columns of :func:`mixed_dataframe`, for documentation and checks.
MIXED_COLUMNS = ("key", "id", "value", "flag", "name", "timestamp")
#: Format name of :class:`NoopArrowSink` (Spark owns ``noop``).
NOOP_FORMAT = "quixsinks_bench_noop"
FLOOR = "noop-arrow"
#: the folder of the pages and of this package
BENCHMARKS = Path(__file__).resolve().parents[1]


def bench_session(
    app_name: str, cores: int = 2, *, verbose: bool = False, **conf: str
) -> SparkSession:
    """quixsinks' local session for a benchmark, or the shared one (see the module).

    Unless ``verbose``, the console progress bar is off and quixsinks' Python workers
    log at WARNING (they inherit ``QUIXSINKS_LOG_LEVEL`` from this process). Inside
    :func:`shared_session`, settings that can change at run time are set (and put back
    by :func:`close_session`); a setting that cannot (``spark.jars``, the driver's
    memory, ``local[cores]``) must already have the requested value, else RuntimeError.
    """
    settings = {"spark.driver.memory": "2g"}
    if not verbose:
        os.environ.setdefault("QUIXSINKS_LOG_LEVEL", "WARNING")
        settings["spark.ui.showConsoleProgress"] = "false"
    settings.update(conf)
    if _shared is not None:
        return _shared.join(cores, settings)
    from quixsinks.spark.session import local_session

    return local_session(app_name, cores, **settings)


def close_session(spark: SparkSession) -> None:
    """End a benchmark's session: ``spark.stop()``, or, for the shared session, drop
    every cached DataFrame, put back the settings the benchmark changed and keep it
    running for the next benchmark."""
    if _shared is not None and spark is _shared.spark:
        _shared.release()
    else:
        spark.stop()


@dataclass
class _SharedSession:
    """The session :func:`bench_session` hands out while :func:`shared_session` is open."""

    spark: SparkSession
    #: run-time settings the current benchmark changed -> their value before (None: unset)
    changed: dict[str, str | None] = field(default_factory=dict)

    def join(self, cores: int, settings: Mapping[str, str]) -> SparkSession:
        spark = self.spark
        master = spark.sparkContext.master
        if master != f"local[{cores}]":
            raise RuntimeError(
                f"the shared session runs {master}; this benchmark asks for local[{cores}]"
            )
        runtime = {key: value for key, value in settings.items() if spark.conf.isModifiable(key)}
        for key, value in settings.items():
            current = spark.sparkContext.getConf().get(key, None)
            if key not in runtime and current != value:
                raise RuntimeError(
                    f"the shared session has {key}={current!r} and this benchmark asks for "
                    f"{value!r}, which a running session cannot change: start the shared "
                    "session with it (the page's session_conf)"
                )
        for key, value in runtime.items():
            self.changed.setdefault(key, spark.conf.get(key, None))
            spark.conf.set(key, value)
        return spark

    def release(self) -> None:
        self.spark.catalog.clearCache()
        for key, value in self.changed.items():
            if value is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, value)
        self.changed.clear()


_shared: _SharedSession | None = None


@contextlib.contextmanager
def shared_session(cores: int = 2, *, verbose: bool = False, **conf: str) -> Iterator[SparkSession]:
    """One session that every :func:`bench_session` call in this process returns until the
    block ends (then it is stopped). ``conf`` holds the settings a running session cannot
    change that some benchmark needs (its page's ``session_conf``, e.g. ``spark.jars``)."""
    global _shared
    if _shared is not None:
        raise RuntimeError("a shared benchmark session is already open")
    spark = bench_session("quixsinks-bench-shared", cores, verbose=verbose, **conf)
    _shared = _SharedSession(spark)
    try:
        yield spark
    finally:
        _shared = None
        spark.stop()


def mixed_dataframe(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    """``rows`` rows of six mixed columns, cached and materialised.

    Columns: ``key`` string (1,000 distinct, ``k0``..``k999``), ``id`` bigint,
    ``value`` double, ``flag`` boolean, ``name`` string of 12 hex characters and
    ``timestamp`` (one per second from 2023-11-14). quixsinks reads ``key`` as the
    record key, ``timestamp`` as its time and the other four as its value.
    """
    from pyspark.sql import functions as F

    df = spark.range(0, rows, 1, partitions).select(
        F.concat(F.lit("k"), (F.col("id") % 1000).cast("string")).alias("key"),
        F.col("id"),
        (F.col("id").cast("double") / F.lit(7.0)).alias("value"),
        (F.col("id") % 2 == 0).alias("flag"),
        F.substring(F.md5(F.col("id").cast("string")), 1, 12).alias("name"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id")).alias("timestamp"),
    )
    return cached(df, rows)


def cached(df: DataFrame, rows: int) -> DataFrame:
    """``df`` persisted in memory and counted (which must give ``rows``), so that no timed
    write pays for generating it."""
    from pyspark import StorageLevel

    df = df.persist(StorageLevel.MEMORY_ONLY)
    counted = df.count()
    if counted != rows:
        raise RuntimeError(f"cached DataFrame has {counted} rows, expected {rows}")
    return df


class NoopArrowSink(BatchingSink[CommonOptions]):
    """Receives every SinkBatch and writes nothing: the floor of the Arrow path."""

    name: ClassVar[str] = NOOP_FORMAT

    def write(self, batch: SinkBatch) -> None:
        batch.num_rows  # noqa: B018 - touch the batch, nothing more


def register_sinks(spark: SparkSession, *sinks: type[BatchingSink[CommonOptions]]) -> None:
    """Register quixsinks' sinks, the floor and a page's own ``sinks`` on ``spark``.

    Spark's Python workers cannot import ``benchmarks/`` modules: the ones defining these
    classes or a base class of theirs (this one, a page imported by ``quick.py``, a module
    pages share) are pickled by value.
    """
    from pyspark import cloudpickle

    quixsinks.register(spark)
    for sink in (NoopArrowSink, *sinks):
        for cls in sink.__mro__:
            module = sys.modules[cls.__module__]
            # __main__ is pickled by value anyway
            if module.__name__ != "__main__" and _in_benchmarks(module):
                cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
        quixsinks.register(spark, sink)


def _in_benchmarks(module: ModuleType) -> bool:
    """Whether ``module`` is a file of ``benchmarks/`` (which workers cannot import)."""
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve().is_relative_to(BENCHMARKS)


def wake_workers(spark: SparkSession, partitions: int) -> None:
    """Tiny writes of ``partitions`` tasks through the floor's sink and a built-in one:
    Spark's Python workers are back before a timed run.

    Spark kills a Python worker idle for a minute (``PythonWorkerFactory``, not
    configurable), and a page's driver-only cases (Quix's sinks, a server's own tool) often
    run longer than that: the Spark case after them, the floor first of all, would pay for
    starting new workers (2 to 3 s, 4 CPU-s on 2 cores, measured on the kinesis page).

    Spark keeps one pool of workers per environment of a data source's Python function:
    the sinks Spark's auto-discovery registered (quixsinks' built-ins) share one pool, the
    ones registered from this driver (the floor, a page's own sinks) another. A write
    through the floor alone left the built-ins' workers to die: the kinesis page's first
    sink case after Quix's started two new workers in every round (4.4 instead of 2.2
    CPU-s each). Both pools are woken.
    """
    df = spark.range(0, partitions, 1, partitions)
    df.write.format(NOOP_FORMAT).mode("append").save()
    with tempfile.TemporaryDirectory(prefix="quixsinks-wake-") as folder:
        writer = df.write.format("file").option("format", "json").option("path", folder)
        writer.mode("append").save()


def _write_floor(df: DataFrame, path: str) -> None:
    df.write.format(NOOP_FORMAT).mode("append").save()


def floor_case() -> Case:
    """The floor case, ``noop-arrow`` (:func:`register_sinks` registers its sink)."""
    return Case(
        FLOOR,
        _write_floor,
        "quixsinks Arrow writer path with a do-nothing BatchingSink: JVM -> Python Arrow "
        "transfer, SinkBatch, receipts, commit (the floor)",
        count_rows=None,
    )
