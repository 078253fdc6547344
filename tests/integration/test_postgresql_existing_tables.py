"""The `postgresql` sink with tables that exist already, and with a server that goes away.

Most tests drive the sink the way the Spark glue does (tasks write, then the driver
commits), without Spark, so that the order of the tasks is fixed; the server is real.
"""

from __future__ import annotations

import decimal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.errors import LedgerFenceError
from quixsinks.core.ledger import LedgerEntry
from quixsinks.core.sink import CommitContext, Receipt, Task
from quixsinks.sinks.postgresql import PostgreSQLOptions, PostgreSQLSink, ddl, ledger
from quixsinks.sinks.postgresql.client import session
from quixsinks.sinks.postgresql.ledger import PostgresLedgerStore

from .streams import run_available_now, write_input_files
from .test_postgresql import query, staging_tables

MODES = ["exactly-once", "direct"]


def make_sink(pg: dict[str, Any], schema: pa.Schema, **options: str) -> PostgreSQLSink:
    opts = PostgreSQLOptions.from_options(
        {**pg["options"], "include_metadata": "false", "key_column": "none", **options}
    )
    sink = PostgreSQLSink(opts)
    sink.prepare(schema)
    sink.preflight()
    return sink


def run_task(
    sink: PostgreSQLSink, table: pa.Table, partition: int = 0, batch_id: int = 0
) -> Receipt[Any]:
    """One task attempt as the Spark glue runs it: setup, one write (retried on a
    RetryableError), close; its receipt."""
    context = WriteContext("bench", batch_id, partition, uuid.uuid4().hex, False)
    task = Task(context, sink.options.retry_policy())
    assert sink.records is not None
    receipt: Receipt[Any] = Receipt("bench", batch_id, partition, context.attempt_id)
    try:
        sink.setup(task)
        batch = SinkBatch(table, sink.records, context, task.counters, task=task)
        staged = task.retry(lambda: sink.write(batch), what="write")
        receipt.staged.append(staged)
        receipt.rows = table.num_rows
    finally:
        task.close()
    return receipt


def commit(sink: PostgreSQLSink, receipts: list[Receipt[Any]]) -> None:
    sink.commit(CommitContext("bench", 0, False), receipts)


def write(pg: dict[str, Any], table: pa.Table, **options: str) -> None:
    sink = make_sink(pg, table.schema, **options)
    commit(sink, [run_task(sink, table)])


@pytest.mark.parametrize("mode", MODES)
def test_columns_the_frame_lacks_get_the_tables_defaults_identities_and_generated_values(
    pg: dict[str, Any], mode: str
) -> None:
    query(
        pg,
        """CREATE TABLE orders (
             id bigint GENERATED ALWAYS AS IDENTITY,
             n bigint, v text,
             status text NOT NULL DEFAULT 'new',
             serial_no bigserial,
             doubled bigint GENERATED ALWAYS AS (n * 2) STORED)""",
    )
    write(pg, pa.table({"n": [1, 2], "v": ["a", "b"]}), table_name="orders", write_mode=mode)
    assert query(pg, "SELECT id, n, v, status, serial_no, doubled FROM orders ORDER BY n") == [
        (1, 1, "a", "new", 1, 2),
        (2, 2, "b", "new", 2, 4),
    ]
    assert staging_tables(pg) == []


@pytest.mark.parametrize("mode", MODES)
def test_upsert_updates_only_the_columns_the_sink_writes(pg: dict[str, Any], mode: str) -> None:
    query(
        pg,
        "CREATE TABLE users (id bigint PRIMARY KEY, name text, note text NOT NULL DEFAULT '-');"
        "INSERT INTO users VALUES (1, 'old', 'keep me')",
    )
    write(
        pg,
        pa.table({"id": [1, 2], "name": ["new", "two"]}),
        table_name="users",
        primary_key_columns="id",
        upsert_on_primary_key="true",
        write_mode=mode,
    )
    assert query(pg, "SELECT id, name, note FROM users ORDER BY id") == [
        (1, "new", "keep me"),
        (2, "two", "-"),
    ]


def json_rows(*values: str) -> pa.Table:
    return pa.table({"value": pa.array([v.encode() for v in values], pa.binary())})


@pytest.mark.parametrize("mode", MODES)
def test_a_column_added_by_a_later_task_is_not_dropped_at_commit(
    pg: dict[str, Any], mode: str
) -> None:
    first = json_rows('{"a": 1}')
    options = {"table_name": "wide", "value_format": "json", "write_mode": mode}
    write(pg, first, **options)  # the table exists with column a only
    sink = make_sink(pg, first.schema, **options)
    task_a = run_task(sink, json_rows('{"a": 2}'), partition=0)  # stages (a)
    task_b = run_task(sink, json_rows('{"a": 3, "b": "x"}'), partition=1)  # widens: (a, b)
    commit(sink, [task_a, task_b])
    assert query(pg, "SELECT a, b FROM wide ORDER BY a") == [(1, None), (2, None), (3, "x")]


def test_a_task_whose_later_batch_has_more_json_columns_keeps_them(pg: dict[str, Any]) -> None:
    sink = make_sink(pg, json_rows("{}").schema, table_name="grow", value_format="json")
    context = WriteContext("bench", 0, 0, uuid.uuid4().hex, False)
    task = Task(context)
    assert sink.records is not None
    receipt: Receipt[Any] = Receipt("bench", 0, 0, context.attempt_id)
    for value in ('{"a": 1}', '{"a": 2, "b": "x"}'):
        batch = SinkBatch(json_rows(value), sink.records, context, task.counters, task=task)
        receipt.staged.append(sink.write(batch))
    task.close()
    commit(sink, [receipt])
    assert query(pg, "SELECT a, b FROM grow ORDER BY a") == [(1, None), (2, "x")]


@pytest.mark.parametrize("mode", MODES)
def test_a_table_dropped_behind_the_sinks_back_is_created_again(
    pg: dict[str, Any], mode: str
) -> None:
    rows = pa.table({"n": [1]})
    sink = make_sink(pg, rows.schema, table_name="gone", write_mode=mode)
    commit(sink, [run_task(sink, rows)])
    query(pg, "DROP TABLE gone")
    commit(sink, [run_task(sink, pa.table({"n": [2]}))])
    assert query(pg, "SELECT n FROM gone") == [(2,)]


@pytest.mark.parametrize("mode", MODES)
def test_a_column_dropped_behind_the_sinks_back_is_added_again(
    pg: dict[str, Any], mode: str
) -> None:
    rows = pa.table({"n": [1], "v": ["a"]})
    sink = make_sink(pg, rows.schema, table_name="altered", write_mode=mode)
    commit(sink, [run_task(sink, rows)])
    query(pg, "ALTER TABLE altered DROP COLUMN v")
    commit(sink, [run_task(sink, pa.table({"n": [2], "v": ["b"]}))])
    assert query(pg, "SELECT n, v FROM altered ORDER BY n") == [(1, None), (2, "b")]


def test_the_ensured_tables_cache_is_bounded(
    pg: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ensured = ddl.EnsuredTables(max_size=3)
    monkeypatch.setattr(ddl, "ENSURED", ensured)
    names = [f"t{i}" for i in range(10)]
    rows = pa.table({"kind": names, "n": list(range(10))})
    write(pg, rows, table_name_column="kind")
    assert len(ensured) == 3
    assert sum(query(pg, f"SELECT count(*) FROM {name}")[0][0] for name in names) == 10


def test_a_broken_connection_is_discarded_and_the_write_retried(pg: dict[str, Any]) -> None:
    rows = pa.table({"n": [1]})
    sink = make_sink(pg, rows.schema, table_name="broken", write_mode="direct")
    commit(sink, [run_task(sink, rows)])  # the process now caches a connection
    query(
        pg,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'quixsinks' AND pid <> pg_backend_pid()",
    )
    commit(sink, [run_task(sink, pa.table({"n": [2]}))])
    assert query(pg, "SELECT n FROM broken ORDER BY n") == [(1,), (2,)]


def test_a_server_restart_during_a_stream_is_retried_and_every_row_lands_once(
    spark: Any, pg: dict[str, Any], tmp_path: Path
) -> None:
    ids = write_input_files(tmp_path / "in", files=12, rows_per_file=50)
    options = {
        **pg["options"],
        "table_name": "restarted",
        "retry_max_attempts": "20",
        "retry_backoff_seconds": "0.5",
        "retry_max_backoff_seconds": "2",
    }
    restarted = threading.Event()

    def restart_after_the_first_batches() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if query(pg, "SELECT count(*) FROM _quixsinks_ledger")[0][0] >= 3:
                    break
            except Exception:  # the ledger does not exist yet
                pass
            time.sleep(0.05)
        pg["server"].restart()
        restarted.set()

    restarter = threading.Thread(target=restart_after_the_first_batches, daemon=True)
    restarter.start()
    run_available_now(spark, tmp_path / "in", "postgresql", tmp_path / "ck", options)
    restarter.join(timeout=120)
    assert restarted.is_set()
    assert [r[0] for r in query(pg, "SELECT id FROM restarted ORDER BY id")] == ids
    assert query(pg, "SELECT count(*) FROM _quixsinks_ledger") == [(12,)]
    assert staging_tables(pg) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_column_binary_copy_cannot_fill_exactly_is_copied_as_csv(
    pg: dict[str, Any], mode: str
) -> None:
    query(pg, "CREATE TABLE ids (id uuid, amount numeric, n bigint)")
    uid = "5f0c2a4e-0000-4000-8000-000000000001"
    write(pg, pa.table({"id": [uid], "amount": [0.5], "n": [1]}), table_name="ids", write_mode=mode)
    assert query(pg, "SELECT id::text, amount, n FROM ids") == [(uid, decimal.Decimal("0.5"), 1)]


def test_the_ledger_store_reads_what_the_commit_recorded_and_fences_another_query(
    pg: dict[str, Any],
) -> None:
    rows = pa.table({"n": [1, 2]})
    sink = make_sink(pg, rows.schema, table_name="ledgered")
    sink.commit(CommitContext("bench", 3, True, "query-a"), [run_task(sink, rows, batch_id=3)])
    schema = sink.options.schema_name
    with session(sink.options) as cur:
        store = PostgresLedgerStore(cur, schema)
        assert store.owners("bench") == {"query-a"}
        assert store.get("bench", 3) == LedgerEntry("bench", 3, "query-a")
        assert store.get("bench", 2) is None
        with pytest.raises(LedgerFenceError) as error:
            ledger.check(cur, sink.options, "bench", "query-b")
        assert error.value.owner_query_id == "query-a"
        store.drop_query("bench", "query-a")
    assert query(pg, f'SELECT count(*) FROM "{schema}"._quixsinks_ledger') == [(0,)]
    assert query(pg, "SELECT n FROM ledgered ORDER BY n") == [(1,), (2,)]
