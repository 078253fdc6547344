"""CPU seconds of a benchmark's processes, read from ``/proc``: this process (the driver),
Spark's JVM, its Python workers, and every other descendant (the servers a page starts,
tools such as ``redis-benchmark``).

One :func:`sample` reads ``/proc/<pid>/stat`` of every process once, and the difference
of two samples is taken process by process. A descendant that ended and was waited for is
counted through its parent's ``cutime``/``cstime`` (a tool this process ran to its end), as
long as that parent lives. One that ended unwaited loses what it used since the first
sample, and is counted as nothing rather than subtracted: Spark's Python daemon ignores
SIGCHLD, so the workers it forks, and the ones Spark kills after a minute idle, vanish with
their CPU (worker reuse, and the harness waking the workers before each run, keep that to
idle workers). A server that detaches
(re-parents itself to init) is not a descendant and is not counted: a bound computed from
these figures can only be too generous, never too strict.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

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
    #: of a :func:`sample`: each process's part, by (kind, pid); kind is a field's name
    processes: Mapping[tuple[str, int], float] = field(default_factory=dict, repr=False)

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
        """What each kind used between ``before`` and this sample, process by process: a
        process gone since ``before`` counts nothing (it never subtracts)."""
        parts = dict.fromkeys(KINDS, 0.0)
        for (kind, pid), used in self.processes.items():
            parts[kind] += max(0.0, used - before.processes.get((kind, pid), 0.0))
        return CpuSample(**parts)


#: the parts of a sample
KINDS = ("driver", "jvm", "workers", "others")


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
    # the tools this process ran to their end are others
    processes = {("driver", me): used.get(me, 0.0), ("others", me): waited.get(me, 0.0)}
    for child in children.get(me, []):
        below = "workers" if child == jvm else "others"  # the JVM's descendants: workers
        if child == jvm:  # what it waited for were workers too (Python daemons)
            processes[("jvm", child)] = used[child]
            processes[("workers", child)] = waited[child]
        else:
            processes[("others", child)] = used[child] + waited[child]
        for pid in _descendants(children, child):
            processes[(below, pid)] = used[pid] + waited[pid]
    parts = dict.fromkeys(KINDS, 0.0)
    for (kind, _), cpu in processes.items():
        parts[kind] += cpu
    return CpuSample(**parts, processes=processes)


def _descendants(children: dict[int, list[int]], root: int) -> list[int]:
    """``root``'s descendants (``root`` itself excluded)."""
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


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
