"""Failure injection for testing a sink's delivery guarantee.

``faulty(SinkClass)`` returns a subclass registered under ``faulty_<name>`` whose extra
options make it fail one micro-batch, once, at a chosen point. Production sinks carry
no such options; a test registers the faulty twin next to the real one::

    quixsinks.register(spark, faulty(FileSink))
    (df.writeStream.format("faulty_file")
        .option("fail_batch", 2).option("fail_phase", "commit-after")
        .option("fail_marker", "/tmp/x/fired")   # fires once: whoever creates it
        ...)

Phases: ``write`` (the task fails), ``commit-before`` (the driver fails before the
sink's commit), ``commit-after`` (the commit landed, then the driver fails, so Spark
aborts and later replays a batch that is already in the destination).

Pauses let a test act on the destination at a chosen point (crash it, snapshot it): with
``pause_batch`` and ``pause_dir`` set, the first ``write`` of that micro-batch's tasks and
its commit each stop before the sink runs, create ``<pause_dir>/write`` (or ``commit``)
and wait until the test calls :func:`resume` (each pause happens once)::

    threading.Thread(target=lambda: (
        await_pause(pauses, "commit"), server.crash(), resume(pauses, "commit"))).start()

:func:`kill_at_random` is the driver-kill test of the built-in sinks, for yours: it
starts a streaming job script, SIGKILLs its whole process group (driver, JVM, Python
workers) at random moments after it made progress, and leaves the restart to you.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from quixsinks.core.batch import SinkBatch
from quixsinks.core.options import option
from quixsinks.core.sink import CommitContext, CommonOptions, Receipt, Sink

__all__ = ["InjectedFault", "await_pause", "faulty", "kill_at_random", "resume"]

S = TypeVar("S", bound=Sink[Any, Any])


class InjectedFault(RuntimeError):
    """The failure a faulty sink raises on purpose."""


@dataclass(frozen=True, kw_only=True)
class FaultOptions(CommonOptions):
    fail_batch: int = option(-1, doc="Micro-batch id to fail (-1: never)")
    fail_phase: Literal["write", "commit-before", "commit-after"] = option(
        "write", doc="Where to fail"
    )
    fail_marker: str = option("", doc="File created when the fault fires; it fires only once")
    pause_batch: int = option(-1, doc="Micro-batch id to pause in write and commit (-1: never)")
    pause_dir: str = option("", doc="Folder of the pause files (see await_pause and resume)")
    pause_timeout_seconds: float = option(
        300.0, minimum=0, doc="A pause nobody resumes fails the write or commit after this"
    )


Pause = Literal["write", "commit"]


def _pause(opts: Any, batch_id: int, phase: Pause) -> None:
    """Stop here once for ``pause_batch`` until the test resumes ``phase``."""
    if opts.pause_batch != batch_id or not opts.pause_dir:
        return
    if not _fire_once(os.path.join(opts.pause_dir, phase)):
        return
    resumed = os.path.join(opts.pause_dir, f"{phase}.resume")
    deadline = time.monotonic() + opts.pause_timeout_seconds
    while not os.path.exists(resumed):
        if time.monotonic() > deadline:
            raise InjectedFault(f"{phase} of batch {batch_id} paused; nobody resumed it")
        time.sleep(0.05)


def await_pause(pause_dir: str | os.PathLike[str], phase: Pause, timeout: float = 120.0) -> None:
    """Wait until a faulty sink is paused at ``phase`` (see the module docstring)."""
    reached = os.path.join(pause_dir, phase)
    deadline = time.monotonic() + timeout
    while not os.path.exists(reached):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {phase} paused in {pause_dir} within {timeout:.0f} s")
        time.sleep(0.05)


def resume(pause_dir: str | os.PathLike[str], phase: Pause) -> None:
    """Let the sink paused at ``phase`` go on (also before it got there: it will not stop)."""
    with open(os.path.join(pause_dir, f"{phase}.resume"), "a"):
        pass


def _fire_once(marker: str) -> bool:
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        return True
    except FileExistsError:
        return False


def faulty(sink_class: type[S]) -> type[S]:
    """A subclass of ``sink_class`` named ``faulty_<name>`` with fault options."""
    options_class: Any = dataclass(frozen=True, kw_only=True)(
        type(
            f"Faulty{sink_class.options_class.__name__}",
            (FaultOptions, sink_class.options_class),
            {"__module__": __name__},
        )
    )
    options_class.sink_name = f"faulty_{sink_class.name}"

    def should_fail(self: Any, batch_id: int, phase: str) -> bool:
        opts = self.options
        return bool(
            opts.fail_batch == batch_id
            and opts.fail_phase == phase
            and opts.fail_marker
            and _fire_once(opts.fail_marker)
        )

    def write(self: Any, batch: SinkBatch) -> Any:
        _pause(self.options, batch.batch_id, "write")
        if should_fail(self, batch.batch_id, "write"):
            raise InjectedFault(f"injected failure in write of batch {batch.batch_id}")
        return sink_class.write(self, batch)

    def commit(self: Any, context: CommitContext, receipts: list[Receipt[Any]]) -> None:
        if should_fail(self, context.batch_id, "commit-before"):
            raise InjectedFault(f"injected failure before commit of batch {context.batch_id}")
        _pause(self.options, context.batch_id, "commit")
        sink_class.commit(self, context, receipts)
        if should_fail(self, context.batch_id, "commit-after"):
            raise InjectedFault(f"injected failure after commit of batch {context.batch_id}")

    name = f"Faulty{sink_class.__name__}"
    cls = type(
        name,
        (sink_class,),
        {
            "name": f"faulty_{sink_class.name}",
            "options_class": options_class,
            "write": write,
            "commit": commit,
            "__module__": __name__,
        },
    )
    return cls


def kill_at_random(
    command: Sequence[str],
    progress: Callable[[], int],
    *,
    kills: int = 3,
    seed: int | None = None,
    max_delay: float = 1.5,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    log_path: str | None = None,
) -> int:
    """Start ``command`` and kill its process group at random moments, ``kills`` times.

    Each round starts the job in a new session, waits until ``progress()`` (e.g. the
    number of committed micro-batches you can see in the destination) grows, sleeps a
    random 0..``max_delay`` seconds and SIGKILLs the whole group. A job that finishes
    first ends the rounds early. Returns how many times it was killed; then run the job
    once more to completion and check the destination row by row.
    """
    rng = random.Random(seed)
    done = 0
    for _ in range(kills):
        before = progress()
        with open(log_path or os.devnull, "ab") as log:
            job = subprocess.Popen(
                list(command),
                start_new_session=True,
                env=dict(env) if env is not None else None,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + timeout
        while progress() <= before and job.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
                raise TimeoutError(f"{command[0]}: no progress in {timeout:.0f} s")
            time.sleep(0.05)
        if job.poll() is not None:
            break
        time.sleep(rng.uniform(0, max_delay))
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=60)
        done += 1
    return done
