"""An exactly-once custom sink in 80 lines: rows into SQLite, ledger in the same transaction.

The pattern of every exactly-once quixsinks sink, on a destination that has
transactions: tasks *stage* (here the rows travel back in their receipts, which suits
small micro-batches; a real sink would stage in the destination), and the driver's
``commit`` writes the rows and the ledger entry in one transaction through core's
fenced :class:`~quixsinks.core.ledger.Ledger`. A replay finds its entry and is skipped; a
new checkpoint reusing the sink id gets a LedgerFenceError instead of skipping data.

    quixsinks.register(spark, SQLiteSink)
    df.writeStream.format("sqlite_example").option("database", "/data/rows.db")...
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, ClassVar

from quixsinks import (
    CommitContext,
    LedgerEntry,
    LedgerOptions,
    Receipt,
    RecordingLedgerStore,
    Sink,
    SinkBatch,
    Task,
    option,
)


class SQLiteLedgerStore(RecordingLedgerStore):
    """Ledger entries as rows of ``_ledger``, inside the caller's transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        conn.execute(
            "CREATE TABLE IF NOT EXISTS _ledger (sink_id TEXT, batch_id INTEGER, query_id TEXT, "
            "PRIMARY KEY (sink_id, batch_id))"
        )

    def owners(self, sink_id: str) -> set[str]:
        rows = self.conn.execute(
            "SELECT DISTINCT query_id FROM _ledger WHERE sink_id = ?", (sink_id,)
        )
        return {row[0] for row in rows}

    def get(self, sink_id: str, batch_id: int) -> LedgerEntry | None:
        row = self.conn.execute(
            "SELECT query_id FROM _ledger WHERE sink_id = ? AND batch_id = ?", (sink_id, batch_id)
        ).fetchone()
        return LedgerEntry(sink_id, batch_id, row[0]) if row else None

    def record(self, entry: LedgerEntry) -> bool:
        cursor = self.conn.execute(
            "INSERT OR IGNORE INTO _ledger VALUES (?, ?, ?)",
            (entry.sink_id, entry.batch_id, entry.query_id),
        )
        return cursor.rowcount == 1

    def drop_query(self, sink_id: str, query_id: str) -> None:
        self.conn.execute(
            "DELETE FROM _ledger WHERE sink_id = ? AND query_id = ?", (sink_id, query_id)
        )

    def prune(self, sink_id: str, keep: int, recorded: int) -> None:
        # all but the newest `keep` entries and the one just recorded
        self.conn.execute(
            "DELETE FROM _ledger WHERE sink_id = ? AND batch_id <> ? AND batch_id NOT IN "
            "(SELECT batch_id FROM _ledger WHERE sink_id = ? ORDER BY batch_id DESC LIMIT ?)",
            (sink_id, recorded, sink_id, keep),
        )


@dataclass(frozen=True, kw_only=True)
class SQLiteOptions(LedgerOptions):
    sink_name: ClassVar[str] = "sqlite_example"
    database: str = option(doc="The SQLite database file (on a path the driver can write)")
    table: str = option("rows", doc="Table of (key, value JSON) rows")


class SQLiteSink(Sink[SQLiteOptions, list[tuple[Any, str]]]):
    """Rows into SQLite, exactly once per micro-batch."""

    name: ClassVar[str] = "sqlite_example"
    options_class = SQLiteOptions
    guarantee = "exactly-once"

    def check_fence(self, task: Task) -> None:  # executors: fail before staging anything
        with sqlite3.connect(self.options.database) as conn:
            self.options.ledger(SQLiteLedgerStore(conn)).check(
                task.context.sink_id, task.context.query_id
            )

    def write(self, batch: SinkBatch) -> list[tuple[Any, str]]:
        import json

        return [(item.key, json.dumps(item.value, default=str)) for item in batch]

    def commit(
        self, context: CommitContext, receipts: list[Receipt[list[tuple[Any, str]]]]
    ) -> None:
        conn = sqlite3.connect(self.options.database, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # one writer: the fence check and the data together
            ledger = self.options.ledger(SQLiteLedgerStore(conn))
            if ledger.record(context.sink_id, context.batch_id, context.query_id):
                conn.execute(f"CREATE TABLE IF NOT EXISTS {self.options.table} (key, value)")
                for receipt in receipts:
                    for rows in receipt.staged:
                        conn.executemany(f"INSERT INTO {self.options.table} VALUES (?, ?)", rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()
