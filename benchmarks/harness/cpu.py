"""CPU seconds of a benchmark's processes, read from ``/proc``: this process (the driver),
Spark's JVM, its Python workers, and every other descendant (the servers a page starts,
tools such as ``redis-benchmark``).

One :func:`sample` reads ``/proc/<pid>/stat`` of every process once. A descendant that
ended and was waited for is counted through its parent's ``cutime``/``cstime`` (a tool
this process ran to its end, a Python worker Spark's daemon forked and reaped), as long as
that parent lives; only a process whose parent did not wait for it, or ended too, loses
its CPU. A server that detaches
(re-parents itself to init) is not a descendant and is not counted: a bound computed from
these figures can only be too generous, never too strict.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["CpuSample", "parent_of", "sample"]

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 onwards), or
    None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid``; None when it is gone."""
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds so far (a difference of two samples: during a block)."""

    driver: float = 0.0
    jvm: float = 0.0
    workers: float = 0.0
    others: float = 0.0

    @property
    def total(self) -> float:
        return self.driver + self.jvm + self.workers + self.others

    def as_dict(self) -> dict[str, float]:
        """Each part and the total, rounded to milliseconds (for a results file)."""
        parts = {
            "driver": self.driver,
            "jvm": self.jvm,
            "workers": self.workers,
            "others": self.others,
            "total": self.total,
        }
        return {name: round(value, 3) for name, value in parts.items()}

    def __sub__(self, before: CpuSample) -> CpuSample:
        return CpuSample(
            self.driver - before.driver,
            self.jvm - before.jvm,
            self.workers - before.workers,
            self.others - before.others,
        )


def sample() -> CpuSample:
    """This process's and its descendants' CPU seconds so far, by kind."""
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}  # the process's own CPU
    waited: dict[int, float] = {}  # its ended children's, once it waited for them
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat(entry)
        if fields is None:  # ended meanwhile
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        used[pid] = (int(fields[11]) + int(fields[12])) / TICKS
        waited[pid] = (int(fields[13]) + int(fields[14])) / TICKS
    me = os.getpid()
    jvm = _spark_jvm(children.get(me, []))
    # what the JVM waited for were its workers (Python daemons, workers)
    workers = waited[jvm] + _tree(children, jvm, used, waited) if jvm is not None else 0.0
    others = waited.get(me, 0.0)  # the tools this process ran to their end
    for child in children.get(me, []):
        if child != jvm:
            others += used[child] + waited[child] + _tree(children, child, used, waited)
    return CpuSample(
        driver=used.get(me, 0.0),
        jvm=used.get(jvm, 0.0) if jvm is not None else 0.0,
        workers=workers,
        others=others,
    )


def _tree(
    children: dict[int, list[int]], root: int, used: dict[int, float], waited: dict[int, float]
) -> float:
    """CPU of ``root``'s descendants (``root`` itself excluded), ended ones included."""
    total, todo = 0.0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        total += used[pid] + waited[pid]
        todo += children.get(pid, [])
    return total


def _spark_jvm(children: list[int]) -> int | None:
    """Which of this process's ``children`` is Spark's JVM (a server's JVM, e.g. an
    emulator's, is a child too); None before Spark starts."""
    for pid in children:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"org.apache.spark.deploy.SparkSubmit" in cmdline.read():
                    return pid
        except OSError:  # ended meanwhile
            continue
    return None
