"""Where a micro-batch's Python time goes: one line per Spark call into quixsinks.

Spark's progress events time its phases (``addBatch``, ``walCommit``...), but not what
quixsinks does inside them. With ``QUIXSINKS_TIMINGS_FILE`` set to a file path in the
environment of Spark's Python workers, every call Spark makes into quixsinks appends one
JSON line to that file::

    {"sink": "file", "call": "write", "wall_ms": 5.1, "cpu_ms": 4.8, "pid": 4242,
     "at": 1796000000.123}

``call`` is ``plan`` (the driver builds a writer: ``writer``/``streamWriter``; Spark builds
a stream writer twice per micro-batch, once to plan the tasks and once in the process
that commits), ``write`` (one task), ``commit`` or ``abort`` (the driver). ``wall_ms``
is the call's duration, ``cpu_ms`` the CPU time of its process meanwhile (the sink's
threads included), ``at`` the call's start in seconds since the epoch. A task's ``write``
includes the wait for Spark's rows.

It is a profiling aid for one machine (``local[N]``, or a file per host on a cluster): the
lines hold no option values and no data. Off (the default), it costs one environment
lookup per call. A line that cannot be written is dropped with a DEBUG log, never failing
the write. ``benchmarks/bench_latency.py`` uses it to split a micro-batch's time.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TIMINGS_ENV", "timed"]

#: the environment variable naming the file the lines are appended to
TIMINGS_ENV = "QUIXSINKS_TIMINGS_FILE"

logger = logging.getLogger("quixsinks.timings")


@contextmanager
def timed(sink: str, call: str) -> Iterator[None]:
    """Append the block's timing line to ``$QUIXSINKS_TIMINGS_FILE``, when it is set."""
    path = os.environ.get(TIMINGS_ENV)
    if not path:
        yield
        return
    at, started, cpu = time.time(), time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        line = {
            "sink": sink,
            "call": call,
            "wall_ms": round((time.perf_counter() - started) * 1000, 3),
            "cpu_ms": round((time.process_time() - cpu) * 1000, 3),
            "pid": os.getpid(),
            "at": round(at, 6),
        }
        _append(path, json.dumps(line) + "\n")


def _append(path: str, text: str) -> None:
    # one write() of a short line on an O_APPEND file: lines of concurrent workers do not mix
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        logger.debug("timing line not written to %s: %s", path, exc)
