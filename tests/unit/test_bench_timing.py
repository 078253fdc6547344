"""The benchmarks' timing loop (benchmarks/harness/timing.py): warm-ups, rounds, hooks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_before_run_comes_before_each_timed_run_and_never_in_a_smoke_run(
    tmp_path: Path,
) -> None:
    """The page wakes Spark's Python workers there (Spark kills them after a minute idle):
    outside the timing, before every timed run, and not at all in a ``--quick`` run."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from harness import timing
    finally:
        sys.path.remove(str(BENCHMARKS))
    calls: list[str] = []

    def case(name: str) -> Any:
        return timing.Case(name, lambda df, path: calls.append(name), count_rows=None)

    def run(repeat: int) -> list[Any]:
        calls.clear()
        return timing.run_cases(
            None,  # the cases never touch the DataFrame
            [case("floor"), case("sink")],
            floor="floor",
            rows=10,
            repeat=repeat,
            workdir=tmp_path,
            log=lambda line: None,
            before_run=lambda: calls.append("wake"),
        )

    results = run(2)
    assert calls == ["floor", "sink"] + ["wake", "floor", "wake", "sink"] * 2
    assert [len(r.seconds) for r in results] == [2, 2]  # the wake-ups are not timed runs
    run(0)
    assert calls == ["floor", "sink"]
