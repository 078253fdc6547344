"""On a Spark standalone cluster (a master, two one-core workers: two executor JVMs with
their own Python workers), the sinks write every row exactly once, streaming and batch.

The driver is a separate process (cluster_job.py) started from an empty directory, as a
user's job would be; the output paths are local, which every executor sees because the
cluster runs on one machine (a real cluster needs a shared file system: docs/deployment.md).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.services.postgres import PostgresServer
from tests.services.spark_cluster import SparkCluster

from .streams import read_jsonl_ids, write_input_files

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

JOB = Path(__file__).with_name("cluster_job.py")


@pytest.fixture(scope="module")
def cluster_run(
    spark_cluster: SparkCluster, postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Run cluster_job.py once on the cluster; the tests below check what it wrote."""
    tmp = tmp_path_factory.mktemp("cluster")
    ids = write_input_files(tmp / "in", files=3, rows_per_file=50)
    dbname = f"t_{uuid.uuid4().hex[:12]}"
    postgres.create_database(dbname)
    pg_options = {
        "host": postgres.host,
        "port": str(postgres.port),
        "user": postgres.user,
        "password": postgres.password,
        "dbname": dbname,
    }
    workdir = tmp / "driver"
    workdir.mkdir()
    (tmp / "out").mkdir()
    args = [spark_cluster.master_url, str(tmp / "in"), str(tmp / "out"), str(tmp / "ck")]
    result = subprocess.run(
        [sys.executable, str(JOB), *args, json.dumps(pg_options)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return {"ids": ids, "out": tmp / "out", "report": report, "postgres": postgres, "db": dbname}


def pg_ids(run: dict[str, Any], table: str) -> list[int]:
    conn = run["postgres"].connect(run["db"])
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM {table} ORDER BY id")
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def test_the_job_ran_on_two_executors_of_two_workers(
    cluster_run: dict[str, Any], spark_cluster: SparkCluster
) -> None:
    assert cluster_run["report"]["executors"] == 2
    for work_dir in spark_cluster.work_dirs:  # each worker launched an executor for the job
        assert list(work_dir.glob("app-*/*/stderr")), f"no executor ran in {work_dir}"


def test_a_stream_on_the_cluster_reaches_file_exactly_once(cluster_run: dict[str, Any]) -> None:
    assert sorted(read_jsonl_ids(cluster_run["out"] / "stream")) == cluster_run["ids"]


def test_a_stream_on_the_cluster_reaches_csvfile_exactly_once(
    cluster_run: dict[str, Any],
) -> None:
    with open(cluster_run["out"] / "stream.csv", newline="", encoding="utf-8") as f:
        ids = sorted(json.loads(row["value"])["id"] for row in csv.DictReader(f))
    assert ids == cluster_run["ids"]


def test_a_stream_on_the_cluster_reaches_postgresql_exactly_once(
    cluster_run: dict[str, Any],
) -> None:
    assert pg_ids(cluster_run, "stream_events") == cluster_run["ids"]


def test_a_batch_write_on_the_cluster_reaches_file_and_postgresql(
    cluster_run: dict[str, Any],
) -> None:
    assert sorted(read_jsonl_ids(cluster_run["out"] / "batch")) == cluster_run["ids"]
    assert pg_ids(cluster_run, "batch_events") == cluster_run["ids"]
