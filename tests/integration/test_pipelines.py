"""Spark Declarative Pipelines (pyspark 4.1+): ``create_sink`` with a quixsinks format.

The pipeline is the example of docs/pipelines.md, run as printed (only its paths point at
this test's folder) by the real ``spark-pipelines`` CLI against a Spark Connect server
(tests/services/spark_cluster.py, quixsinks installed there as users install it). The
pipeline runs twice over a growing input folder: every row lands once, the second run
writing only the new file (the flow's checkpoint and the sink's ledger carry over).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.services.spark_cluster import SparkConnectServer

from .streams import write_input_files

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "pipelines.md"


def pipeline_example() -> str:
    """The ``transformations/readings.py`` block of docs/pipelines.md."""
    match = re.search(
        r"<!-- pipeline: transformations/readings.py -->\n"
        r"<!-- not run: .*? -->\n```python\n(.*?)^```",
        PAGE.read_text(),
        re.MULTILINE | re.DOTALL,
    )
    assert match, "docs/pipelines.md lost its transformations/readings.py example"
    return match.group(1)


def run_pipeline(server: SparkConnectServer, project: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    bin_dir = Path(sys.executable).parent
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["PYSPARK_PYTHON"] = sys.executable
    result = subprocess.run(
        [str(bin_dir / "spark-pipelines"), "--remote", server.url, "run"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Run is COMPLETED" in result.stdout, result.stdout[-3000:]
    return result.stdout


def read_ids(folder: Path) -> Counter[int]:
    import json

    ids: Counter[int] = Counter()
    for path in folder.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            ids[json.loads(line)["_value"]["id"]] += 1
    return ids


def test_a_pipeline_sink_writes_every_row_once_across_runs(
    spark_connect: SparkConnectServer, tmp_path: Path
) -> None:
    incoming, out = tmp_path / "incoming", tmp_path / "readings"
    code = pipeline_example()
    assert "/data/incoming" in code, code
    assert "/data/readings" in code, code
    code = code.replace("/data/incoming", str(incoming)).replace("/data/readings", str(out))
    project = tmp_path / "project"
    (project / "transformations").mkdir(parents=True)
    (project / "transformations" / "readings.py").write_text(code)
    (project / "spark-pipeline.yml").write_text(
        "name: readings\n"
        f"storage: file://{tmp_path / 'storage'}\n"
        "libraries:\n  - glob:\n      include: transformations/**\n"
    )
    write_input_files(incoming, files=2, rows_per_file=5)

    run_pipeline(spark_connect, project)
    assert read_ids(out) == Counter(range(10))

    # a third file (the first two are rewritten unchanged: the source knows their paths)
    write_input_files(incoming, files=3, rows_per_file=5)
    run_pipeline(spark_connect, project)
    assert read_ids(out) == Counter(range(15))
