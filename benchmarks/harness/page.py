"""A benchmark page and the one ``main`` that runs it.

A ``benchmarks/bench_<name>.py`` is a page: a docstring saying what is compared, its cases
(ours, the peers: Quix Streams' sink, Spark's writers, the destination's own tool as its
ceiling; the floor is added here) as small functions of a :class:`Bench`, and::

    PAGE = Page(name=..., title=..., doc=__doc__, cases=cases, ...)
    main = PAGE.main

:func:`run` does the rest, the same for every page: the arguments, the servers, the
session and its cached input, the sinks' registration, the interleaved runs, the targets,
``<out>/<name>.json`` and ``.md``, the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import cli, servers
from .results import machine_info, targets_markdown, write_results
from .session import (
    FLOOR,
    bench_session,
    close_session,
    floor_case,
    mixed_dataframe,
    register_sinks,
    wake_workers,
)
from .timing import Case, CaseResult, RelativeTarget, judge_targets, run_cases, selected_cases

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


def log(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class Page:
    """What one benchmark compares.

    Attributes:
        name: the results' file name (``<out>/<name>.json``).
        title: the heading of ``<name>.md``.
        doc: the page's docstring; its first line is ``--help``'s description.
        cases: ``cases(bench)`` returns the page's cases (the harness adds the floor); it
            may call ``bench.skip`` for a case it cannot run.
        case_names: every case the page can run, for ``--cases``.
        targets: relative targets, ``(case, against, minimum ratio of rows/s)``.
        notes: ``notes(bench)`` (or a string): the text under the table; the judged
            targets are put above it.
        servers: names from ``harness.servers.SERVERS`` the page writes into.
        rows, repeat: defaults of ``--rows`` and ``--runs``.
        floor: the baseline every ratio is taken against (default the floor).
        data: ``data(spark, rows, partitions)``, the cached input (default six mixed
            columns).
        sinks: the page's own BatchingSink classes to register.
        session_conf: ``session_conf(args)``, the settings a running session cannot change
            (``spark.jars``); ``args`` is None for the quick runner's shared session.
        arguments: ``arguments(parser)`` adds the page's own options.
        after: ``after(bench)`` runs after the timed runs, servers and session still up
            (a measurement of its own, e.g. a commit-time curve).
        measure: a page without Spark: ``measure(bench)`` returns its markdown and puts
            its JSON entries in ``bench.extra`` (``cases`` and the rest are unused).
    """

    name: str
    title: str
    doc: str
    cases: Callable[[Bench], Iterable[Case]] = lambda bench: ()
    case_names: Sequence[str] = ()
    targets: Sequence[RelativeTarget] = ()
    notes: Callable[[Bench], str] | str = ""
    servers: Sequence[str] = ()
    rows: int = 2_000_000
    repeat: int = 3
    floor: str = FLOOR
    data: Callable[[SparkSession, int, int], DataFrame] = mixed_dataframe
    sinks: Sequence[type[Any]] = ()
    session_conf: Callable[[argparse.Namespace | None], dict[str, str]] = lambda args: {}
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    after: Callable[[Bench], None] | None = None
    measure: Callable[[Bench], str] | None = None

    def main(self, argv: list[str] | None = None) -> int:
        """The page's ``main``: :func:`run` it."""
        return run(self, argv)


@dataclass
class Bench:
    """One run of a page: what its case functions get, and what they leave for the notes.

    Attributes:
        args: the parsed arguments (``rows``, ``repeat``, ``partitions``, ``quick``, ...).
        servers: the running servers the page named.
        workdir: a fresh folder for this run's files, deleted at the end.
        skipped: case -> why it did not run (in the table and the JSON).
        info: the page's facts for ``machine`` in the JSON (versions, settings).
        extra: the page's own entries of the JSON document.
        state: anything a case function leaves for ``notes``/``after``.
        results, judged: the timings and the judged targets, once run.
    """

    page: Page
    args: argparse.Namespace
    wanted: set[str]
    workdir: Path
    servers: dict[str, Any] = field(default_factory=dict)
    spark: SparkSession | None = None
    df: DataFrame | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    results: list[CaseResult] = field(default_factory=list)
    judged: list[dict[str, Any]] = field(default_factory=list)
    #: what a case function opens for the run (a proxy, a client): closed after the runs
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _arrow: pa.Table | None = None

    @property
    def rows(self) -> int:
        return int(self.args.rows)

    def arrow(self) -> pa.Table:
        """The cached input as one Arrow table in the driver (collected once, untimed)."""
        if self._arrow is None:
            assert self.df is not None
            self._arrow = self.df.toArrow()
        return self._arrow

    def json_bytes(self, columns: Sequence[str]) -> int:
        """Mean bytes of the compact JSON object of ``columns`` over the first 1,000 rows
        (what a sink sending JSON values puts on the wire per row); in ``info``."""
        import json

        sample = self.arrow().select(list(columns)).slice(0, 1000).to_pylist()
        size = round(sum(len(json.dumps(r, separators=(",", ":"))) for r in sample) / len(sample))
        self.info["value_bytes"] = size
        return size

    def wants(self, *names: str) -> bool:
        """Whether ``--cases`` asks for one of ``names``."""
        return bool(self.wanted & set(names))

    def skip(self, name: str, reason: str) -> None:
        """Report case ``name`` as skipped, with the reason."""
        if name in self.wanted:
            self.skipped[name] = reason
            log(f"skipping {name}: {reason}")

    def peer(self, cases: Sequence[str], module: str, attribute: str) -> Any | None:
        """``module.attribute`` of a peer library (Quix Streams' sink), or None when it is
        not installed: then ``cases`` are reported as skipped, with the reason. Never
        installs anything: the ``dev`` extra holds the peers."""
        if not self.wants(*cases):
            return None
        try:
            with warnings.catch_warnings():  # its dependencies' deprecation warnings
                warnings.simplefilter("ignore")
                with contextlib.suppress(ImportError):  # it adds an "always" filter on import
                    importlib.import_module("authlib.deprecate")
                warnings.simplefilter("ignore")
                loaded = getattr(importlib.import_module(module), attribute)
        except ImportError as exc:
            for name in cases:
                self.skip(name, f"{module} is not installed ({exc}; `pip install -e .[dev]`)")
            return None
        if module.startswith("quixstreams"):
            self.info.setdefault("quix", {})["quixstreams"] = importlib.metadata.version(
                "quixstreams"
            )
        return loaded

    def sampled(
        self,
        case: Case,
        load: Callable[[pa.Table], None],
        *,
        max_seconds: float = 60.0,
        sample: int = 100_000,
        probe: int = 20_000,
    ) -> Case:
        """``case`` of a slow, row-by-row peer, timed on all rows or on a sample.

        ``load(table)`` hands the peer the rows it writes (``case.write`` writes all it was
        loaded with). Unless ``--quix-rows`` fixes the number (or in a quick run, all
        rows), a probe run of ``probe`` rows (setup and cleanup untimed) estimates the
        time for all rows; above ``max_seconds`` the case is timed on the first ``sample``
        rows, compared by rows/s. The decision goes into ``info["quix"]``.
        """
        rows, arrow = self.rows, self.arrow()
        decision: dict[str, Any]
        if self.args.quix_rows is not None or self.args.quick:
            chosen = min(self.args.quix_rows or rows, rows)
            decision = {"decided_by": "--quix-rows" if self.args.quix_rows else "--quick"}
        else:
            size = min(rows, probe)
            load(arrow.slice(0, size))
            path = str(self.workdir / f"{case.name}-probe")
            if case.setup is not None:
                case.setup(path)
            started = time.perf_counter()
            try:
                case.write(self.df, path)  # type: ignore[arg-type]
            finally:
                seconds = time.perf_counter() - started
                if case.cleanup is not None:
                    case.cleanup(path)
            estimate = rows * seconds / size
            chosen = rows if estimate <= max_seconds else min(rows, sample)
            log(
                f"{case.name} probe: {size:_} rows in {seconds:.2f} s; {rows:_} rows would "
                f"take ~{estimate:.0f} s: timing it on {chosen:_} rows"
            )
            decision = {
                "decided_by": "probe",
                "probe_rows": size,
                "probe_seconds": round(seconds, 3),
                "estimated_seconds_for_all_rows": round(estimate, 1),
                "max_seconds": max_seconds,
            }
        load(arrow.slice(0, chosen))
        self.info.setdefault("quix", {}).update(rows=chosen, **decision)
        label = "" if chosen == rows else f" ({chosen:_} rows)"
        return dataclasses.replace(case, description=case.description + label, rows=chosen)

    def quix_note(self) -> str:
        """For the notes: how the row-by-row peer was timed, when it was sampled."""
        quix = self.info.get("quix", {})
        if not quix.get("rows") or quix["rows"] == self.rows:
            return ""
        return f"; timed on the first {quix['rows']:,} rows, its rows/s compared as is"

    def quix_version(self) -> str:
        return str(self.info.get("quix", {}).get("quixstreams", "(not run)"))


def run(page: Page, argv: list[str] | None = None) -> int:
    """Run ``page`` (see the module); the exit status (1 on a missed target with
    ``--strict``)."""
    args = cli.parse(
        page.doc.strip().splitlines()[0],
        argv,
        rows=page.rows,
        repeat=page.repeat,
        more=page.arguments,
    )
    wanted = selected_cases(args.cases, page.case_names, floor=page.floor)
    workdir = Path(tempfile.mkdtemp(prefix=f"quixsinks-bench-{page.name}-", dir=args.tmp))
    bench = Bench(page, args, wanted, workdir)
    try:
        if page.measure is not None:
            markdown = page.measure(bench)
            return _report(bench, markdown, [])
        for name in page.servers:
            reason = servers.missing(name)
            if reason is not None:
                log(f"cannot run the {page.name} benchmark: {reason}")
                return 1 if args.strict else 0
        with servers.servers_for(page.servers) as running, bench.stack:
            bench.servers = running
            _run_cases(bench)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    judged, verdict = judge_targets(bench.results, page.targets, bench.skipped)
    bench.judged = judged
    notes = page.notes(bench) if callable(page.notes) else page.notes
    if judged:
        notes = (
            f"Targets (issue), on the best times' rows/s:\n\n{targets_markdown(judged)}\n{notes}"
        )
        bench.extra = {"targets": judged, "all_targets_passed": verdict, **bench.extra}
    markdown = write_results(
        args.out,
        page.name,
        title=page.title,
        info=bench.info,
        results=bench.results,
        floor=page.floor,
        notes=notes,
        skipped=bench.skipped,
        extra=bench.extra,
    )
    failed = [r.name for r in bench.results if r.passed is False]
    failed += [f"{t['case']} vs {t['against']}" for t in judged if t["passed"] is False]
    return _report(bench, markdown, failed)


def _run_cases(bench: Bench) -> None:
    page, args = bench.page, bench.args
    conf = page.session_conf(args)
    spark = bench_session(f"quixsinks-bench-{page.name}", args.cores, verbose=args.verbose, **conf)
    bench.spark = spark
    try:
        register_sinks(spark, *page.sinks)
        log(f"building {args.rows:_} cached rows in {args.partitions} partitions ...")
        df = bench.df = page.data(spark, args.rows, args.partitions)
        cases = list(page.cases(bench))
        # the floor: first when it is the baseline, else for reference at the end
        cases.insert(0 if page.floor == FLOOR else len(cases), floor_case())
        cases = [c for c in cases if c.name in bench.wanted and c.name not in bench.skipped]
        bench._arrow = None  # the collected input is not needed while timing
        bench.results = run_cases(
            df,
            cases,
            floor=page.floor,
            rows=args.rows,
            repeat=args.repeat,
            workdir=bench.workdir,
            log=log,
            before_run=functools.partial(wake_workers, spark, args.partitions),
        )
        if page.after is not None:
            page.after(bench)
        bench.info = machine_info(
            spark,
            rows=args.rows,
            repeat=args.repeat,
            partitions=args.partitions,
            cores=args.cores,
            columns=dict(df.dtypes),
            **bench.info,
        )
        df.unpersist()
    finally:
        close_session(spark)


def _report(bench: Bench, markdown: str, failed: Sequence[str]) -> int:
    out, name = bench.args.out, bench.page.name
    print()
    print(markdown)
    print(f"wrote {out / (name + '.json')} and {out / (name + '.md')}")
    if failed:
        print(f"below target: {', '.join(failed)}", file=sys.stderr)
        return 1 if bench.args.strict else 0
    return 0


def write_measured(bench: Bench, document: Mapping[str, Any], markdown: str) -> None:
    """For a ``measure`` page: ``<out>/<name>.json`` (``document``) and ``.md``."""
    import json

    out = bench.args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{bench.page.name}.json").write_text(json.dumps(dict(document), indent=2) + "\n")
    (out / f"{bench.page.name}.md").write_text(markdown)


__all__ = ["Bench", "Page", "run", "write_measured"]
