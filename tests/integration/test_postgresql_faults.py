"""The `postgresql` sink under rude faults: a server crash between staging and commit, and
mid-write; a COMMIT whose acknowledgement is lost. Every row exactly once, or a loud
failure whose restart completes the write exactly once; never a silent loss or duplicate.

The crash is the real server's ``pg_ctl stop -m immediate`` and restart (crash recovery
empties UNLOGGED staging tables). The lost acknowledgement goes through
:class:`~tests.services.ack_faults.LostAckProxy`, which lets the server apply a COMMIT
and drops its answer.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services.ack_faults import PG_COMMIT, LostAckProxy

from .streams import run_available_now, write_input_files
from .test_postgresql import query, write

SINK_ID = "faulty-pg"


@pytest.fixture
def proxied(pg: dict[str, Any]) -> Iterator[tuple[dict[str, Any], LostAckProxy]]:
    """The sink options pointed at a LostAckProxy in front of the test database."""
    server = pg["server"]
    with LostAckProxy(server.host, server.port) as proxy:
        options = {**pg["options"], "host": proxy.host, "port": str(proxy.port)}
        yield {**pg, "options": options}, proxy


@pytest.fixture
def small_arrow_batches(spark: Any) -> None:
    """Spark hands tasks Arrow batches of 100 rows: a task writes several SinkBatches (the
    setting ends with the test: conftest.py)."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.05)


def waiting_on(pg: dict[str, Any], lock_type: str) -> bool:
    """Whether a session of the test database waits for a lock of ``lock_type``."""
    rows = query(
        pg,
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        "WHERE NOT l.granted AND l.locktype = %s AND d.datname = %s",
        (lock_type, pg["dbname"]),
    )
    return bool(rows[0][0])


@contextlib.contextmanager
def crash_when_waiting(pg: dict[str, Any], holder: Any, lock_type: str) -> Iterator[list[bool]]:
    """While the body runs: once a session of the test database waits for a lock of
    ``lock_type`` (which ``holder``, a connection, holds), crash and restart the server.
    ``holder`` is closed in any case, so the body never waits for it forever."""
    crashed: list[bool] = []

    def watch() -> None:
        try:
            wait_for(lambda: waiting_on(pg, lock_type), f"a session waiting for a {lock_type} lock")
            pg["server"].crash()
            crashed.append(True)
        finally:
            holder.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield crashed
    finally:
        watcher.join(timeout=120)


def ids(pg: dict[str, Any], table: str = "events") -> list[int]:
    return [row[0] for row in query(pg, f"SELECT id FROM {table} ORDER BY id")]


def test_a_lost_staging_commit_ack_stages_nothing_twice_in_a_batch_write(
    spark: Any, proxied: tuple[dict[str, Any], LostAckProxy]
) -> None:
    """A task's staging COMMIT lands, its answer is lost, the write is retried: the rows
    are staged once (the retry finds its SinkBatch claimed) and written once."""
    pg, proxy = proxied
    proxy.lose_reply_to(PG_COMMIT, after=b"COPY ")
    df = spark.range(10_000).repartition(2)
    write(df, pg, table_name="events", retry_backoff_seconds="0.05")
    assert proxy.lost == 1
    assert ids(pg) == list(range(10_000))


def test_a_lost_commit_ack_fails_a_keyed_batch_write_whose_rerun_writes_nothing(
    spark: Any, proxied: tuple[dict[str, Any], LostAckProxy], worker_logs: Callable[[str], int]
) -> None:
    """The driver's COMMIT (it follows the DROP TABLE of the staging tables) lands and its
    answer is lost; the commit is not retried (retry_max_attempts=1), so the write fails as
    if the driver had died. Run again with the same key, it finds its ledger row: every
    row once."""
    pg, proxy = proxied
    proxy.lose_reply_to(PG_COMMIT, after=b"DROP TABLE")
    df = spark.range(10_000).repartition(2)
    sink_id = f"nightly-{uuid.uuid4().hex[:8]}"  # names this test's log lines
    key = {"sink_id": sink_id, "batch_id": "7", "retry_max_attempts": "1"}
    with pytest.raises(Exception, match=r"connection|closed|terminated"):
        write(df, pg, table_name="events", **key)
    assert proxy.lost == 1
    assert ids(pg) == list(range(10_000))  # it landed

    write(df, pg, table_name="events", **key)
    assert ids(pg) == list(range(10_000))
    assert worker_logs(f"batch 7 of sink id {sink_id} is in the ledger already") == 1


def test_a_lost_commit_ack_of_a_keyed_batch_write_is_retried_into_its_ledger_row(
    spark: Any, proxied: tuple[dict[str, Any], LostAckProxy], worker_logs: Callable[[str], int]
) -> None:
    """With retries (the default) the commit of a keyed batch write is idempotent, like a
    micro-batch's: the retry finds the ledger row the lost COMMIT wrote, and the write
    succeeds with every row once."""
    pg, proxy = proxied
    proxy.lose_reply_to(PG_COMMIT, after=b"DROP TABLE")
    df = spark.range(10_000).repartition(2)
    sink_id = f"nightly-{uuid.uuid4().hex[:8]}"
    write(df, pg, table_name="events", sink_id=sink_id, batch_id="7")
    assert proxy.lost == 1
    assert ids(pg) == list(range(10_000))
    assert worker_logs(f"batch 7 of sink id {sink_id} is in the ledger already") == 1


def test_without_the_key_a_lost_commit_ack_fails_a_landed_write_and_a_rerun_duplicates(
    spark: Any, proxied: tuple[dict[str, Any], LostAckProxy]
) -> None:
    """Why batch writes have a key: without one the driver cannot tell a lost answer from
    a failed COMMIT. The write fails although its rows are there, once, and running it
    again writes every row a second time."""
    pg, proxy = proxied
    proxy.lose_reply_to(PG_COMMIT, after=b"DROP TABLE")
    df = spark.range(10_000).repartition(2)
    with pytest.raises(Exception, match=r"connection|closed|terminated"):
        write(df, pg, table_name="events")
    assert proxy.lost == 1
    assert ids(pg) == list(range(10_000))

    write(df, pg, table_name="events")
    assert ids(pg) == sorted(list(range(10_000)) * 2)


def test_a_lost_staging_commit_ack_stages_nothing_twice_in_a_stream(
    spark: Any,
    tmp_path: Path,
    proxied: tuple[dict[str, Any], LostAckProxy],
    small_arrow_batches: None,
) -> None:
    pg, proxy = proxied
    expected = write_input_files(tmp_path / "in", files=3, rows_per_file=500)
    proxy.lose_reply_to(PG_COMMIT, after=b"COPY ", times=2)
    options = {
        **pg["options"],
        "table_name": "events",
        "max_batch_bytes": "1",  # a SinkBatch per Arrow batch: several a task
        "retry_backoff_seconds": "0.05",
    }
    run_available_now(spark, tmp_path / "in", "postgresql", tmp_path / "ck", options)
    assert proxy.lost == 2
    assert ids(pg) == expected


def test_a_lost_staging_commit_ack_keeps_upserts_in_row_order(
    spark: Any, proxied: tuple[dict[str, Any], LostAckProxy], small_arrow_batches: None
) -> None:
    """Upsert: the last row of a key wins, by the rows' numbers in staging. The first
    SinkBatch's staging COMMIT lands and its answer is lost; the retry stages nothing and
    the second SinkBatch's rows must still be numbered after the first's (they were
    numbered from the same start, and a key's older value could win)."""
    pg, proxy = proxied
    proxy.lose_reply_to(PG_COMMIT, after=b"COPY ")
    df = spark.range(0, 200, numPartitions=1).selectExpr("id % 100 AS id", "id AS v")
    write(
        df,
        pg,
        table_name="upserted",
        primary_key_columns="id",
        upsert_on_primary_key="true",
        max_batch_bytes="1",  # a SinkBatch per Arrow batch of 100 rows: two in the task
        retry_backoff_seconds="0.05",
    )
    assert proxy.lost == 1
    rows = query(pg, "SELECT id, v FROM upserted ORDER BY id")
    assert rows == [(k, 100 + k) for k in range(100)]


def test_a_crash_between_staging_and_commit_fails_loudly_and_the_restart_writes_once(
    spark: Any, tmp_path: Path, pg: dict[str, Any]
) -> None:
    """The tasks staged micro-batch 0, the server crashes before the driver's commit
    (crash recovery empties the UNLOGGED staging tables): the commit refuses to record a
    batch whose rows are gone, and the query's restart stages and writes it again."""
    expected = write_input_files(tmp_path / "in", files=2, rows_per_file=1_000)
    options = {**pg["options"], "table_name": "events", "sink_id": SINK_ID}
    # hold the sink id's commit lock: the driver's commit waits for it, after staging
    holder = pg["server"].connect(pg["dbname"])
    holder.autocommit = True
    with holder.cursor() as cur:
        cur.execute(
            "SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"quixsinks:public:{SINK_ID}",)
        )
    with (
        crash_when_waiting(pg, holder, "advisory") as crashed,
        pytest.raises(Exception, match="cannot be committed") as failure,
    ):
        run_available_now(spark, tmp_path / "in", "postgresql", tmp_path / "ck", options)
    assert crashed
    assert "UNLOGGED" in str(failure.value)
    assert query(pg, "SELECT count(*) FROM _quixsinks_ledger") == [(0,)]

    run_available_now(spark, tmp_path / "in", "postgresql", tmp_path / "ck", options)
    assert ids(pg) == expected


def test_a_crash_mid_write_fails_loudly_and_the_rerun_writes_once(
    spark: Any, pg: dict[str, Any], small_arrow_batches: None
) -> None:
    """A task has staged its first SinkBatches when the server crashes; it reconnects and
    stages the rest. The staging table lacks the first ones: the commit fails instead of
    writing part of the DataFrame, and running the write again writes all of it once."""
    query(pg, "CREATE TABLE events (id bigint)")
    rows = [
        (i, f'{{"id": {i}}}' if i < 500 else f'{{"id": {i}, "extra": "x"}}') for i in range(1000)
    ]
    df = spark.createDataFrame(rows, "key long, value string").select("value").coalesce(1)
    options = {
        "table_name": "events",
        "value_format": "json",
        "include_metadata": "false",
        "max_batch_bytes": "1",  # a SinkBatch per Arrow batch of 100 rows
    }
    # the 6th SinkBatch (rows 500-599) adds column `extra`: its ALTER TABLE waits behind this lock
    holder = pg["server"].connect(pg["dbname"])
    with holder.cursor() as cur:
        cur.execute("LOCK TABLE events IN ACCESS SHARE MODE")
    with (
        crash_when_waiting(pg, holder, "relation") as crashed,
        pytest.raises(Exception, match="holds 500 of 1000") as failure,
    ):
        write(df, pg, **options)
    assert crashed
    assert "cannot be committed" in str(failure.value)
    assert ids(pg) == []

    write(df, pg, **options)
    assert ids(pg) == list(range(1000))
