"""``make bench`` cannot break silently: every benchmark it runs, in ``--quick`` mode.

A hundredth of the rows, one timed run, results in a temporary folder, no pip installs (a
peer that is not installed, such as Quix Streams, is reported as skipped with the
reason; the test checks that it says so). The numbers are not judged here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = re.findall(r"benchmarks/(bench_\w+)\.py", (ROOT / "Makefile").read_text())


def test_make_bench_runs_benchmarks() -> None:
    assert "bench_foundation" in BENCHES
    assert "bench_postgresql" in BENCHES


@pytest.mark.parametrize("bench", BENCHES)
def test_the_benchmark_runs_quick(bench: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / f"{bench}.py"),
            "--quick",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [written] = list(tmp_path.glob("*.json"))
    document = json.loads(written.read_text())
    skipped = document.get("skipped", {})
    assert document["cases"][document["floor"]]["rows_per_s"] > 0
    for name, case in document["cases"].items():
        assert case["rows_per_s"] or name in skipped, f"{name}: neither measured nor skipped"
    for name, reason in skipped.items():
        assert reason, f"{name} skipped without a reason"
