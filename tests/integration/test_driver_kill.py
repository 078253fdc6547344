"""The driver killed at random moments mid-stream, then restarted: every row exactly once.

A job streams 8 input files (one micro-batch each) into the `file`, `csvfile` and
`postgresql` sinks. The test SIGKILLs the job's whole process group (driver, JVM and Python
workers) at random moments after it has committed something, several times, then
lets a final run finish from the checkpoints and checks both outputs row by row.
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .streams import read_jsonl_ids, write_input_files

JOB = Path(__file__).with_name("kill_job.py")
KILLS = 3


def start_job(tmp_path: Path, pg_options: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    args = [
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        str(tmp_path / "out.csv"),
        str(tmp_path / "ck"),
    ]
    with open(tmp_path / "job.log", "ab") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, str(JOB), *args, *extra],
            start_new_session=True,
            env={**os.environ, "QUIXSINKS_KILL_PG": json.dumps(pg_options)},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def committed_batches(tmp_path: Path) -> int:
    ledger = tmp_path / "out" / "_quixsinks" / "ledger"
    return sum(len(files) for _, _, files in os.walk(ledger)) if ledger.exists() else 0


def kill_group(job: subprocess.Popen[bytes]) -> None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=60)


def test_rows_arrive_exactly_once_across_random_driver_kills(
    tmp_path: Path, pg: dict[str, Any]
) -> None:
    pg_options = {**pg["options"], "table_name": "events"}
    seed = int(os.environ.get("QUIXSINKS_KILL_SEED", time.time()))
    rng = random.Random(seed)
    ids = write_input_files(tmp_path / "in", files=8, rows_per_file=40)
    kills = 0
    for _ in range(KILLS):
        before = committed_batches(tmp_path)
        job = start_job(tmp_path, pg_options)
        deadline = time.monotonic() + 120
        while committed_batches(tmp_path) <= before and job.poll() is None:
            assert time.monotonic() < deadline, f"no progress (seed {seed})"
            time.sleep(0.05)
        if job.poll() is not None:
            break  # it finished everything before we could kill it
        time.sleep(rng.uniform(0, 1.5))
        kill_group(job)
        kills += 1
    final = start_job(tmp_path, pg_options, "--available-now")
    assert final.wait(timeout=300) == 0, (tmp_path / "job.log").read_text()[-3000:]

    assert kills >= 1, f"the job was never killed (seed {seed})"
    assert sorted(read_jsonl_ids(tmp_path / "out")) == ids, f"seed {seed}"
    with open(tmp_path / "out.csv", newline="", encoding="utf-8") as f:
        csv_ids = sorted(json.loads(row["value"])["id"] for row in csv.DictReader(f))
    assert csv_ids == ids, f"seed {seed}"
    conn = pg["server"].connect(pg["dbname"])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM events ORDER BY id")
            assert [row[0] for row in cur.fetchall()] == ids, f"seed {seed}"
    finally:
        conn.close()
    staging = tmp_path / "out" / "_quixsinks" / "staging"
    assert not staging.exists() or not any(p.is_file() for p in staging.rglob("*")), seed
