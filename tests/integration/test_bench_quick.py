"""``make bench`` cannot break silently: every benchmark it runs, in ``--quick`` mode.

1,000 rows, one run per case, results in a temporary folder; nothing is pip-installed (a
peer that is not installed, such as Quix Streams without the ``dev`` extra, is reported as
skipped with the reason; the test checks that it says so). The numbers are not judged, so
the benchmarks run in turn in one subprocess sharing one Spark session and the servers
(``benchmarks/quick.py``): a quick run alone is mostly a JVM, Python workers and servers
starting. Each benchmark still fails its own test here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

ROOT = Path(__file__).resolve().parents[2]
BENCHES = re.findall(r"benchmarks/(bench_\w+)\.py", (ROOT / "Makefile").read_text())

QuickRuns = tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]


def test_make_bench_runs_benchmarks() -> None:
    assert "bench_foundation" in BENCHES
    assert "bench_postgresql" in BENCHES


@pytest.fixture(scope="module")
def quick_runs() -> Iterator[QuickRuns]:
    with tempfile.TemporaryDirectory(prefix="quixsinks-bench-quick-") as tmp:
        command = [sys.executable, str(ROOT / "benchmarks" / "quick.py"), "--out", tmp]
        done = subprocess.run(
            [*command, *BENCHES], capture_output=True, text=True, timeout=1800, check=False
        )
        summary = Path(tmp) / "summary.json"
        yield done, json.loads(summary.read_text()) if summary.exists() else {}


def _runner_output(done: subprocess.CompletedProcess[str]) -> str:
    return f"runner exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("bench", BENCHES)
def test_the_benchmark_runs_quick(bench: str, quick_runs: QuickRuns) -> None:
    done, summary = quick_runs
    assert bench in summary, f"{bench} did not run; " + _runner_output(done)
    run = summary[bench]
    output = Path(run["log"]).read_text(errors="replace")[-3000:]
    assert run["returncode"] == 0, output + (run["error"] or "")
    assert run["error"] is None, output + run["error"]
    [written] = list(Path(run["out"]).glob("*.json"))
    document = json.loads(written.read_text())
    skipped = document.get("skipped", {})
    assert document["cases"][document["floor"]]["rows_per_s"] > 0
    for name, case in document["cases"].items():
        assert case["rows_per_s"] or name in skipped, f"{name}: neither measured nor skipped"
    for name, reason in skipped.items():
        assert reason, f"{name} skipped without a reason"


def test_the_runner_ends_cleanly(quick_runs: QuickRuns) -> None:
    done, summary = quick_runs
    assert list(summary) == BENCHES, _runner_output(done)
    assert done.returncode == 0, _runner_output(done)


def test_the_runner_reports_a_broken_benchmark_without_raising(tmp_path: Path) -> None:
    """What quick.py's run_one() says of benchmarks that raise, exit or return non-zero,
    with what they printed; without Spark (their main() never opens a session)."""
    (tmp_path / "bench_raises.py").write_text(
        textwrap.dedent(
            """
            import os, sys
            def main(argv):
                print("raises: started with", argv[:1], flush=True)
                os.environ["QUIXSINKS_BENCH_LEAK"] = "1"
                sys.path.insert(0, "/nowhere")
                raise RuntimeError("the benchmark broke")
            """
        )
    )
    (tmp_path / "bench_exits.py").write_text(
        "def main(argv):\n    raise SystemExit('unknown case(s) nope')\n"
    )
    (tmp_path / "bench_fails.py").write_text(
        "import sys\ndef main(argv):\n    print('below target', file=sys.stderr)\n    return 3\n"
    )
    script = textwrap.dedent(
        f"""
        import json, os, sys
        from pathlib import Path
        sys.path[:0] = [{str(ROOT / "benchmarks")!r}, {str(tmp_path)!r}]
        import quick
        out = Path({str(tmp_path / "out")!r})
        runs = {{b: quick.run_one(b, out, 2) for b in ("bench_raises", "bench_exits",
                                                      "bench_fails", "bench_missing")}}
        runs["leaked"] = ["QUIXSINKS_BENCH_LEAK" in os.environ, "/nowhere" in sys.path]
        print(json.dumps(runs))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(done.stdout.splitlines()[-1])

    raised = runs["bench_raises"]
    assert raised["returncode"] == 1
    assert "RuntimeError: the benchmark broke" in raised["error"]
    log = Path(raised["log"]).read_text()
    assert "raises: started with ['--quick']" in log
    assert "RuntimeError: the benchmark broke" in log
    assert runs["leaked"] == [False, False]

    assert runs["bench_exits"]["returncode"] == 1
    assert runs["bench_exits"]["error"] == "unknown case(s) nope"

    assert runs["bench_fails"]["returncode"] == 3
    assert runs["bench_fails"]["error"] is None
    assert Path(runs["bench_fails"]["log"]).read_text() == "below target\n"

    assert "No module named 'bench_missing'" in runs["bench_missing"]["error"]
