"""The benchmarks' CPU accounting (benchmarks/harness/cpu.py): what a run cost, by process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.harness_modules import harness_module

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads /proc: Linux only, as the benchmarks"
)

BUSY = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


@pytest.fixture(scope="module")
def cpu() -> ModuleType:
    return harness_module("cpu")  # standalone: os only


def test_a_child_that_runs_and_ends_is_counted_as_another_process(cpu: ModuleType) -> None:
    """A tool run to its end (redis-benchmark, say) is waited for: its CPU arrives through
    this process's cutime, under ``others``, not under the JVM or the workers. (A Spark
    session that earlier tests of this pytest process started may tick meanwhile, a few
    hundredths of a second: the bound sits well below the child's 0.3 s.)"""
    before = cpu.sample()
    subprocess.run([sys.executable, "-c", BUSY], check=True)
    used = cpu.sample() - before
    assert used.others >= 0.25
    assert used.jvm < 0.15
    assert used.workers < 0.15
    assert used.total == pytest.approx(used.driver + used.jvm + used.workers + used.others)
    assert used.as_dict()["total"] == pytest.approx(round(used.total, 3))


def test_a_running_child_is_counted_while_it_runs(cpu: ModuleType) -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY + "import sys\nsys.stdin.read()\n"],
                             stdin=subprocess.PIPE)  # fmt: skip
    try:
        before = cpu.sample()
        # busy for 0.3 s of CPU, then waiting on stdin: its CPU is counted while alive
        while (cpu.sample() - before).others < 0.15:
            assert child.poll() is None
        assert cpu.parent_of(child.pid) is not None
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    assert cpu.parent_of(child.pid) is None  # reaped: gone from /proc


def test_a_grandchild_reaped_by_its_parent_stays_counted(cpu: ModuleType) -> None:
    """As Spark's Python daemon forks a worker and reaps it: the ended grandchild's CPU
    moves into its parent's cutime, and no sample may lose it (nor go negative)."""
    script = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {BUSY!r}], check=True)\n"
        "print('done', flush=True)\n"
        "sys.stdin.read()\n"
    )
    before = cpu.sample()
    child = subprocess.Popen([sys.executable, "-c", script],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "done\n"  # the grandchild ended and was reaped
        used = cpu.sample() - before
        assert used.others >= 0.25
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()


def test_a_process_that_vanishes_unwaited_counts_nothing_and_never_subtracts(
    cpu: ModuleType,
) -> None:
    """Spark's Python daemon ignores SIGCHLD: its ended workers vanish with their CPU. The
    difference of two samples is taken process by process, so such a process counts for
    nothing instead of subtracting what it had used before the first sample."""
    before = cpu.CpuSample(workers=5.0, processes={("workers", 1): 5.0, ("jvm", 2): 1.0}, jvm=1.0)
    after = cpu.CpuSample(workers=0.5, processes={("workers", 3): 0.5, ("jvm", 2): 1.5}, jvm=1.5)
    used = after - before
    assert used.workers == 0.5  # the new worker's, not 0.5 - 5.0
    assert used.jvm == 0.5
    assert used.total == 1.0
