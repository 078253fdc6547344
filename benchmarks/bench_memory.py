"""Memory benchmark: a sink's Python worker peak RSS at 2M and at 8M rows per partition.

A sink that holds on to its rows (or to anything per row: receipts, ids, buffers) grows
with its partition; one that streams them stays flat. For every sink, this page runs its
case of its own benchmark page (the same options, servers and checks: ``bench_redis``'s
``redis-string``, ``bench_postgresql``'s ``sink-exactly-once``, ...) on one partition of
``--rows`` rows and again of ``--large`` rows (default 2M and 8M; four times as many), and
reads the peak resident set size (``VmHWM``) of the Python workers Spark runs for it. The
floor (``noop-arrow``, a sink that writes nothing) shows what Spark's hand-over itself
holds.

Spark runs each task in a fresh Python worker (``spark.python.worker.reuse=false``, set
by this page; a reused worker would carry one run's peak into the next), forked by
``pyspark.daemon``; a thread of this process reads ``/proc/<pid>/status`` of every worker
descending from this process every 10 ms, so another Spark on the machine is not counted.
A worker that lives less than 10 ms may be missed, which no worker writing a partition
does. Three sinks run scaled down, still four times as many rows in the large run (the
table says how many): ``kinesis``, whose kinesalite takes about 5,000 rows a second here,
``mqtt`` (QoS 1 on one partition: 2M rows took about 8 minutes here, 8M would take half an
hour) and ``pubsub``, whose emulator keeps every message in its own heap until the row
check pulls them back, 1,000 per request.

Target (issue #31): peak RSS at ``--large`` rows <= 1.3x the peak at ``--rows``, for every
sink. ``rows_per_s`` of a case is its large run's rate (informational, one run).

Run: ``.venv/bin/python benchmarks/bench_memory.py [--rows N] [--large N] [--cases a,b]
[--keep]`` (``--keep``: the results keep the other cases of the earlier results file, each
marked with its run's date).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import Bench, Case, Page, cli, cpu, machine_info, servers, write_measured
from harness.page import log
from harness.session import bench_session, close_session, floor_case, register_sinks
from harness.timing import check_rows, cleanup_run

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

TITLE = "quixsinks memory: a sink's Python worker peak RSS, 2M vs 8M rows per partition"
FLOOR = "noop-arrow"
MAX_RATIO = 1.3


@dataclasses.dataclass(frozen=True)
class Subject:
    """A sink's case on its own page; ``scale`` divides the rows where the destination is
    slow here."""

    name: str
    page: str
    case: str
    scale: int = 1


SUBJECTS = (
    Subject("file-parquet", "bench_foundation", "file-parquet"),
    Subject("file-json", "bench_foundation", "file-json"),
    Subject("csvfile", "bench_foundation", "csvfile"),
    Subject("postgresql", "bench_postgresql", "sink-exactly-once"),
    Subject("redis", "bench_redis", "redis-string"),
    Subject("influxdb3", "bench_influxdb3", "influxdb3-e2e"),
    Subject("influxdb1", "bench_influxdb1", "influxdb1-e2e"),
    Subject("iceberg", "bench_iceberg", "iceberg"),
    Subject("tsdatalake", "bench_tsdatalake", "tsdatalake"),
    Subject("bigquery", "bench_bigquery", "bigquery"),
    Subject("pubsub", "bench_pubsub", "pubsub", scale=4),
    Subject("mqtt", "bench_mqtt", "mqtt", scale=20),
    Subject("kinesis", "bench_kinesis", "kinesis", scale=100),
)
CASE_NAMES = tuple(s.name for s in SUBJECTS)


class WorkerPeaks:
    """Peak RSS of this process's Spark Python workers, read from /proc while a block runs."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.root = os.getpid()
        self._ours: dict[int, bool] = {}  # pid -> a pyspark worker descending from us
        self._present: set[int] = set()  # the pids of the last listing
        self._peaks: dict[int, int] = {}  # pid -> its VmHWM, kB

    @contextmanager
    def watching(self) -> Iterator[WorkerPeaks]:
        self._peaks.clear()
        self._present.clear()  # not watched meanwhile: every pid is looked at afresh
        stop = threading.Event()
        thread = threading.Thread(target=self._poll, args=(stop,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()

    @property
    def peak_mb(self) -> float:
        return max(self._peaks.values(), default=0) / 1024

    @property
    def workers(self) -> int:
        return len(self._peaks)

    def _poll(self, stop: threading.Event) -> None:
        while True:
            for pid in self._pids():
                hwm = _status_kb(pid, "VmHWM")
                if hwm is not None and hwm > self._peaks.get(pid, 0):
                    self._peaks[pid] = hwm
            if stop.wait(self.interval):
                return

    def _pids(self) -> list[int]:
        # pids are reused (pid_max may be 32768): a pid absent from the previous listing
        # is a new process, looked at again
        present = {int(entry) for entry in os.listdir("/proc") if entry.isdigit()}
        for pid in present - self._present:
            self._ours[pid] = self._is_worker(pid)
        self._present = present
        return [pid for pid in present if self._ours.get(pid)]

    def _is_worker(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        if b"pyspark.daemon" not in cmdline and b"pyspark/daemon" not in cmdline:
            return False
        while pid > 1:  # a descendant of this process, not of another Spark
            parent = cpu.parent_of(pid)
            if parent is None:
                return False
            if parent == self.root:
                return True
            pid = parent
        return False


def _status_kb(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _page_bench(bench: Bench, module: Any, rows: int, workdir: Path) -> Bench:
    """A Bench of ``module``'s page for one partition of ``rows`` rows (its own arguments
    at their defaults), sharing this page's session."""
    page = module.PAGE
    argv = ["--rows", str(rows), "--partitions", "1", "--runs", "0", "--tmp", str(workdir)]
    args = cli.parse(
        page.doc.strip().splitlines()[0], argv, rows=rows, repeat=0, more=page.arguments
    )
    args.quick = bench.args.quick
    return Bench(page, args, set(), workdir, spark=bench.spark)


def run_subject(
    bench: Bench,
    subject: Subject,
    module: Any,
    sizes: Sequence[int],
    peaks: WorkerPeaks,
    running: dict[str, Any],
) -> list[dict[str, Any]]:
    """``subject`` (of page ``module``) on one partition of each of ``sizes`` rows
    (``running``: the page's servers): the peak worker RSS of each run. The page's cases
    are made once, on the first size's input."""
    workdir = bench.workdir / subject.name
    workdir.mkdir(parents=True, exist_ok=True)
    page_bench = _page_bench(bench, module, sizes[0], workdir)
    page_bench.wanted = {subject.case}
    spark = bench.spark
    assert spark is not None
    register_sinks(spark, *module.PAGE.sinks)
    runs = []
    case: Case | None = None
    with page_bench.stack:
        page_bench.servers = running
        for rows in sizes:
            log(f"{subject.name}: {rows:_} rows in one partition ...")
            df = page_bench.df = module.PAGE.data(spark, rows, 1)
            try:
                if case is None and subject.case == FLOOR:
                    case = floor_case()
                elif case is None:
                    # ceilings and peers built from the input get a 1,000-row sample: only
                    # the sink's own case runs here
                    page_bench._arrow = df.limit(1000).toArrow()
                    [case] = [c for c in module.PAGE.cases(page_bench) if c.name == subject.case]
                runs.append(_measured_run(case, df, rows, str(workdir / f"out-{rows}"), peaks))
            finally:
                df.unpersist()
    shutil.rmtree(workdir, ignore_errors=True)
    return runs


def _measured_run(
    case: Case, df: DataFrame, rows: int, path: str, peaks: WorkerPeaks
) -> dict[str, Any]:
    if case.setup is not None:
        case.setup(path)
    try:
        with peaks.watching():
            started = time.perf_counter()
            case.write(df, path)
            seconds = time.perf_counter() - started
        check_rows(case, path, rows)
    finally:
        cleanup_run(case, path)
    return {
        "rows": rows,
        "peak_rss_mb": round(peaks.peak_mb, 1),
        "workers": peaks.workers,
        "seconds": round(seconds, 3),
    }


def measure(bench: Bench) -> str:
    args = bench.args
    small, large = args.rows, args.large
    conf: dict[str, str] = {}
    if not args.quick:  # the quick runner's shared session keeps its workers
        conf = {"spark.python.worker.reuse": "false", "spark.driver.memory": "4g"}
    spark = bench.spark = bench_session(
        "quixsinks-bench-memory", args.cores, verbose=args.verbose, **conf
    )
    peaks = WorkerPeaks()
    cases: dict[str, Any] = {}
    failed: dict[str, str] = {}
    subjects = [Subject(FLOOR, "bench_foundation", FLOOR)]
    subjects += [s for s in SUBJECTS if s.name in bench.wanted]
    try:
        for subject in subjects:
            module = importlib.import_module(subject.page)
            reasons = [r for n in module.PAGE.servers if (r := servers.missing(n)) is not None]
            if reasons:
                bench.skip(subject.name, reasons[0])
                continue
            sizes = (small // subject.scale, large // subject.scale)
            try:
                with servers.servers_for(module.PAGE.servers) as up:
                    runs = run_subject(bench, subject, module, sizes, peaks, up)
                if not runs[0]["peak_rss_mb"]:
                    raise RuntimeError("no Python worker of this process seen")
            except Exception as exc:  # the other sinks still run; the page then fails
                log(f"{subject.name} failed: {exc!r}")
                failed[subject.name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                continue
            ratio = runs[1]["peak_rss_mb"] / runs[0]["peak_rss_mb"]
            cases[subject.name] = {
                "name": subject.name,
                "description": f"{subject.page}.py case {subject.case}",
                "small": runs[0],
                "large": runs[1],
                "ratio": round(ratio, 3),
                "rows_per_s": runs[1]["rows"] / runs[1]["seconds"],
                "passed": None if subject.name == FLOOR else ratio <= MAX_RATIO,
            }
        info = machine_info(spark, rows=small, large=large, partitions=1, **conf)
    finally:
        close_session(spark)
    if args.keep:
        cases = kept_cases(args.out / f"{PAGE.name}.json", cases)
    document = results_document(info, cases, bench.skipped, failed, small, large)
    text = markdown(document)
    write_measured(bench, document, text)
    if failed:
        raise RuntimeError(f"memory benchmark: {', '.join(failed)} failed (see the log)")
    return text


def results_document(
    info: dict[str, Any],
    cases: dict[str, Any],
    skipped: dict[str, str],
    failed: dict[str, str],
    small: int,
    large: int,
) -> dict[str, Any]:
    """The page's results file: the cases and the target judged on them."""
    measured = [c for n, c in cases.items() if n != FLOOR]
    worst = max(measured, key=lambda c: c["ratio"], default=None)
    floor = cases.get(FLOOR)
    return {
        "benchmark": PAGE.name,
        "title": TITLE,
        "machine": info,
        "floor": FLOOR,
        "cases": cases,
        "skipped": skipped,
        "failed": failed,
        "bars": {
            "value": "large.peak_rss_mb",
            "label": "peak RSS of the Python workers, MiB, large run (lower is better)",
        },
        "targets": [
            {
                "target": f"Python worker peak RSS flat (<= {MAX_RATIO}x) from "
                f"{small / 1e6:g}M to {large / 1e6:g}M rows per partition, every sink",
                "measured": "" if worst is None else f"worst {worst['name']} {worst['ratio']:.2f}x",
                "passed": None
                if worst is None
                else not failed and all(c["passed"] for c in measured),
                "why": ", ".join(
                    f"{c['name']} {c['ratio']:.2f}x" for c in measured if not c["passed"]
                )
                + (
                    f"; the floor itself (a sink that keeps nothing) {floor['ratio']:.2f}x"
                    if floor
                    else ""
                ),
                # what Spark's hand-over alone grows by: a bound no sink is asked to beat
                "floor_bound": floor["ratio"] if floor else None,
            }
        ],
    }


def kept_cases(earlier: Path, cases: dict[str, Any]) -> dict[str, Any]:
    """``cases``, with every case of the ``earlier`` results file that this run did not
    measure, marked with the date of the run that did; in the page's order."""
    import json

    if not earlier.is_file():
        return cases
    old = json.loads(earlier.read_text())
    merged = dict(cases)
    for name, case in old.get("cases", {}).items():
        if name not in merged:
            merged[name] = {**case, "date": case.get("date") or old["machine"].get("date")}
    order = [FLOOR, *CASE_NAMES]
    return {
        n: merged[n] for n in sorted(merged, key=lambda n: order.index(n) if n in order else 99)
    }


def markdown(document: dict[str, Any]) -> str:
    machine = document["machine"]
    lines = [
        f"# {document['title']}",
        "",
        f"One partition per run, local[{machine.get('cores', 2)}]; Python "
        f"{machine.get('python')}, PySpark {machine.get('pyspark')}, pyarrow "
        f"{machine.get('pyarrow')}; {machine.get('date')} (a case kept from an earlier run "
        "shows that run's date).",
        "",
        "| case | rows small / large | peak RSS MiB small | large | large / small | flat | run |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for name, case in document["cases"].items():
        small, large = case["small"], case["large"]
        flat = {True: "yes", False: "**no**", None: "(floor)"}[case["passed"]]
        run = str(case.get("date") or machine.get("date") or "")[:10]
        lines.append(
            f"| {name} | {small['rows']:,} / {large['rows']:,} | {small['peak_rss_mb']:.0f} "
            f"| {large['peak_rss_mb']:.0f} | {case['ratio']:.2f} | {flat} | {run} |"
        )
    for name, reason in document["skipped"].items():
        lines.append(f"| {name} | | | | | skipped: {reason} | |")
    for name, error in document["failed"].items():
        lines.append(f"| {name} | | | | | **failed**: {error.replace('|', '/')} | |")
    return "\n".join(lines) + "\n"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--large", type=int, default=8_000_000, help="rows of the large run (default 8M)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the cases of <out>/memory.json this run does not measure (with --cases)",
    )


PAGE = Page(
    name="memory",
    title=TITLE,
    doc=__doc__ or "",
    case_names=CASE_NAMES,
    rows=2_000_000,
    repeat=1,
    arguments=arguments,
    measure=measure,
)


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--quick" in argv and "--large" not in argv:
        argv += ["--large", str(4 * cli.QUICK_ROWS)]
    return PAGE.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
