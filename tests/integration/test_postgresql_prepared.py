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
from quixsinks.core.errors import OptionError
from quixsinks.core.sink import CommitContext
from quixsinks.sinks.postgresql import PostgreSQLSink
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
