"""The PostgreSQL ledger: the table ``_quixsinks_ledger`` of the sink's schema.

One row per committed batch, ``(sink id, batch id, query id, tables, rows, record)``
(``record``: the batch's :class:`~quixsinks.core.commits.CommitRecord` as jsonb), inserted in
the very transaction that moves the batch's rows (``ON CONFLICT DO NOTHING``: a batch whose
row exists was committed before and is skipped). Commits of one sink id are serialised by
an advisory lock on :func:`lock_key`. Fencing reads the store through
:class:`~quixsinks.core.ledger.Ledger`: :func:`fence` on the driver (inside the commit
transaction, under the lock), ``Ledger.check`` on executors (:func:`check`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quixsinks.core.commits import CommitRecord
from quixsinks.core.ledger import LedgerEntry, LedgerStore
from quixsinks.core.sink import CommitContext

from .client import import_psycopg2
from .options import PostgreSQLOptions
from .schema import LEDGER_TABLE

__all__ = ["PostgresLedgerStore", "check", "fence", "lock_key"]


class PostgresLedgerStore(LedgerStore):
    """The ledger table of ``schema``, read and written through ``cur`` (in its transaction)."""

    def __init__(self, cur: Any, schema: str) -> None:
        self.cur = cur
        self.schema = schema

    def _table(self) -> Any:
        return import_psycopg2().sql.Identifier(self.schema, LEDGER_TABLE)

    def _run(self, query: str, params: tuple[Any, ...]) -> None:
        self.cur.execute(import_psycopg2().sql.SQL(query).format(self._table()), params)

    def owners(self, sink_id: str) -> set[str]:
        self._run("SELECT DISTINCT query_id FROM {} WHERE sink_id = %s", (sink_id,))
        return {row[0] for row in self.cur.fetchall()}

    def get(self, sink_id: str, batch_id: int) -> LedgerEntry | None:
        self._run(
            "SELECT query_id FROM {} WHERE sink_id = %s AND batch_id = %s", (sink_id, batch_id)
        )
        row = self.cur.fetchone()
        return None if row is None else LedgerEntry(sink_id, batch_id, row[0])

    def drop_query(self, sink_id: str, query_id: str) -> None:
        self._run("DELETE FROM {} WHERE sink_id = %s AND query_id = %s", (sink_id, query_id))

    def insert(
        self, context: CommitContext, tables: Sequence[str], rows: int, record: str | None = None
    ) -> bool:
        """Record the batch (in the commit's transaction) with its commit record (JSON);
        False if it had a row already."""
        self._run(
            "INSERT INTO {} (sink_id, batch_id, query_id, tables, rows, record) "
            "VALUES (%s, %s, %s, %s, %s, %s::jsonb) ON CONFLICT DO NOTHING RETURNING 1",
            (context.sink_id, context.batch_id, context.query_id, list(tables), rows, record),
        )
        return self.cur.fetchone() is not None

    def records(self, sink_id: str | None) -> list[CommitRecord]:
        """The commit records kept with the ledger rows (of ``sink_id``, or of every sink
        id), oldest first; rows written before records were kept have none."""
        where = "record IS NOT NULL" + (" AND sink_id = %s" if sink_id is not None else "")
        self._run(
            "SELECT record FROM {} WHERE " + where + " ORDER BY committed_at, sink_id, batch_id",
            (sink_id,) if sink_id is not None else (),
        )
        out = []
        for (record,) in self.cur.fetchall():
            if isinstance(record, str | bytes):
                out.append(CommitRecord.from_json(record))
            else:
                out.append(CommitRecord.from_dict(record))
        return out

    def prune(self, sink_id: str, keep: int, recorded: int) -> None:
        """Delete the rows of ``sink_id`` but the ``keep`` with the highest batch ids and
        ``recorded`` (:meth:`~quixsinks.core.ledger.RecordingLedgerStore.prune`)."""
        self._run(
            "DELETE FROM {0} WHERE sink_id = %s AND batch_id <> %s AND batch_id < "
            "(SELECT min(batch_id) FROM (SELECT batch_id FROM {0} WHERE sink_id = %s "
            "ORDER BY batch_id DESC LIMIT %s) kept)",
            (sink_id, recorded, sink_id, keep),
        )


def lock_key(options: PostgreSQLOptions, sink_id: str) -> str:
    """The advisory lock serialising the commits of ``sink_id`` in the sink's schema."""
    return f"quixsinks:{options.schema_name}:{sink_id}"


def fence(cur: Any, options: PostgreSQLOptions, context: CommitContext) -> PostgresLedgerStore:
    """Serialise the sink id's commits (a transaction-scoped advisory lock), then fence the
    ledger (a takeover drops the other query's rows); the store, for the commit's insert."""
    cur.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
        (lock_key(options, context.sink_id),),
    )
    store = PostgresLedgerStore(cur, options.schema_name)
    options.ledger(store).fence(context.sink_id, context.query_id)
    return store


def check(cur: Any, options: PostgreSQLOptions, sink_id: str, query_id: str) -> None:
    """The executors' read-only fence check (LedgerFenceError unless ``query_id`` may write)."""
    store = PostgresLedgerStore(cur, options.schema_name)
    options.ledger(store).check(sink_id, query_id)
