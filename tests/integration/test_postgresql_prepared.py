"""`write_mode=prepared`: exactly-once through PostgreSQL's two-phase commit, no staging copy.

Tasks COPY into the target and PREPARE their transactions; the driver decides (ledger row
and decided ids in one transaction), then commits the winners and rolls back the rest.
The driver-kill test runs this mode too (test_driver_kill.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import quixsinks
from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.errors import CommitError, OptionError
from quixsinks.core.sink import CommitContext, Receipt
from quixsinks.sinks.postgresql import PostgreSQLSink
from quixsinks.sinks.postgresql.modes import StagedRows
from quixsinks.sinks.postgresql.options import PostgreSQLOptions
from quixsinks.sinks.postgresql.schema import prepared_gid
from quixsinks.testing import faulty

from .streams import run_available_now, write_input_files
from .test_postgresql import query, staging_tables, write

PREPARED = {"write_mode": "prepared"}


def prepared_left(pg: dict[str, Any]) -> list[str]:
    rows = query(pg, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
    return [gid for (gid,) in rows]


def test_a_batch_write_lands_every_row_once_without_staging(spark: Any, pg: dict[str, Any]) -> None:
    df = spark.range(0, 1000, numPartitions=4).selectExpr("id", "concat('v', id) AS v")
    write(df, pg, table_name="t", **PREPARED)
    assert query(pg, "SELECT count(*), count(DISTINCT id), sum(id) FROM t") == [
        (1000, 1000, 499500)
    ]
    assert prepared_left(pg) == []
    assert staging_tables(pg) == []


@pytest.fixture(scope="module")
def faulty_postgresql(spark: Any) -> None:
    quixsinks.register(spark, faulty(PostgreSQLSink))


def test_a_failed_batch_write_rolls_back_every_prepared_task(
    spark: Any, faulty_postgresql: None, pg: dict[str, Any], tmp_path: Path
) -> None:
    df = spark.range(0, 400, numPartitions=4).selectExpr("id")
    with pytest.raises(Exception, match="injected failure"):
        _write_faulty(df, pg, tmp_path)
    assert query(pg, "SELECT count(*) FROM t") == [(0,)]
    assert prepared_left(pg) == []


def _write_faulty(df: Any, pg: dict[str, Any], tmp_path: Path) -> None:
    writer = df.write.format("faulty_postgresql").mode("append")
    options = {
        **pg["options"],
        "table_name": "t",
        "fail_batch": "0",
        "fail_phase": "commit-before",
        "fail_marker": str(tmp_path / "fired"),
        **PREPARED,
    }
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


@pytest.mark.parametrize("phase", ["write", "commit-before", "commit-after"])
def test_streaming_exactly_once_after_a_failure(
    spark: Any, faulty_postgresql: None, pg: dict[str, Any], tmp_path: Path, phase: str
) -> None:
    ids = write_input_files(tmp_path / "in", files=4, rows_per_file=25)
    options = {
        **pg["options"],
        "table_name": "events",
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
        **PREPARED,
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_postgresql", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_postgresql", tmp_path / "ck", options)
    assert [r[0] for r in query(pg, "SELECT id FROM events ORDER BY id")] == ids
    assert prepared_left(pg) == []
    assert query(pg, "SELECT count(*) FROM _quixsinks_ledger") == [(4,)]


def sink_for(pg: dict[str, Any], **extra: str) -> PostgreSQLSink:
    options = PostgreSQLOptions.from_options(
        {**pg["options"], "table_name": "t", **PREPARED, **extra}
    )
    sink = PostgreSQLSink(options)
    sink.prepare(pa.schema([("id", pa.int64())]))
    return sink


def prepare_rows(pg: dict[str, Any], gid: str, ids: list[int]) -> None:
    """What a task does: insert rows and PREPARE the transaction under ``gid``."""
    conn = pg["server"].connect(pg["dbname"])
    try:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t (id) VALUES (%s)", [(i,) for i in ids])
            cur.execute("PREPARE TRANSACTION %s", (gid,))
        conn.commit()
    finally:
        conn.close()


def receipt_of(context: CommitContext, *gids: str) -> Receipt[Any]:
    """A task's receipt naming the prepared transactions ``gids`` (one staged write)."""
    return Receipt(
        context.sink_id,
        context.batch_id,
        0,
        "attempt",
        query_id=context.query_id,
        staged=[StagedRows(tables={"t": ("", 0)}, prepared=list(gids))],
    )


def roll_back(pg: dict[str, Any], gid: str) -> None:
    conn = pg["server"].connect(pg["dbname"])
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("ROLLBACK PREPARED %s", (gid,))
    finally:
        conn.close()


def test_decided_transactions_are_committed_by_whoever_comes_next(pg: dict[str, Any]) -> None:
    """A driver that died between deciding and committing: the next preflight commits what
    it decided and leaves other queries' undecided transactions alone."""
    sink = sink_for(pg)
    sink.preflight()  # creates the table and the ledger tables
    decided = prepared_gid("s1", 7, "attempt-a", 0, "public")
    pending = prepared_gid(
        "s2", 3, "attempt-b", 0, "public"
    )  # another query's task, not decided yet
    prepare_rows(pg, decided, [1, 2])
    prepare_rows(pg, pending, [3])
    query(pg, "INSERT INTO _quixsinks_decided (gid, sink_id) VALUES (%s, 's1')", (decided,))

    sink.preflight()

    assert query(pg, "SELECT id FROM t ORDER BY id") == [(1,), (2,)]
    assert prepared_left(pg) == [pending]
    assert query(pg, "SELECT count(*) FROM _quixsinks_decided") == [(0,)]
    roll_back(pg, pending)


def test_a_replayed_batch_rolls_back_its_new_attempts(pg: dict[str, Any]) -> None:
    """The batch is in the ledger already (the first commit landed): the replay's prepared
    transactions are rolled back, later batches' are kept."""
    sink = sink_for(pg)
    sink.preflight()
    query(
        pg,
        "INSERT INTO _quixsinks_ledger (sink_id, batch_id, query_id, tables, rows) "
        "VALUES ('s1', 4, 'q1', '{t}', 2)",
    )
    replay = prepared_gid("s1", 4, "attempt-replay", 0, "public")
    later = prepared_gid("s1", 5, "attempt-next", 0, "public")
    prepare_rows(pg, replay, [1, 2])
    prepare_rows(pg, later, [3])
    context = CommitContext(sink_id="s1", batch_id=4, streaming=True, query_id="q1")
    sink.commit(context, [])
    assert query(pg, "SELECT count(*) FROM t") == [(0,)]
    assert prepared_left(pg) == [later]
    roll_back(pg, later)


def test_a_keyed_write_still_running_keeps_its_prepared_transactions(
    pg: dict[str, Any],
) -> None:
    """Keyed batch writes of one sink id: May's tasks have prepared, June commits first.
    June's commit leaves May's undecided transactions alone (the ledger lacks May), and
    May's commit then lands its rows (it used to record May over rows rolled back)."""
    sink = sink_for(pg)
    sink.preflight()
    may = prepared_gid("orders", 20240501, "attempt-may", 0, "public")
    june = prepared_gid("orders", 20240601, "attempt-june", 0, "public")
    prepare_rows(pg, may, [1, 2])
    prepare_rows(pg, june, [3])
    june_context = CommitContext("orders", 20240601, False, "batch-write", "postgresql")
    sink.commit(june_context, [receipt_of(june_context, june)])
    assert prepared_left(pg) == [may]
    may_context = CommitContext("orders", 20240501, False, "batch-write", "postgresql")
    sink.commit(may_context, [receipt_of(may_context, may)])
    assert query(pg, "SELECT id FROM t ORDER BY id") == [(1,), (2,), (3,)]
    assert prepared_left(pg) == []


def test_a_commit_whose_prepared_transactions_were_rolled_back_records_nothing(
    pg: dict[str, Any],
) -> None:
    """A winner rolled back before the driver decided it (abandoned past
    staging_max_age_hours, or by hand): the commit fails and writes no ledger row, so the
    replay writes the batch again instead of skipping it."""
    sink = sink_for(pg)
    sink.preflight()
    gid = prepared_gid("s1", 4, "attempt-a", 0, "public")
    prepare_rows(pg, gid, [1, 2])
    roll_back(pg, gid)
    context = CommitContext("s1", 4, True, "q1", "postgresql")
    with pytest.raises(CommitError, match="prepared transactions are gone"):
        sink.commit(context, [receipt_of(context, gid)])
    assert query(pg, "SELECT count(*) FROM _quixsinks_ledger WHERE sink_id = 's1'") == [(0,)]


def test_abort_rolls_back_prepared_transactions_no_receipt_names(pg: dict[str, Any]) -> None:
    """A task prepared, then its receipt never reached the driver (a lost executor): its
    transaction would hold its rows' locks and block the replay. Abort rolls back every
    undecided transaction of the batch, not only the receipts'; other batches' stay."""
    sink = sink_for(pg)
    sink.preflight()
    orphan = prepared_gid("s1", 4, "attempt-lost", 0, "public")
    named = prepared_gid("s1", 4, "attempt-b", 1, "public")
    later = prepared_gid("s1", 5, "attempt-c", 0, "public")
    prepare_rows(pg, orphan, [1])
    prepare_rows(pg, named, [2])
    prepare_rows(pg, later, [3])
    context = CommitContext("s1", 4, True, "q1", "postgresql")
    sink.abort(context, [receipt_of(context, named)])
    assert prepared_left(pg) == [later]
    roll_back(pg, later)


def staged_task(sink: PostgreSQLSink, batch_id: int, partition: int, ids: list[int]) -> Any:
    """One task of a keyed batch write (no Spark): its rows written, its receipt."""
    context = WriteContext("orders", batch_id, partition, f"a{partition}", False, "batch-write")
    task = sink.new_task(context)
    receipt: Receipt[Any] = Receipt(
        "orders", batch_id, partition, f"a{partition}", query_id="batch-write"
    )
    try:
        sink.setup(task)
        sink.check_fence(task)
        table = pa.table({"id": pa.array(ids, pa.int64())})
        receipt.staged.append(sink.write(SinkBatch(table, sink.records, context, task=task)))
    finally:
        sink.close(task)
        task.close()
    return receipt


@pytest.mark.parametrize("mode", ["exactly-once", "prepared"])
def test_a_keyed_write_still_running_survives_a_later_keys_commit(
    pg: dict[str, Any], mode: str
) -> None:
    """Through the sink's own task writes: May's tasks are done, June's write commits
    first, then May's commit lands every row (staged mode: its staging tables were kept;
    prepared: its prepared transactions were)."""
    sink = sink_for(pg, write_mode=mode)
    sink.preflight()
    may = [staged_task(sink, 20240501, p, list(range(p * 100, p * 100 + 100))) for p in (0, 1)]
    june = [staged_task(sink, 20240601, 0, list(range(1000, 1050)))]
    sink.commit(CommitContext("orders", 20240601, False, "batch-write", "postgresql"), june)
    sink.commit(CommitContext("orders", 20240501, False, "batch-write", "postgresql"), may)
    assert query(pg, "SELECT count(*) FROM t WHERE id < 1000") == [(200,)]
    assert query(pg, "SELECT count(*) FROM t WHERE id >= 1000") == [(50,)]
    assert prepared_left(pg) == []
    assert staging_tables(pg) == []


def test_conflict_handling_options_need_staging() -> None:
    base = {"dbname": "d", "table_name": "t", "write_mode": "prepared"}
    with pytest.raises(OptionError, match="use write_mode=exactly-once"):
        PostgreSQLOptions.from_options({**base, "on_conflict_do_nothing": "true"})
    with pytest.raises(OptionError, match="use write_mode=exactly-once"):
        PostgreSQLOptions.from_options(
            {**base, "upsert_on_primary_key": "true", "primary_key_columns": "id"}
        )


def test_overwrite_needs_staging(spark: Any, pg: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="overwrite needs write_mode=exactly-once"):
        write(spark.range(3), pg, mode="overwrite", table_name="t", **PREPARED)
