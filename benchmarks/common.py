"""Shared machinery of quixsinks' benchmarks: session, data, timing loop, result files.

A benchmark module (``benchmarks/bench_<name>.py``) is a script that:

1. parses its arguments with :func:`argument_parser` (``--rows``, ``--repeat``, ``--out``
   and whatever it adds);
2. opens one session with :func:`bench_session` (and ends it with :func:`close_session`)
   and builds the cached input with :func:`mixed_dataframe`;
3. lists its :class:`Case` objects, one of them the floor (the baseline every ratio is
   taken against), and runs them with :func:`run_cases`;
4. writes ``<out>/<name>.json`` and ``<out>/<name>.md`` with :func:`write_results` and
   prints the table.

Absolute timings depend on the machine; compare the ratios to the floor, which is
measured in the same session, a few seconds apart.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import quixsinks
from quixsinks.core.batch import SinkBatch
from quixsinks.core.sink import BatchingSink, CommonOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BENCH_DIR",
    "FLOOR",
    "NOOP_FORMAT",
    "Case",
    "CaseResult",
    "NoopArrowSink",
    "RelativeTarget",
    "argument_parser",
    "bench_session",
    "close_session",
    "count_output_rows",
    "floor_case",
    "import_or_install",
    "judge_targets",
    "machine_info",
    "markdown_table",
    "mixed_dataframe",
    "register_floor",
    "run_cases",
    "select_cases",
    "shared_session",
    "targets_markdown",
    "write_results",
]

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = BENCH_DIR / "results"

#: Columns of :func:`mixed_dataframe`, for documentation and checks.
MIXED_COLUMNS = ("key", "id", "value", "flag", "name", "timestamp")


# --------------------------------------------------------------------------- arguments


class BenchParser(argparse.ArgumentParser):
    """Parses a benchmark's arguments; ``--quick`` turns them into a smoke run.

    ``--quick``: a hundredth of the rows (at least 1,000), one run per case, results in a
    temporary folder (the committed ones stay) and no pip install of a missing peer (its
    case is reported as skipped, with the reason). The numbers of a quick run are not judged.
    """

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        parsed = super().parse_args(*args, **kwargs)
        if parsed.quick:
            parsed.rows = max(1_000, parsed.rows // 100)
            parsed.repeat = 0  # the warm-up run (which checks the rows) is the only run
            if parsed.out == DEFAULT_OUT:
                parsed.out = Path(tempfile.mkdtemp(prefix="quixsinks-bench-quick-"))
            if hasattr(parsed, "no_install"):
                parsed.no_install = True
        return parsed


def argument_parser(
    description: str, *, rows: int = 2_000_000, repeat: int = 3
) -> argparse.ArgumentParser:
    """The arguments every benchmark module accepts; add your own to the parser."""
    parser = BenchParser(description=description)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: a hundredth of the rows, one run per case, results to a temp folder, "
        "no installs",
    )
    parser.add_argument("--rows", type=int, default=rows, help=f"rows to write (default {rows:_})")
    parser.add_argument(
        "--repeat",
        type=int,
        default=repeat,
        help=f"timed runs per case after one warm-up run; the best counts (default {repeat})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="folder for <name>.json and <name>.md (default benchmarks/results)",
    )
    parser.add_argument("--cores", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions of the input DataFrame (default: --cores)",
    )
    parser.add_argument(
        "--cases",
        default=None,
        help="comma-separated case names to run (default: all); the floor case always runs",
    )
    parser.add_argument(
        "--tmp",
        type=Path,
        default=None,
        help="folder for the written outputs (default: a fresh temp folder)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit with status 1 when a case misses its target"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="keep quixsinks' per-batch INFO lines and Spark's progress bar",
    )
    return parser


# --------------------------------------------------------------------------- session + data


def bench_session(
    app_name: str, cores: int = 2, *, verbose: bool = False, **conf: str
) -> SparkSession:
    """quixsinks' local session (127.0.0.1, UI off, Python workers reused), for benchmarks.

    Unless ``verbose``, the console progress bar is off and quixsinks' Python workers
    log at WARNING (they inherit ``QUIXSINKS_LOG_LEVEL`` from this process), so the
    timing lines stay readable. End it with :func:`close_session`, not ``spark.stop()``.

    Inside :func:`shared_session` (the quick runner, ``benchmarks/quick.py``) this returns
    the running shared session instead of starting one: settings that can change at run
    time are set (and put back by :func:`close_session`), and a setting that cannot
    (``spark.jars``, the driver's memory, ``local[cores]``) must already have the requested
    value, else RuntimeError.
    """
    settings = _session_settings(verbose, conf)
    if _shared is not None:
        return _shared.join(cores, settings)
    from quixsinks.spark.session import local_session

    return local_session(app_name, cores, **settings)


def close_session(spark: SparkSession) -> None:
    """End a benchmark's session: ``spark.stop()``, or, for the shared session of
    :func:`shared_session`, drop every cached DataFrame and put back the settings the
    benchmark changed, and keep the session running for the next benchmark."""
    if _shared is not None and spark is _shared.spark:
        _shared.release()
    else:
        spark.stop()


def _session_settings(verbose: bool, conf: Mapping[str, str]) -> dict[str, str]:
    settings = {"spark.driver.memory": "2g"}
    if not verbose:
        os.environ.setdefault("QUIXSINKS_LOG_LEVEL", "WARNING")
        settings["spark.ui.showConsoleProgress"] = "false"
    settings.update(conf)
    return settings


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
                    "session with it (a benchmark's session_conf())"
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
    block ends (then it is stopped): several benchmarks' ``main()`` run in turn in one
    process pay for the JVM and the Python workers once (``benchmarks/quick.py``).

    ``conf`` holds the settings a running session cannot change that some benchmark
    needs (its ``session_conf()``, e.g. ``spark.jars``).
    """
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

    The DataFrame is cached and counted here so that no timed write pays for
    generating it.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    df = spark.range(0, rows, 1, partitions).select(
        F.concat(F.lit("k"), (F.col("id") % 1000).cast("string")).alias("key"),
        F.col("id"),
        (F.col("id").cast("double") / F.lit(7.0)).alias("value"),
        (F.col("id") % 2 == 0).alias("flag"),
        F.substring(F.md5(F.col("id").cast("string")), 1, 12).alias("name"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id")).alias("timestamp"),
    )
    df = df.persist(StorageLevel.MEMORY_ONLY)
    counted = df.count()
    if counted != rows:
        raise RuntimeError(f"cached DataFrame has {counted} rows, expected {rows}")
    return df


# --------------------------------------------------------------------------- cases


def count_output_rows(path: str) -> int:
    """Rows in what a writer left at ``path`` (a file or a folder of part files).

    Files and folders whose names start with ``_`` or ``.`` are skipped, as Spark and
    pyarrow readers skip them. Parquet rows come from the footers; JSON Lines and CSV
    rows are counted as lines (subtract header lines yourself).
    """
    import pyarrow.parquet as pq

    def rows_in(file: Path) -> int:
        if ".parquet" in file.name:
            return int(pq.read_metadata(file).num_rows)
        lines = 0
        with open(file, "rb") as f:
            while chunk := f.read(1 << 24):
                lines += chunk.count(b"\n")
        return lines

    root = Path(path)
    if root.is_file():
        return rows_in(root)
    total = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in files:
            if name.startswith(("_", ".")) or name.endswith(".crc"):
                continue
            total += rows_in(Path(folder) / name)
    return total


@dataclass(frozen=True)
class Case:
    """One way of writing the whole input DataFrame.

    Attributes:
        name: short id, e.g. ``file-parquet``.
        write: ``write(df, path)`` writes the DataFrame; ``path`` is fresh and absent.
        description: what the case measures (goes into the JSON).
        target: the ratio to the floor this case must reach, or None.
        count_rows: after the warm-up run, ``count_rows(path)`` must give the number
            of rows written (default :func:`count_output_rows`); None for sinks that
            write nothing.
        setup: ``setup(path)`` runs before each run, outside the timing (e.g. create
            an empty table named after ``path``); None: nothing.
        cleanup: ``cleanup(path)`` runs after each run (and after the row check),
            outside the timing (e.g. drop that table); None: nothing.
        rows: the rows this case writes when it is not the whole input (e.g. a slow
            row-by-row client timed on a sample); None: ``run_cases``' ``rows``.
            Its rows/s and ratios use its own row count.
    """

    name: str
    write: Callable[[DataFrame, str], None]
    description: str = ""
    target: float | None = None
    count_rows: Callable[[str], int] | None = count_output_rows
    setup: Callable[[str], None] | None = None
    cleanup: Callable[[str], None] | None = None
    rows: int | None = None


@dataclass
class CaseResult:
    """The timings of one case and what they give.

    Attributes:
        seconds: every timed run, in round order.
        best_seconds, rows_per_s: the best (minimum) run and rows / that time.
        ratio_to_floor: floor's best seconds / this case's best seconds (the headline).
        round_ratios, median_ratio_to_floor: the same ratio per round (each run against
            the floor's run of the same round) and its median: steadier than the best
            on a busy machine, reported for judging noise.
        target, passed: the ratio this case must reach and whether ``ratio_to_floor`` did.
        rows: the rows the case wrote per run (``Case.rows``, else all of them).
    """

    name: str
    description: str
    seconds: list[float] = field(default_factory=list)
    warmup_seconds: float | None = None
    rows_checked: int | None = None
    best_seconds: float = 0.0
    median_seconds: float = 0.0
    rows_per_s: float = 0.0
    ratio_to_floor: float | None = None
    round_ratios: list[float] = field(default_factory=list)
    median_ratio_to_floor: float | None = None
    target: float | None = None
    passed: bool | None = None
    rows: int | None = None


def select_cases(cases: Sequence[Case], names: str | None, *, floor: str) -> list[Case]:
    """The cases named in ``names`` (comma-separated; None: all), always with the floor."""
    if not names:
        return list(cases)
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = wanted - {c.name for c in cases}
    if unknown:
        raise SystemExit(
            f"unknown case(s) {', '.join(sorted(unknown))}; "
            f"cases: {', '.join(c.name for c in cases)}"
        )
    return [c for c in cases if c.name in wanted or c.name == floor]


def _timed(case: Case, df: DataFrame, workdir: Path, run: str) -> tuple[float, str]:
    path = str(workdir / f"{case.name}-{run}")
    if case.setup is not None:
        case.setup(path)
    started = time.perf_counter()
    case.write(df, path)
    return time.perf_counter() - started, path


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)
    # sinks writing one file keep their state beside it (e.g. csvfile's .<name>.quixsinks/)
    parent, name = os.path.split(path)
    for sibling in os.listdir(parent):
        if sibling.startswith(f".{name}"):
            _remove(os.path.join(parent, sibling))


def _cleanup(case: Case, path: str) -> None:
    try:
        if case.cleanup is not None:
            case.cleanup(path)
    finally:
        _remove(path)


def run_cases(
    df: DataFrame,
    cases: Sequence[Case],
    *,
    floor: str,
    rows: int,
    repeat: int,
    workdir: Path | None = None,
    log: Callable[[str], None] = print,
) -> list[CaseResult]:
    """Time every case: one warm-up run each, then ``repeat`` rounds over all cases
    (``repeat=0``, a ``--quick`` smoke run: the warm-up's time is the one reported).

    Rounds interleave the cases (a, b, c, a, b, c, ...) so that drift of the machine
    hits every case alike. Each run writes into a fresh path that is deleted right
    after (and ``Case.cleanup`` runs). The best (minimum) time counts; ``ratio_to_floor``
    is the case's rows/s as a fraction of the floor's (= floor seconds / case seconds
    when both write ``rows`` rows).
    """
    if floor not in {c.name for c in cases}:
        raise ValueError(f"the floor case {floor!r} is not among the cases")
    own_tmp = workdir is None
    base = Path(tempfile.mkdtemp(prefix="quixsinks-bench-")) if workdir is None else workdir
    base.mkdir(parents=True, exist_ok=True)
    results = {
        c.name: CaseResult(c.name, c.description, target=c.target, rows=c.rows or rows)
        for c in cases
    }
    try:
        for case in cases:
            seconds, path = _timed(case, df, base, "warmup")
            result = results[case.name]
            result.warmup_seconds = seconds
            expected = case.rows or rows
            try:
                if case.count_rows is not None:
                    result.rows_checked = case.count_rows(path)
                    if result.rows_checked != expected:
                        raise RuntimeError(
                            f"{case.name}: wrote {result.rows_checked} rows, expected {expected}"
                        )
            finally:
                _cleanup(case, path)
            log(f"  warm-up {case.name:<16} {seconds:8.2f} s")
            if repeat == 0:
                result.seconds.append(seconds)
        for round_ in range(repeat):
            for case in cases:
                seconds, path = _timed(case, df, base, f"run{round_}")
                _cleanup(case, path)
                results[case.name].seconds.append(seconds)
                log(f"  run {round_ + 1}/{repeat} {case.name:<16} {seconds:8.2f} s")
    finally:
        if own_tmp:
            shutil.rmtree(base, ignore_errors=True)

    floor_runs = results[floor].seconds
    floor_rows = results[floor].rows or rows
    for result in results.values():
        if not result.seconds:
            continue
        # rows scale: 1 when the case writes as many rows as the floor
        scale = (result.rows or rows) / floor_rows
        result.best_seconds = min(result.seconds)
        result.median_seconds = statistics.median(result.seconds)
        result.rows_per_s = (result.rows or rows) / result.best_seconds
        result.ratio_to_floor = scale * min(floor_runs) / result.best_seconds
        result.round_ratios = [
            scale * f / s for f, s in zip(floor_runs, result.seconds, strict=True)
        ]
        result.median_ratio_to_floor = statistics.median(result.round_ratios)
        if result.target is not None:
            result.passed = result.ratio_to_floor >= result.target
    return [results[c.name] for c in cases]


# --------------------------------------------------------------------------- the floor

#: Format name of :class:`NoopArrowSink` (Spark owns ``noop``).
NOOP_FORMAT = "quixsinks_bench_noop"
FLOOR = "noop-arrow"


class NoopArrowSink(BatchingSink[CommonOptions]):
    """Receives every SinkBatch and writes nothing: the floor of the Arrow path."""

    name: ClassVar[str] = NOOP_FORMAT

    def write(self, batch: SinkBatch) -> None:
        batch.num_rows  # noqa: B018 - touch the batch, nothing more


def register_floor(spark: SparkSession) -> None:
    """Register the no-op quixsinks sink as format ``quixsinks_bench_noop``.

    The sink is a :class:`~quixsinks.core.sink.BatchingSink` whose ``write`` only
    touches ``batch.num_rows``; Spark runs it through exactly the same DataSource Arrow
    writer as every quixsinks sink (transfer to Python, SinkBatch, retry policy,
    receipts, driver commit). This module is not importable in Spark's Python workers,
    so it is pickled by value.
    """
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    quixsinks.register(spark, NoopArrowSink)


def _write_floor(df: DataFrame, path: str) -> None:
    df.write.format(NOOP_FORMAT).mode("append").save()


def floor_case() -> Case:
    """The floor case, ``noop-arrow`` (call :func:`register_floor` on the session first)."""
    return Case(
        FLOOR,
        _write_floor,
        "quixsinks Arrow writer path with a do-nothing BatchingSink: JVM -> Python Arrow "
        "transfer, SinkBatch, receipts, commit (the floor)",
        count_rows=None,
    )


# --------------------------------------------------------------------------- results


def _java_version() -> str | None:
    try:
        done = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0] if lines else None


def _spark_setting(spark: SparkSession, key: str) -> str | None:
    try:
        value = spark.conf.get(key)
    except Exception:  # a setting without a default raises
        value = None
    return value if value is not None else spark.sparkContext.getConf().get(key, None)


def machine_info(spark: SparkSession | None = None, **extra: Any) -> dict[str, Any]:
    """Where and how the numbers were taken (versions, cores, date) plus ``extra``."""
    import pyarrow
    import pyspark

    info: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host_cores": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "java": _java_version(),
    }
    try:
        import quixsinks

        info["quixsinks"] = quixsinks.__version__
    except ImportError:  # pragma: no cover - the package is installed for benchmarks
        info["quixsinks"] = None
    if spark is not None:
        info["spark_master"] = spark.sparkContext.master
        info["spark_conf"] = {
            key: _spark_setting(spark, key)
            for key in (
                "spark.driver.memory",
                "spark.sql.execution.arrow.maxRecordsPerBatch",
                "spark.python.worker.reuse",
            )
        }
    info.update(extra)
    return info


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def markdown_table(
    results: Sequence[CaseResult],
    *,
    floor: str,
    rows: int | None = None,
    skipped: Mapping[str, str] | None = None,
) -> str:
    """The results as a markdown table: case | best s | rows/s | vs floor | target.

    A case that wrote another number of rows than ``rows`` is labelled with its own;
    ``skipped`` cases (name -> reason) are listed last, with their reason.
    """
    lines = [
        "| case | best s | rows/s | vs floor | target |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        label = r.name
        if rows is not None and r.rows is not None and r.rows != rows:
            label = f"{r.name} ({r.rows:,} rows)"
        ratio = "" if r.ratio_to_floor is None else f"{r.ratio_to_floor:.2f}"
        if r.name == floor:
            target = "(floor)"
        elif r.target is None:
            target = ""
        else:
            target = f">= {r.target:.2f} {'pass' if r.passed else 'FAIL'}"
        lines.append(
            f"| {label} | {r.best_seconds:.2f} | {_fmt_rate(r.rows_per_s)} | {ratio} | {target} |"
        )
    for name, reason in (skipped or {}).items():
        lines.append(f"| {name} | | | | skipped: {reason.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def write_results(
    out: Path,
    name: str,
    *,
    title: str,
    info: dict[str, Any],
    results: Sequence[CaseResult],
    floor: str,
    notes: str = "",
    skipped: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """Write ``<out>/<name>.json`` and ``<out>/<name>.md``; return the markdown.

    ``skipped`` (case name -> reason) goes into both files; ``extra`` entries are
    added to the JSON document (and replace the standard entries of the same name).
    """
    out.mkdir(parents=True, exist_ok=True)
    targeted = [r for r in results if r.target is not None]
    document = {
        "benchmark": name,
        "title": title,
        "machine": info,
        "floor": floor,
        "all_targets_passed": all(r.passed for r in targeted) if targeted else None,
        "cases": {r.name: asdict(r) for r in results},
    }
    if skipped:
        document["skipped"] = dict(skipped)
    document.update(extra or {})
    json_path = out / f"{name}.json"
    json_path.write_text(json.dumps(document, indent=2) + "\n")

    table = markdown_table(results, floor=floor, rows=info.get("rows"), skipped=skipped)
    setup = (
        f"{info.get('rows', '?'):_} rows, best of {info.get('repeat', '?')} runs after one "
        f"warm-up, {info.get('spark_master', '?')} on {info.get('host_cores')} host cores; "
        f"Python {info['python']}, PySpark {info['pyspark']}, pyarrow {info['pyarrow']}; "
        f"{info['date']}."
    )
    medians = ", ".join(
        f"{r.name} {r.median_ratio_to_floor:.2f}"
        for r in results
        if r.name != floor and r.median_ratio_to_floor is not None
    )
    markdown = f"# {title}\n\n{setup}\n\n{table}"
    if medians and len(results[0].seconds) > 1:
        markdown += f"\nMedian of the per-round ratios (noise check): {medians}.\n"
    if notes:
        markdown += f"\n{notes.strip()}\n"
    (out / f"{name}.md").write_text(markdown)
    return markdown


# --------------------------------------------------------------------------- cross-case targets

#: A target between two cases: (case, against, minimum ratio of their rows/s).
RelativeTarget = tuple[str, str, float]


def judge_targets(
    results: Sequence[CaseResult],
    targets: Sequence[RelativeTarget],
    skipped: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], bool | None]:
    """Each target's measured ratio of rows/s (best times, and the median per round).

    ``case`` must reach ``min_ratio`` times ``against``'s rows/s (each with its own row
    count, so a case timed on a sample compares by rows/s). Returns the judged targets
    (JSON-ready) and the verdict: False if one failed, True if all were measured and
    passed, None if some could not be measured (a case skipped or not run; its reason
    from ``skipped`` is the entry's ``note``).
    """
    by_name = {r.name: r for r in results}
    judged: list[dict[str, Any]] = []
    for case, against, minimum in targets:
        entry: dict[str, Any] = {
            "case": case,
            "against": against,
            "min_ratio": minimum,
            "ratio": None,
            "median_round_ratio": None,
            "passed": None,
        }
        a, b = by_name.get(case), by_name.get(against)
        if a is None or b is None or not a.seconds or not b.seconds:
            missing = case if a is None or not a.seconds else against
            entry["note"] = (skipped or {}).get(missing, f"{missing} not run")
            judged.append(entry)
            continue
        entry["ratio"] = a.rows_per_s / b.rows_per_s
        rows_a, rows_b = a.rows or 0, b.rows or 0
        entry["median_round_ratio"] = statistics.median(
            (rows_a / sa) / (rows_b / sb) for sa, sb in zip(a.seconds, b.seconds, strict=True)
        )
        entry["passed"] = entry["ratio"] >= minimum
        judged.append(entry)
    measured = [t["passed"] for t in judged if t["passed"] is not None]
    verdict: bool | None
    if not all(measured):
        verdict = False
    elif len(measured) == len(judged):
        verdict = True
    else:
        verdict = None
    return judged, verdict


def selected_cases(spec: str | None, names: Sequence[str]) -> set[str]:
    """The cases ``--cases a,b`` asks for among ``names`` (all when empty; the floor always
    runs); SystemExit naming the valid cases for an unknown one."""
    if not spec:
        return set(names)
    wanted = {n.strip() for n in spec.split(",") if n.strip()} - {FLOOR}
    unknown = wanted - set(names)
    if unknown:
        raise SystemExit(
            f"unknown case(s) {', '.join(sorted(unknown))}; cases: {', '.join((FLOOR, *names))}"
        )
    return wanted


def targets_markdown(judged: Sequence[dict[str, Any]]) -> str:
    """The judged targets of :func:`judge_targets` as a markdown table."""
    lines = [
        "| target | rows/s ratio | median per round | result |",
        "| --- | ---: | ---: | --- |",
    ]
    for t in judged:
        goal = f"{t['case']} >= {t['min_ratio']:g}x {t['against']}"
        if t["passed"] is None:
            lines.append(f"| {goal} | | | not measured: {t.get('note', '')} |")
            continue
        result = "pass" if t["passed"] else "FAIL"
        lines.append(f"| {goal} | {t['ratio']:.2f}x | {t['median_round_ratio']:.2f}x | {result} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- comparison libraries


def import_or_install(
    spec: str,
    load: Callable[[], Any],
    *,
    install: bool = True,
    timeout_s: float = 600,
    log: Callable[[str], None] = print,
) -> tuple[Any | None, str | None]:
    """``load()``'s result, pip-installing ``spec`` into this environment first if needed.

    For libraries a benchmark compares against (e.g. ``quixstreams[influxdb3]``), which
    the project does not depend on. ``load`` imports and returns what the benchmark uses
    (raising ImportError when it is missing). Returns ``(thing, None)`` or ``(None,
    reason)`` when it is missing and ``install`` is False, pip fails or takes longer than
    ``timeout_s``, or it still does not import: the caller reports the case as skipped.
    """
    import importlib

    try:
        return load(), None
    except ImportError as exc:
        missing = f"{type(exc).__name__}: {exc}"
    if not install:
        return None, f"not importable ({missing}) and installing was switched off"
    command = [sys.executable, "-m", "pip", "install", "-q", spec]
    log(f"installing '{spec}' into {sys.prefix} (first use; {' '.join(command)}) ...")
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return None, f"pip install '{spec}' did not finish in {timeout_s:.0f} s"
    if done.returncode != 0:
        lines = [
            line.strip()
            for line in (done.stderr or done.stdout).splitlines()
            if line.strip() and not line.startswith("WARNING: Location")
        ]
        detail = " ".join(lines[-3:]) if lines else "no output"
        return None, f"pip install '{spec}' failed (exit {done.returncode}): {detail}"
    log(f"installed '{spec}' in {time.perf_counter() - started:.0f} s")
    importlib.invalidate_caches()
    try:
        return load(), None
    except Exception as exc:  # installed, but it does not import (version conflict, ...)
        return None, f"'{spec}' installed but does not import: {exc}"
