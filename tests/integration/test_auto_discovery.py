"""Spark 4 registers the pyspark_quixsinks_* modules by itself: no register call needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

JOB = Path(__file__).with_name("discovery_job.py")

BLOCK_PSYCOPG2 = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "psycopg2" or name.startswith("psycopg2."):
            raise ImportError("psycopg2 is blocked by the test")
        return None
sys.meta_path.insert(0, _Block())
"""


def run_job(out: Path, extra_path: str = "") -> str:
    env = {**os.environ}
    if extra_path:  # reaches Spark's Python workers too (they inherit the environment)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, str(JOB), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def rows(folder: Path) -> int:
    return sum(p.read_text().count("\n") for p in folder.glob("*.jsonl"))


def test_a_new_session_finds_every_sink_without_register(tmp_path: Path) -> None:
    stdout = run_job(tmp_path)
    assert "discovered" in stdout
    assert rows(tmp_path / "file") == 5
    assert (tmp_path / "out.csv").read_text().count("\n") == 6  # header + 5 rows
    assert rows(tmp_path / "stream") > 0
    # register() after auto-registration: the same names again, no error
    assert "registered csvfile,file,influxdb3,postgresql" in stdout
    assert rows(tmp_path / "after") == 5


def test_a_sink_whose_extra_is_missing_breaks_nothing_else(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCK_PSYCOPG2)
    (tmp_path / "out").mkdir()
    stdout = run_job(tmp_path / "out", extra_path=str(blocker))
    assert rows(tmp_path / "out" / "file") == 5
    assert "pip install 'quixsinks[postgresql]'" in stdout
