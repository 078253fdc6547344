"""The BigQuery sink's ledger: the table ``_quixsinks_ledger`` in the target's dataset.

One row per committed micro-batch: ``(sink_id, batch_id, query_id, committed_at, record)``,
``record`` the batch's :class:`~quixsinks.core.commits.CommitRecord` as JSON (the column is
added to a ledger table made before it; rows written before have none). The row
is written by the commit's own transaction (:func:`commit_transaction`), together with the
batch's rows, so :class:`BigQueryLedgerStore` only reads it (owners, one batch's entry) and
carries out a takeover. The transaction repeats the fence in SQL: a row of another query id
under the sink id written meanwhile stops it with ``ERROR()``.
"""

from __future__ import annotations

from collections.abc import Sequence

from quixsinks.core.commits import CommitRecord
from quixsinks.core.ledger import LedgerEntry, LedgerStore

from .client import clients, ddl_kwargs, run_query, translate
from .options import BigQueryOptions, split_table_id
from .schema import LEDGER_TABLE, TOKEN_COLUMN, BQField, quote

__all__ = [
    "LEDGER_FIELDS",
    "BigQueryLedgerStore",
    "commit_records",
    "commit_transaction",
    "literal",
    "sql_table",
]

LEDGER_FIELDS = (
    BQField("sink_id", "STRING", "REQUIRED"),
    BQField("batch_id", "INT64", "REQUIRED"),
    BQField("query_id", "STRING"),
    BQField("committed_at", "TIMESTAMP"),
    BQField("record", "STRING"),
)


def literal(text: str) -> str:
    """A BigQuery string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_table(table_id: str) -> str:
    """``project.dataset.table`` quoted for SQL."""
    return ".".join(quote(part) for part in split_table_id(table_id))


def ledger_id(options: BigQueryOptions) -> str:
    return f"{options.project_id}.{options.dataset_id}.{LEDGER_TABLE}"


class BigQueryLedgerStore(LedgerStore):
    """The ledger rows of one sink id, read once (with tabledata.list: no query job) and
    kept for the life of the store: make one per commit attempt."""

    def __init__(self, options: BigQueryOptions) -> None:
        self.options = options
        self.table_id = ledger_id(options)
        self._entries: dict[str, list[LedgerEntry]] = {}

    def entries(self, sink_id: str) -> list[LedgerEntry]:
        if sink_id not in self._entries:
            try:
                rows = clients(self.options).bigquery.list_rows(
                    self.table_id, **ddl_kwargs(self.options)
                )
                self._entries[sink_id] = [
                    LedgerEntry(r["sink_id"], int(r["batch_id"]), r["query_id"] or "")
                    for r in rows
                    if r["sink_id"] == sink_id
                ]
            except Exception as exc:
                raise translate(exc, f"bigquery table {self.table_id}") from exc
        return self._entries[sink_id]

    def owners(self, sink_id: str) -> set[str]:
        return {e.query_id for e in self.entries(sink_id)}

    def get(self, sink_id: str, batch_id: int) -> LedgerEntry | None:
        return next((e for e in self.entries(sink_id) if e.batch_id == batch_id), None)

    def drop_query(self, sink_id: str, query_id: str) -> None:
        run_query(
            self.options,
            f"DELETE FROM {sql_table(self.table_id)} WHERE sink_id = {literal(sink_id)} "
            f"AND query_id = {literal(query_id)}",
        )
        if sink_id in self._entries:
            self._entries[sink_id] = [e for e in self._entries[sink_id] if e.query_id != query_id]

    def forget(self, sink_id: str) -> None:
        """Drop every row of ``sink_id`` (a batch write without the key: its row only made a
        retried commit idempotent)."""
        run_query(
            self.options,
            f"DELETE FROM {sql_table(self.table_id)} WHERE sink_id = {literal(sink_id)}",
        )
        self._entries.pop(sink_id, None)


def commit_records(options: BigQueryOptions, sink_id: str | None = None) -> list[CommitRecord]:
    """The commit records of the ledger's rows (of ``sink_id``, or every sink id), oldest
    first; rows written before the ``record`` column have none and are left out."""
    table_id = ledger_id(options)
    try:
        rows = list(clients(options).bigquery.list_rows(table_id, **ddl_kwargs(options)))
    except Exception as exc:
        raise translate(exc, f"bigquery table {table_id}") from exc
    records = [
        CommitRecord.from_json(r.get("record"))
        for r in rows
        if r.get("record") and (sink_id is None or r["sink_id"] == sink_id)
    ]
    return sorted(records, key=lambda r: (r.committed_at, r.sink_id, r.batch_id))


def commit_transaction(
    options: BigQueryOptions,
    entry: LedgerEntry,
    *,
    record: str | None = None,
    target: str,
    staging: str,
    columns: Sequence[str],
    tokens: Sequence[str],
    overwrite: bool,
    prune: bool,
    staged_rows: int = 0,
) -> str:
    """The commit's one transaction: unless the ledger has the batch, (overwrite: empty the
    target,) move the winning tokens' staging rows to the target, write the ledger row (with
    ``record``, the commit record's JSON) and prune old ones; first the fence again, in SQL.

    ``staged_rows``: the rows the winning tasks staged. Fewer of them in the staging table
    (deleted by another writer's sweep of old staging rows) fail the transaction before
    anything moves, instead of committing the batch without them."""
    ledger = sql_table(ledger_id(options))
    sink, batch, query = literal(entry.sink_id), entry.batch_id, literal(entry.query_id)
    body = []
    if overwrite:
        body.append(f"DELETE FROM {sql_table(target)} WHERE TRUE;")
    if tokens and columns:
        cols = ", ".join(quote(n) for n in columns)
        wanted = ", ".join(literal(t) for t in tokens)
        body.append(
            f"IF (SELECT COUNT(*) FROM {sql_table(staging)} WHERE {quote(TOKEN_COLUMN)} IN "
            f"({wanted})) < {int(staged_rows)} THEN\n"
            f"      SELECT ERROR('quixsinks: batch {batch} of sink id ' || {sink} || ': the "
            f"staging table holds fewer than the {int(staged_rows)} rows its tasks staged "
            "(deleted as older than staging_max_age_hours?); nothing is committed, the "
            "replay stages them again');\n    END IF;"
        )
        body.append(
            f"INSERT INTO {sql_table(target)} ({cols}) SELECT {cols} FROM "
            f"{sql_table(staging)} WHERE {quote(TOKEN_COLUMN)} IN "
            f"({', '.join(literal(t) for t in tokens)});"
        )
    body.append(
        f"INSERT INTO {ledger} (sink_id, batch_id, query_id, committed_at, record) VALUES "
        f"({sink}, {batch}, {query}, CURRENT_TIMESTAMP(), "
        f"{'NULL' if record is None else literal(record)});"
    )
    if prune:  # all but the newest ledger_keep_batches rows (by count: keyed ids are sparse)
        body.append(  # and never this batch's (a keyed backfill of an old id)
            f"DELETE FROM {ledger} WHERE sink_id = {sink} AND batch_id != {batch} AND "
            f"batch_id < (SELECT MIN(batch_id) FROM (SELECT batch_id FROM {ledger} WHERE "
            f"sink_id = {sink} ORDER BY batch_id DESC LIMIT {int(options.ledger_keep_batches)}));"
        )
    inner = "\n    ".join(body)
    return (
        "BEGIN TRANSACTION;\n"
        f"IF EXISTS (SELECT 1 FROM {ledger} WHERE sink_id = {sink} AND "
        f"IFNULL(query_id, '') != {query}) THEN\n"
        f"  SELECT ERROR('quixsinks: another query holds ledger rows of sink id ' || {sink});\n"
        "END IF;\n"
        f"IF NOT EXISTS (SELECT 1 FROM {ledger} WHERE sink_id = {sink} AND "
        f"batch_id = {batch}) THEN\n    {inner}\nEND IF;\n"
        "COMMIT TRANSACTION;"
    )
