"""The driver killed at random moments mid-stream, then restarted: every row exactly once.

A job streams 4 input files (one micro-batch each) into every sink with a server here: the
`file`, `csvfile` and `postgresql` sinks (the latter twice: staged, and with
write_mode=prepared, PostgreSQL's two-phase commit), `redis` (hash and list), `tsdatalake`,
`kinesis`, `pubsub`, `iceberg`, `bigquery`, `influxdb1` and `mqtt`: thirteen queries in one
driver. Four more read a Kafka-shaped stream whose every fifth value is not JSON, with
on_error=dead_letter, into `file`, `postgresql`, `redis` and `kinesis` (one of each commit
style: file markers, a SQL transaction, idempotent writes, at-least-once publishing): every
bad row lands exactly once in the dead-letter output, every good row with the sink's
guarantee. The test SIGKILLs the job's whole process group (driver, JVM and Python workers) at
random moments after it has committed something, twice, then lets a final run finish from
the checkpoints and checks every output row by row.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from quixsinks.testing import kill_at_random

from .poison import dead_letter_offsets, write_kafka_batches
from .streams import read_jsonl_ids, write_input_files

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

JOB = Path(__file__).with_name("kill_job.py")
KILLS = 2
FILES = 4  # micro-batches: enough that both kills land mid-stream, replays included
# hang guards only (a loaded 2-core machine runs thirteen queries slowly): never reached
# when the job works
PROGRESS_TIMEOUT = 300
FINISH_TIMEOUT = 600


def start_job(
    tmp_path: Path,
    pg_options: dict[str, str],
    *extra: str,
    checkpoints: str = "ck",
    sink_id: str = "",
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    args = [
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        str(tmp_path / "out.csv"),
        str(tmp_path / checkpoints),
    ]
    env = {**(env or os.environ), "QUIXSINKS_KILL_PG": json.dumps(pg_options)}
    if sink_id:
        env["QUIXSINKS_KILL_SINK_ID"] = sink_id
    with open(tmp_path / "job.log", "ab") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, str(JOB), *args, *extra],
            start_new_session=True,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def committed_batches(tmp_path: Path) -> int:
    ledger = tmp_path / "out" / "_quixsinks" / "ledger"
    if not ledger.exists():
        return 0
    return sum(1 for _, _, files in os.walk(ledger) for name in files if name != "owner.json")


def kill_group(job: subprocess.Popen[bytes]) -> None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=60)


def assert_exactly_once(tmp_path: Path, pg: dict[str, Any], ids: list[int], seed: int) -> None:
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


def every_sink_committed(tmp_path: Path, pg: dict[str, Any]) -> bool:
    """Each of the three sinks has a ledger entry (so each is owned by the first query)."""
    csv_ledger = tmp_path / ".out.csv.quixsinks" / "ledger.jsonl"
    if committed_batches(tmp_path) == 0 or not csv_ledger.exists() or not csv_ledger.read_text():
        return False
    conn = pg["server"].connect(pg["dbname"])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass('_quixsinks_ledger') IS NOT NULL")
            if not cur.fetchone()[0]:
                return False
            cur.execute("SELECT count(*) FROM _quixsinks_ledger")
            return bool(cur.fetchone()[0])
    finally:
        conn.close()


def test_rows_arrive_exactly_once_across_random_driver_kills(
    tmp_path: Path,
    pg: dict[str, Any],
    redis_sink: dict[str, Any],
    kinesis_sink: dict[str, Any],
    pubsub_topic: dict[str, Any],
    bigquery_sink: dict[str, Any],
    iceberg_rest: Any,
    influx1: dict[str, Any],
    mqtt_sink: dict[str, Any],
) -> None:
    pg_options = {**pg["options"], "table_name": "events"}
    seed = int(os.environ.get("QUIXSINKS_KILL_SEED", time.time()))
    ids = write_input_files(tmp_path / "in", files=FILES, rows_per_file=40)
    args = [str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "out.csv")]
    prepared = {**pg["options"], "table_name": "events_prepared", "write_mode": "prepared"}
    env = {**os.environ, "QUIXSINKS_KILL_PG_PREPARED": json.dumps(prepared)}
    env["QUIXSINKS_KILL_REDIS"] = json.dumps(redis_sink["options"])
    lake_options = {"path": str(tmp_path / "lake"), "catalog_url": iceberg_rest.url}
    lake_options["namespace"] = "kill"  # the session's catalog: its own namespace
    env["QUIXSINKS_KILL_TSDATALAKE"] = json.dumps(lake_options)
    env["QUIXSINKS_KILL_KINESIS"] = json.dumps(kinesis_sink["options"])
    env["QUIXSINKS_KILL_PUBSUB"] = json.dumps(pubsub_topic["options"])
    iceberg = {"warehouse": str(tmp_path / "warehouse"), "table_name": "db.events"}
    env["QUIXSINKS_KILL_ICEBERG"] = json.dumps(iceberg)
    env["QUIXSINKS_KILL_BIGQUERY"] = json.dumps(bigquery_sink["options"])
    env["QUIXSINKS_KILL_INFLUXDB1"] = json.dumps(influx1["options"])
    # QoS 1, MQTT 5: every message carries qs_dedupe_id, the same when a batch is replayed
    env["QUIXSINKS_KILL_MQTT"] = json.dumps(
        {**mqtt_sink["options"], "version": "5", "qos": "1", "retry_backoff_seconds": "0.05"}
    )
    poison = write_poison_input(tmp_path)
    env["QUIXSINKS_KILL_DEAD_LETTERS"] = json.dumps(
        {
            "dl-file": ["file", {"path": str(tmp_path / "dl-out")}],
            "dl-postgresql": ["postgresql", {**pg["options"], "table_name": "dl_events"}],
            "dl-redis": [
                "redis",
                {**redis_sink["options"], "data_type": "hash", "key_template": "dl:{id}"},
            ],
            "dl-kinesis": ["kinesis", kinesis_sink["options"]],
        }
    )
    kills = kill_at_random(  # the helper users get from quixsinks.testing
        [sys.executable, str(JOB), *args, str(tmp_path / "ck")],
        lambda: committed_batches(tmp_path),
        kills=KILLS,
        seed=seed,
        timeout=PROGRESS_TIMEOUT,
        env={**env, "QUIXSINKS_KILL_PG": json.dumps(pg_options)},
        log_path=str(tmp_path / "job.log"),
    )
    final = start_job(tmp_path, pg_options, "--available-now", env=env)
    assert final.wait(timeout=FINISH_TIMEOUT) == 0, (tmp_path / "job.log").read_text()[-3000:]

    assert kills >= 1, f"the job was never killed (seed {seed})"
    assert_exactly_once(tmp_path, pg, ids, seed)
    conn = pg["server"].connect(pg["dbname"])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM events_prepared ORDER BY id")
            assert [row[0] for row in cur.fetchall()] == ids, f"seed {seed}"
            cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
            assert cur.fetchall() == [], f"prepared transactions left behind (seed {seed})"
    finally:
        conn.close()
    # redis: one hash per event, each holding that event's fields (overwrites: no duplicates)
    client, prefix = redis_sink["client"], redis_sink["prefix"]
    keys = sorted(client.keys(prefix + "event:*"))
    assert len(keys) == len(ids), f"seed {seed}"
    stored = sorted(int(client.hget(k, "id")) for k in keys)
    assert stored == ids, f"seed {seed}"
    assert client.hget(prefix + "event:5", "name") == b'name "5", ok', f"seed {seed}"
    listed = [json.loads(v)["id"] for v in client.lrange(prefix + "events", 0, -1)]
    assert sorted(listed) == ids, f"seed {seed}"  # appended exactly once (staged, Lua commit)
    assert client.keys(prefix + "_quixsinks:staging:*") == [], f"seed {seed}"
    # tsdatalake: Hive readers see every row once; no staged or orphan file is left
    lake = ds.dataset(str(tmp_path / "lake" / "events"), partitioning="hive").to_table()
    assert sorted(lake.column("id").to_pylist()) == ids, f"seed {seed}"
    assert set(lake.column("key").to_pylist()) == {f"k{i}" for i in range(7)}, f"seed {seed}"
    staged = tmp_path / "lake" / "_quixsinks" / "events" / "staging"
    assert not staged.exists() or not any(p.is_file() for p in staged.rglob("*")), seed
    # ... and so do the catalog's readers: every file registered once, one snapshot a batch
    registered = iceberg_rest.catalog.load_table(("kill", "events"))
    assert sorted(registered.scan().to_arrow().column("id").to_pylist()) == ids, seed
    lake_batches = [
        s.summary.additional_properties["quixsinks.batch-id"] for s in registered.snapshots()
    ]
    assert len(lake_batches) == len(set(lake_batches)), f"registered twice (seed {seed})"
    # kinesis (at-least-once): every row at least once, exactly once after dropping the
    # records whose dedupe id was seen before (a replayed batch carries the same ids)
    every_put = [
        json.loads(r["Data"]) for r in kinesis_sink["server"].read_all(kinesis_sink["stream"])
    ]
    put = [v for v in every_put if "dl" not in v]
    assert sorted(set(v["id"] for v in put)) == ids, f"seed {seed}"
    first_of_each_id = {v["_dedupe_id"]: v["id"] for v in put}
    assert sorted(first_of_each_id.values()) == ids, f"seed {seed}"
    # pubsub (at-least-once): every event at least once; its qs_dedupe_id makes it exactly once
    messages = pubsub_topic["server"].pull_all(pubsub_topic["topic"])
    assert {json.loads(m.data)["id"] for m in messages} == set(ids), f"seed {seed}"
    unique = {m.attributes["qs_dedupe_id"]: json.loads(m.data)["id"] for m in messages}
    assert sorted(unique.values()) == ids, f"seed {seed}"
    # iceberg: every row once, one snapshot per micro-batch (batch ids never repeat)
    from quixsinks.sinks.iceberg import IcebergOptions
    from quixsinks.sinks.iceberg.client import load_catalog

    table = load_catalog(IcebergOptions.from_options(iceberg)).load_table("db.events")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == ids, f"seed {seed}"
    batches = [s.summary.additional_properties["quixsinks.batch-id"] for s in table.snapshots()]
    assert len(batches) == len(set(batches)), f"a batch committed twice (seed {seed})"
    # bigquery: staged through PENDING streams, moved in one guarded transaction per batch
    bq, table = bigquery_sink["client"], bigquery_sink["table"]
    landed = [r["id"] for r in bq.query(f"SELECT id FROM `{table}` ORDER BY id").result()]
    assert landed == ids, f"seed {seed}"
    staged = bq.query(f"SELECT count(*) AS n FROM `{table}_qs_staging`").result()
    assert next(iter(staged))["n"] == 0, f"seed {seed}"
    # influxdb1: one series per event (tag id): a replayed micro-batch overwrites the same points
    points = influx1["server"].query(influx1["database"], 'SELECT "amount", "id" FROM "events"')
    assert sorted(int(p["id"]) for p in points) == ids, f"seed {seed}"
    # mqtt (at-least-once): every event at least once; a replayed batch (or a resend) repeats
    # a message with its qs_dedupe_id, so dropping repeated ids leaves each event once
    messages = mqtt_sink["recorder"].settle()
    assert sorted(set(json.loads(m.payload)["id"] for m in messages)) == ids, f"seed {seed}"
    first_of_each_mqtt_id: dict[str, int] = {}
    for m in messages:
        first_of_each_mqtt_id.setdefault(m.properties["qs_dedupe_id"], json.loads(m.payload)["id"])
    assert sorted(first_of_each_mqtt_id.values()) == ids, f"seed {seed}"
    # dead letters: every unparseable row exactly once per sink; the good rows as promised
    for name in ("dl-file", "dl-postgresql", "dl-redis", "dl-kinesis"):
        dead = tmp_path / "out-dead" / name
        assert dead_letter_offsets(dead) == poison["bad"], f"{name} (seed {seed})"
    good = poison["good"]
    dl_rows = [json.loads(line) for f in (tmp_path / "dl-out").glob("*.jsonl") for line in f.open()]
    assert sorted(r["_value"]["id"] for r in dl_rows) == good, f"seed {seed}"
    conn = pg["server"].connect(pg["dbname"])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM dl_events ORDER BY id")
            assert [row[0] for row in cur.fetchall()] == good, f"seed {seed}"
    finally:
        conn.close()
    dl_keys = client.keys(prefix + "dl:*")
    assert sorted(int(client.hget(k, "id")) for k in dl_keys) == good, f"seed {seed}"
    dl_put = [v for v in every_put if "dl" in v]
    assert sorted(set(v["id"] for v in dl_put)) == good, f"seed {seed}"


def write_poison_input(tmp_path: Path) -> dict[str, list[int]]:
    """The Kafka-shaped input of the dead-letter queries: FILES batches of 10 rows, every
    fifth value not JSON. Returns the good ids and the bad rows' offsets."""
    batches, good, bad = [], [], []
    for f in range(FILES):
        rows: list[tuple[str | None, str | None]] = []
        for r in range(10):
            i = f * 10 + r
            if i % 5 == 4:
                rows.append((f"k{i}", f"not json {i}"))
                bad.append(i)
            else:
                rows.append((f"k{i}", json.dumps({"id": i, "dl": True})))
                good.append(i)
        batches.append(rows)
    write_kafka_batches(tmp_path / "in-kafka", batches)
    return {"good": good, "bad": bad}


def test_a_new_checkpoint_reusing_the_sink_id_after_a_kill_fails_clearly_and_loses_nothing(
    tmp_path: Path, pg: dict[str, Any]
) -> None:
    """Kill the driver mid-stream, restart with a NEW checkpoint and the same explicit sink
    id: every sink refuses (LedgerFenceError) before writing; the old checkpoint then
    finishes the stream with every row exactly once."""
    pg_options = {**pg["options"], "table_name": "events"}
    seed = int(os.environ.get("QUIXSINKS_KILL_SEED", time.time()))
    ids = write_input_files(tmp_path / "in", files=FILES, rows_per_file=20)
    job = start_job(tmp_path, pg_options, sink_id="events-sink")
    deadline = time.monotonic() + PROGRESS_TIMEOUT
    while not every_sink_committed(tmp_path, pg) and job.poll() is None:
        assert time.monotonic() < deadline, "no commit in every sink"
        time.sleep(0.05)
    killed = job.poll() is None
    if killed:
        kill_group(job)

    fresh = start_job(
        tmp_path, pg_options, "--available-now", checkpoints="ck-new", sink_id="events-sink"
    )
    assert fresh.wait(timeout=FINISH_TIMEOUT) != 0
    log = (tmp_path / "job.log").read_text()
    assert "belongs to streaming query" in log, log[-3000:]
    assert "takeover_query_id" in log

    final = start_job(tmp_path, pg_options, "--available-now", sink_id="events-sink")
    assert final.wait(timeout=FINISH_TIMEOUT) == 0, (tmp_path / "job.log").read_text()[-3000:]
    assert killed or committed_batches(tmp_path) > 0, "nothing was committed before the kill"
    assert_exactly_once(tmp_path, pg, ids, seed)
