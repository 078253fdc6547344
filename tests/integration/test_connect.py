"""quixsinks under Spark Connect: auto-discovery, register(), batch and streaming writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

JOB = Path(__file__).with_name("connect_job.py")


def test_sinks_work_under_spark_connect(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(JOB), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "session pyspark.sql.connect.session" in result.stdout
    assert "registered csvfile,file,influxdb3,postgresql" in result.stdout

    def rows(folder: Path) -> int:
        return sum(p.read_text().count("\n") for p in folder.glob("*.jsonl"))

    assert rows(tmp_path / "discovered") == 5
    assert rows(tmp_path / "batch") == 5
    assert (tmp_path / "stream.csv").read_text().count("\n") == 6  # header + 5 rows
