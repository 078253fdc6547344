"""Timing: cases, the interleaved runs, ratios against the baseline of the same run, targets.

Every case writes the whole cached input (or its own sample of it) into a fresh path; one
warm-up run each (its output's rows are checked), then ``repeat`` rounds that interleave
the cases (a, b, c, a, b, c, ...) so that drift of the machine hits every case alike. The
best (minimum) time counts; ratios are taken against the baseline (the floor) measured in
the same session, a few seconds apart, which cancels the machine out.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import cpu

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: A target between two cases: (case, against, minimum ratio of their rows/s).
RelativeTarget = tuple[str, str, float]


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


def run_name(path: str) -> str:
    """A database or table name for one run, from the run's fresh path (``<case>-<run>``):
    ``bench_`` and the path's last part, lower case, ``_`` for anything not alphanumeric."""
    stem = "".join(c if c.isalnum() else "_" for c in Path(path).name.lower())
    return f"bench_{stem}"


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
            write nothing or are checked otherwise.
        setup: ``setup(path)`` runs before each run, outside the timing (e.g. create
            an empty table named after ``path``); None: nothing.
        cleanup: ``cleanup(path)`` runs after each run (and after the row check),
            outside the timing (e.g. drop that table); None: nothing.
        rows: the rows this case writes when it is not the whole input (e.g. a slow
            row-by-row client timed on a sample); None: all of them. Its rows/s and
            ratios use its own row count.
    """

    name: str
    write: Callable[[DataFrame, str], None]
    description: str = ""
    target: float | None = None
    count_rows: Callable[[str], int] | None = count_output_rows
    setup: Callable[[str], None] | None = None
    cleanup: Callable[[str], None] | None = None
    rows: int | None = None


class Destination:
    """Where some cases write: made fresh before each run, its rows counted after the
    warm-up, cleaned after each run (all outside the timing). Pages subclass it for their
    server (a table, a database, a topic per run, named after the run's ``path``)."""

    def fresh(self, path: str) -> None:
        """Before each run (default: nothing)."""

    def count_rows(self, path: str) -> int:
        raise NotImplementedError

    def cleanup(self, path: str) -> None:
        """After each run (default: nothing)."""

    def case(
        self, name: str, write: Callable[[DataFrame, str], None], description: str, **more: Any
    ) -> Case:
        """A case writing here; ``more``: other :class:`Case` fields (they win)."""
        return Case(
            name,
            write,
            description,
            count_rows=more.pop("count_rows", self.count_rows),
            setup=more.pop("setup", self.fresh),
            cleanup=more.pop("cleanup", self.cleanup),
            **more,
        )


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
        cpu: per timed run (the warm-up of a ``--quick`` run), the CPU seconds it cost
            (:mod:`harness.cpu`): ``driver`` (this process), ``jvm`` (Spark's),
            ``workers`` (its Python workers), ``others`` (servers and tools this process
            started), ``total``; ``cpu_s``: the median run's total.
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
    cpu: list[dict[str, float]] = field(default_factory=list)
    cpu_s: float | None = None


def selected_cases(spec: str | None, names: Sequence[str], *, floor: str) -> set[str]:
    """The cases ``--cases a,b`` asks for among ``names`` (all when empty; the floor always
    runs); SystemExit naming the valid cases for an unknown one."""
    if not spec:
        return {*names, floor}
    wanted = {n.strip() for n in spec.split(",") if n.strip()}
    unknown = wanted - {*names, floor}
    if unknown:
        raise SystemExit(
            f"unknown case(s) {', '.join(sorted(unknown))}; cases: {', '.join((floor, *names))}"
        )
    return wanted | {floor}


def _timed(
    case: Case, df: DataFrame, workdir: Path, run: str
) -> tuple[float, str, dict[str, float]]:
    """One run of ``case``: its seconds, its path and the CPU seconds it cost."""
    path = str(workdir / f"{case.name}-{run}")
    if case.setup is not None:
        case.setup(path)
    cpu_before = cpu.sample()
    started = time.perf_counter()
    case.write(df, path)
    seconds = time.perf_counter() - started
    used = cpu.sample() - cpu_before
    return seconds, path, used.as_dict()


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


def cleanup_run(case: Case, path: str) -> None:
    """After a run of ``case``: ``case.cleanup(path)``, then ``path`` removed."""
    try:
        if case.cleanup is not None:
            case.cleanup(path)
    finally:
        _remove(path)


def check_rows(case: Case, path: str, expected: int) -> int | None:
    """``case.count_rows(path)``, which must be ``expected`` (RuntimeError otherwise)."""
    if case.count_rows is None:
        return None
    counted = case.count_rows(path)
    if counted != expected:
        raise RuntimeError(f"{case.name}: wrote {counted} rows, expected {expected}")
    return counted


def run_cases(
    df: DataFrame,
    cases: Sequence[Case],
    *,
    floor: str,
    rows: int,
    repeat: int,
    workdir: Path | None = None,
    log: Callable[[str], None] = print,
    before_run: Callable[[], None] | None = None,
) -> list[CaseResult]:
    """Time every case: one warm-up run each, then ``repeat`` rounds over all cases
    (``repeat=0``, a ``--quick`` smoke run: the warm-up's time is the one reported).
    ``before_run`` runs before each timed run (not in a smoke run), outside the timing.

    Each run writes into a fresh path that is deleted right after (and ``Case.cleanup``
    runs). ``ratio_to_floor`` is the case's rows/s as a fraction of the floor's
    (= floor seconds / case seconds when both write ``rows`` rows).
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
            seconds, path, used = _timed(case, df, base, "warmup")
            result = results[case.name]
            result.warmup_seconds = seconds
            try:
                result.rows_checked = check_rows(case, path, case.rows or rows)
            finally:
                cleanup_run(case, path)
            log(f"  warm-up {case.name:<16} {seconds:8.2f} s")
            if repeat == 0:
                result.seconds.append(seconds)
                result.cpu.append(used)
        for round_ in range(repeat):
            for case in cases:
                if before_run is not None:
                    before_run()
                seconds, path, cpu = _timed(case, df, base, f"run{round_}")
                cleanup_run(case, path)
                results[case.name].seconds.append(seconds)
                results[case.name].cpu.append(cpu)
                log(f"  run {round_ + 1}/{repeat} {case.name:<16} {seconds:8.2f} s")
    finally:
        if own_tmp:
            shutil.rmtree(base, ignore_errors=True)
    _ratios(results, floor, rows)
    return [results[c.name] for c in cases]


def _ratios(results: Mapping[str, CaseResult], floor: str, rows: int) -> None:
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
        if result.cpu:
            result.cpu_s = statistics.median(c["total"] for c in result.cpu)
        if result.target is not None:
            result.passed = result.ratio_to_floor >= result.target


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
