"""``make bench`` cannot break silently: every benchmark it runs, in ``--quick`` mode.

A hundredth of the rows, one run per case, results in a temporary folder, no pip installs
(a peer that is not installed, such as Quix Streams, is reported as skipped with the
reason; the test checks that it says so). The numbers are not judged here, so the
benchmarks run two at a time: most of a quick run is waiting (a JVM starting, a server
answering), not computing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = re.findall(r"benchmarks/(bench_\w+)\.py", (ROOT / "Makefile").read_text())


def test_make_bench_runs_benchmarks() -> None:
    assert "bench_foundation" in BENCHES
    assert "bench_postgresql" in BENCHES


def _run(bench: str, out: Path) -> subprocess.CompletedProcess[str]:
    out.mkdir()
    command = [sys.executable, str(ROOT / "benchmarks" / f"{bench}.py"), "--quick", "--out"]
    return subprocess.run(
        [*command, str(out)], capture_output=True, text=True, timeout=900, check=False
    )


@pytest.fixture(scope="module")
def quick_runs() -> Iterator[dict[str, tuple[subprocess.CompletedProcess[str], Path]]]:
    with tempfile.TemporaryDirectory(prefix="quixsinks-bench-quick-") as tmp:
        outs = {bench: Path(tmp) / bench for bench in BENCHES}
        with ThreadPoolExecutor(max_workers=2) as pool:
            runs = dict(zip(BENCHES, pool.map(_run, BENCHES, outs.values()), strict=True))
        yield {bench: (runs[bench], outs[bench]) for bench in BENCHES}


@pytest.mark.parametrize("bench", BENCHES)
def test_the_benchmark_runs_quick(
    bench: str, quick_runs: dict[str, tuple[subprocess.CompletedProcess[str], Path]]
) -> None:
    result, out = quick_runs[bench]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [written] = list(out.glob("*.json"))
    document = json.loads(written.read_text())
    skipped = document.get("skipped", {})
    assert document["cases"][document["floor"]]["rows_per_s"] > 0
    for name, case in document["cases"].items():
        assert case["rows_per_s"] or name in skipped, f"{name}: neither measured nor skipped"
    for name, reason in skipped.items():
        assert reason, f"{name} skipped without a reason"
