"""Reused Spark workers: the imported libraries' objects frozen out of Python's collector.

With worker reuse (Spark's default), PySpark's daemon runs a full ``gc.collect()`` in a
Python worker after every call it serves: a task, planning a writer, a streaming commit.
A full collection walks every object the collector tracks, and a worker that imported a
sink's client library tracks 50,000 to 135,000 of them (pyarrow, pyiceberg, psycopg2,
redis, the modules of quixsinks): 30 to 140 ms of CPU per call in a probe here. A
streaming micro-batch makes three such calls (planning, the task, the commit), and their
collections run while Spark's JVM writes the micro-batch's offset and commit logs, on the
same cores.

:func:`frozen_imports` ends each of quixsinks' calls into a reused worker: when modules
were imported since the last time, everything still alive is collected once and then
frozen (``gc.freeze()``), so that later collections skip it. The imported modules live as
long as the process anyway; only what the call itself still holds is frozen with them, and
this happens again only when a later call imports more (another sink, a lazily imported
client), a bounded number of times per process.

It is off outside reused Spark workers (no ``SPARK_REUSE_WORKER`` in the environment, as in
a plain Python process) and with ``QUIXSINKS_GC_FREEZE=false``.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FREEZE_ENV", "frozen_imports"]

#: the environment variable that turns the freezing off (``false``, ``0``, ``no``, ``off``)
FREEZE_ENV = "QUIXSINKS_GC_FREEZE"

_OFF = ("false", "0", "no", "off")

#: ``len(sys.modules)`` at the last freeze of this process
_frozen_modules = 0


@contextmanager
def frozen_imports() -> Iterator[None]:
    """Run the block; then, in a reused Spark worker that imported modules since the last
    freeze, collect once and freeze what is alive (also after a failure)."""
    try:
        yield
    finally:
        freeze_new_imports()


def freeze_new_imports() -> bool:
    """Collect and freeze, when this process is a reused Spark worker that imported
    modules since the last freeze; whether it did."""
    global _frozen_modules
    if not os.environ.get("SPARK_REUSE_WORKER"):  # what PySpark's daemon reads
        return False
    if os.environ.get(FREEZE_ENV, "").strip().lower() in _OFF:
        return False
    modules = len(sys.modules)
    if modules <= _frozen_modules:
        return False
    gc.collect()
    gc.freeze()
    _frozen_modules = modules
    return True
