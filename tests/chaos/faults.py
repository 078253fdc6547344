"""The faults of the matrix, and :func:`run_cell`: one sink under one fault, counted.

A cell writes the workload (input files of rows with unique ids, one file a micro-batch,
two partitions) into a fresh destination while the fault is injected, then restarts the
query from its checkpoint without the fault until it completes (at most
:data:`RECOVERY_RUNS` runs), then reads the destination back and counts the rows lost
and duplicated. :class:`CellResult.verdict` holds that against the sink's claimed
guarantee: ``exactly-once`` = nothing lost or duplicated; ``effectively exactly-once``
= nothing lost (a replay overwrites); ``at-least-once`` = nothing lost, and every
duplicate carries its original's dedupe id where the sink writes one. The hung-server and
disk-full faults must also make the faulty run fail (with a timeout / no-space error),
never hang or pass silently; a fault that never fired is no evidence and fails the cell.

The queries run in the caller's Spark session (its main thread starts them: a Python
data source cannot be found from another thread), the fault in a watcher thread; the
driver kill runs the query as a process of its own (``workload.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quixsinks.testing import kill_at_random

from ..integration.streams import write_input_files
from ..services.ack_faults import LostAckProxy
from ..services.blackhole import BlackHole
from .targets import Cell, Target
from .workload import stream

__all__ = ["FAULTS", "CellResult", "Fault", "run_cell"]

#: the workload: files (micro-batches) x rows
FILES, ROWS = 6, 400
#: runs of the restarted query, without the fault, before the cell is a violation
RECOVERY_RUNS = 3
#: a faulty run still going after this long is a hang
HANG_LIMIT = 240.0


@dataclass
class CellResult:
    """What one cell measured."""

    target: str
    fault: str
    guarantee: str
    rows: int = 0
    lost: int = 0
    duplicated: int = 0
    #: first lines of the errors the faulty runs ended with
    failures: list[str] = field(default_factory=list)
    #: what the fault did (kills, crashes, replies dropped...), and how many times
    injected: str = ""
    fired: int = 0
    #: at-least-once sinks with a dedupe id: duplicates left once a consumer drops the
    #: records whose dedupe id it saw (a duplicate without its original's id is a violation)
    after_dedupe: int | None = None
    recovery_runs: int = 0
    seconds: float = 0.0
    verdict: str = ""  # "ok", "violation: ...", or "not built: ..."
    leftovers: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok" or self.verdict.startswith("not built")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Runner:
    """Runs the cell's streaming query in the given Spark session."""

    def __init__(self, spark: Any, target: Target, cell: Cell) -> None:
        self.spark = spark
        self.target = target
        self.cell = cell

    def config(self, options: dict[str, str]) -> dict[str, Any]:
        return {
            "format": self.target.fmt,
            "options": options,
            "input": str(self.cell.workdir / "in"),
            "checkpoint": str(self.cell.workdir / "ck"),
        }

    def commits(self) -> int:
        """Micro-batches committed so far (Spark's checkpoint commit log)."""
        folder = self.cell.workdir / "ck" / "commits"
        return sum(1 for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else 0

    def files_committed(self) -> int:
        """Input files read by the committed micro-batches: the file source's log offset
        in the offsets of the last committed batch, plus one. Usually one file a batch, but
        a driver killed after the source logged a file and before the batch's offsets were
        written leaves that file to the restart's first batch, with the next one."""
        folder = self.cell.workdir / "ck"
        done = [int(p.name) for p in (folder / "commits").glob("*") if p.name.isdigit()]
        if not done:
            return 0
        offsets = (folder / "offsets" / str(max(done))).read_text(encoding="utf-8")
        return int(json.loads(offsets.splitlines()[-1])["logOffset"]) + 1

    def run(
        self,
        options: dict[str, str],
        during: Callable[[threading.Event], None] | None = None,
        limit: float = HANG_LIMIT,
    ) -> str | None:
        """Run the query to its end (``during`` in a thread meanwhile); the first line of
        its error, or None. A query still running after ``limit`` seconds is stopped and
        reported as a hang."""
        done = threading.Event()
        watcher = threading.Thread(target=during, args=(done,), daemon=True) if during else None
        query = stream(self.spark, self.config(options))
        if watcher is not None:
            watcher.start()
        try:
            finished = query.awaitTermination(timeout=limit)
        except Exception:  # the query failed: its exception() says why
            finished = True
        finally:
            done.set()
            if query.isActive:
                query.stop()
            if watcher is not None:
                watcher.join(timeout=120)
        if not finished:
            return f"HUNG: still running after {limit:.0f} s"
        error = query.exception()
        return None if error is None else _first_line(str(error))


class Fault(ABC):
    """One column of the matrix."""

    name: str
    title: str
    #: how it is injected, for docs/reliability.md
    how: str

    def not_built(self, target: Target) -> str | None:
        """Why this fault cannot be injected into ``target`` here, or None."""
        return target.not_built.get(self.name)

    @abstractmethod
    def inject(self, runner: Runner, options: dict[str, str], result: CellResult) -> None:
        """Run the query under the fault; record the faulty runs' errors in ``result``."""

    def check(self, result: CellResult) -> str | None:
        """A violation this fault's cells must not show besides lost/duplicated rows."""
        return None


class _WhileRunning(Fault):
    """A fault acted ``times`` times at random moments while the query runs: the first
    soon after the first committed micro-batch, the next ones shortly after."""

    times: int
    #: what ``fired`` counts, e.g. "worker(s) killed"
    done_text: str

    @abstractmethod
    def act(self, runner: Runner, rng: random.Random) -> bool:
        """Inject the fault once; whether it did."""

    def inject(self, runner: Runner, options: dict[str, str], result: CellResult) -> None:
        rng = random.Random(runner.cell.name)
        acted: list[bool] = []

        def during(done: threading.Event) -> None:
            while not done.is_set() and runner.commits() < 1:
                time.sleep(0.01)
            for _ in range(self.times):
                pause = rng.uniform(0.0, 0.2) if not acted else rng.uniform(0.05, 0.6)
                if done.wait(pause):
                    break
                acted.append(self.act(runner, rng))

        error = runner.run(options, during)
        if error:
            result.failures.append(error)
        result.fired = sum(acted)
        result.injected = f"{result.fired} {self.done_text}"


class DriverKill(Fault):
    name = "driver-kill"
    title = "driver SIGKILL"
    how = (
        "the query runs as a process of its own (`tests/chaos/workload.py`); its whole "
        "process group (driver, JVM, Python workers) is SIGKILLed at random moments after "
        "a micro-batch committed, twice, then restarted from the checkpoint"
    )

    def inject(self, runner: Runner, options: dict[str, str], result: CellResult) -> None:
        config = runner.cell.workdir / "job.json"
        config.write_text(json.dumps(runner.config(options)), encoding="utf-8")
        kills = kill_at_random(
            [sys.executable, "-m", "tests.chaos.workload", str(config)],
            runner.commits,
            kills=2,
            seed=random.Random(runner.cell.name).randrange(1 << 16),
            timeout=180,
            log_path=str(runner.cell.workdir / "job.log"),
        )
        result.injected, result.fired = f"{kills} kill(s)", kills


class WorkerKill(_WhileRunning):
    name = "worker-kill"
    title = "Python worker SIGKILL"
    how = (
        "a Spark Python worker of this process (a child of `pyspark.daemon`) is SIGKILLed "
        "at random moments while the query runs, three times; the task fails, and the "
        "query fails or Spark retries the task"
    )
    times = 3
    done_text = "worker(s) killed"

    def act(self, runner: Runner, rng: random.Random) -> bool:
        workers = python_workers()
        if not workers:
            return False
        try:
            os.kill(rng.choice(workers), signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True


class ServerCrash(_WhileRunning):
    name = "server-crash"
    title = "server crash + restart"
    how = (
        "the real server is crashed and restarted at once (PostgreSQL: `pg_ctl stop -m "
        "immediate`, which empties UNLOGGED tables in recovery; Redis: SIGKILL, restarted "
        "from its append-only file; bqemulator: SIGKILL, restarted on its DuckDB file, its "
        "uncommitted write streams lost) at random moments while the query runs, twice: between "
        "a task's staging and the driver's commit, or mid-write"
    )
    times = 2
    done_text = "crash(es)"

    def act(self, runner: Runner, rng: random.Random) -> bool:
        runner.target.crash()
        return True


class LostAck(Fault):
    name = "lost-ack"
    title = "lost acknowledgement"
    how = (
        "a TCP proxy between the sink and the server (`tests/services/ack_faults.py`) lets "
        "the server apply a request (a staging COMMIT, a PREPARE TRANSACTION...) and drops "
        "its answer, closing the connection, twice"
    )

    def inject(self, runner: Runner, options: dict[str, str], result: CellResult) -> None:
        assert runner.target.ack is not None
        trigger, after = runner.target.ack
        with LostAckProxy(*runner.target.endpoint()) as proxy:
            proxy.lose_reply_to(trigger, after=after, times=2)
            error = runner.run(runner.target.via(options, proxy.host, proxy.port))
        if error:
            result.failures.append(error)
        result.injected, result.fired = f"{proxy.lost} answer(s) dropped", proxy.lost

    def not_built(self, target: Target) -> str | None:
        return super().not_built(target) or (
            None if target.ack else "no request identified to drop the answer of"
        )


class HungServer(Fault):
    name = "hung-server"
    title = "hung server"
    how = (
        "the sink connects to a listener that accepts connections and never answers; the "
        "run must fail with a timeout error, never hang (a run still going after "
        f"{HANG_LIMIT:.0f} s is a violation); then the query runs against the real server"
    )

    def inject(self, runner: Runner, options: dict[str, str], result: CellResult) -> None:
        with BlackHole() as hole:
            pointed = runner.target.hung(
                {**options, **runner.target.impatient}, hole.host, hole.port
            )
            error = runner.run(pointed)
        result.failures.append(error or "no error")
        result.injected, result.fired = "every call to a black hole", 1

    def check(self, result: CellResult) -> str | None:
        error = result.failures[0] if result.failures else ""
        if error.startswith("HUNG") or error == "no error":
            return f"the run against a hung server did not fail with a timeout: {error}"
        if "time" not in error.lower():
            return f"the hung server's error does not say it timed out: {error}"
        return None


class DiskFull(Fault):
    name = "disk-full"
    title = "disk full"
    how = (
        "the output directory is a 96 KiB tmpfs (the workload needs more); the run must "
        "fail with a no-space error; then the tmpfs grows and the query is restarted"
    )

    def not_built(self, target: Target) -> str | None:
        if os.geteuid() != 0:
            return "mounting a small tmpfs needs root"
        return super().not_built(target) or (
            None if target.local_output else "only for sinks writing local files"
        )

    def inject(self, runner: Runner, options: dict[str, str], result: CellResult) -> None:
        mount = runner.cell.out
        mount.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)], check=True)
        runner.cell.mounted = True
        error = runner.run(options)
        result.failures.append(error or "no error")
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        result.injected, result.fired = "96 KiB of space", 1

    def check(self, result: CellResult) -> str | None:
        error = result.failures[0] if result.failures else ""
        if "space" not in error.lower():
            return f"a full disk did not fail the run with a no-space error: {error}"
        return None


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (DriverKill(), WorkerKill(), ServerCrash(), LostAck(), HungServer(), DiskFull())
}


def python_workers() -> list[int]:
    """PIDs of the Spark Python workers this process started (children of a
    ``pyspark.daemon`` among its descendants): never anyone else's."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    workers = []
    stack = [os.getpid()]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            stack.append(child)
            if _is_daemon(pid):
                workers.append(child)
    return workers


def _is_daemon(pid: int) -> bool:
    try:
        return b"pyspark.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _first_line(text: str) -> str:
    """The error's own message: Spark's wrapper lines and tracebacks dropped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("quixsinks.") or ("Error:" in line and "Traceback" not in line):
            return line[:300]
    return (lines[0] if lines else text)[:300]


@contextlib.contextmanager
def _cell(workdir: Path) -> Iterator[Cell]:
    cell = Cell(workdir)
    try:
        yield cell
    finally:
        if cell.mounted:
            # lazy: a process may still hold a file there (a cached SQLite catalog)
            subprocess.run(["umount", "--lazy", str(cell.out)], check=False)


def run_cell(spark: Any, target: Target, fault: Fault, workdir: Path) -> CellResult:
    """One cell: the workload into ``target`` under ``fault``, restarted until complete,
    read back and judged (see the module docstring)."""
    result = CellResult(target.name, fault.name, target.guarantee)
    reason = fault.not_built(target)
    if reason is not None:
        result.verdict = f"not built: {reason}"
        return result
    started = time.monotonic()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    with _cell(workdir) as cell:
        expected = write_input_files(workdir / "in", FILES, ROWS)
        result.rows = len(expected)
        options = target.options(cell)
        runner = Runner(spark, target, cell)
        fault.inject(runner, options, result)
        while runner.files_committed() < FILES and result.recovery_runs < RECOVERY_RUNS:
            result.recovery_runs += 1
            error = runner.run(options)
            if error:
                result.failures.append(f"restart: {error}")
        got = target.read_ids(cell)
        deduplicated = target.read_deduplicated(cell)
        leftovers = getattr(target, "leftovers", None)
        if leftovers is not None:
            result.leftovers = leftovers(cell)
    seen = set(got)
    result.lost = len(set(expected) - seen)
    result.duplicated = len(got) - len(seen)
    if deduplicated is not None:
        result.after_dedupe = len(deduplicated) - len(set(deduplicated))
    result.seconds = round(time.monotonic() - started, 1)
    result.verdict = _verdict(result, fault, complete=runner.files_committed() >= FILES)
    return result


def _verdict(result: CellResult, fault: Fault, *, complete: bool) -> str:
    if not result.fired:
        return "violation: the fault was never injected (the run ended first): no evidence"
    if not complete:
        return f"violation: the restarted query did not complete in {RECOVERY_RUNS} runs"
    if result.lost:
        return f"violation: {result.lost} row(s) lost"
    if result.duplicated and result.guarantee == "exactly-once":
        return f"violation: {result.duplicated} row(s) duplicated"
    if result.after_dedupe:
        return f"violation: {result.after_dedupe} duplicate(s) without their original's dedupe id"
    if result.leftovers:
        return f"violation: left behind {', '.join(result.leftovers[:3])}"
    problem = fault.check(result)
    return f"violation: {problem}" if problem else "ok"
