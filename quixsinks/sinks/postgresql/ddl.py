"""Schema, table, staging table and ledger DDL, idempotent and safe to run concurrently.

Tasks and the driver may create or widen the same table at once; every change runs in
the caller's transaction under a transaction-level advisory lock on the table's name,
and re-reads the catalog after taking it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from quixsinks.core.errors import DestinationNotFoundError, OptionError

from .client import import_psycopg2
from .schema import (
    DECIDED_TABLE,
    LEDGER_TABLE,
    STAGING_REGISTRY,
    Column,
    TableSchema,
    accepts,
    incompatible_message,
)

__all__ = [
    "ENSURED",
    "EnsuredTables",
    "create_stage",
    "ensure_ledger",
    "ensure_table",
    "existing_columns",
    "mirror_row_constraints",
    "primary_key",
    "stage_tables",
    "tables_columns",
]


class EnsuredTables:
    """Tables this process has made able to take a column list, so that a task does not
    lock and read the catalog for every SinkBatch: (database, schema, table, columns) ->
    the columns typed as in the target. Least recently used entries go first beyond
    ``max_size`` (one entry per table and column list: ``table_name_column`` can name
    many tables); :meth:`forget` drops a table's entries when it changed."""

    def __init__(self, max_size: int = 1024) -> None:
        self.max_size = max_size
        self._entries: OrderedDict[tuple[Any, ...], list[Column]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[Any, ...]) -> list[Column] | None:
        with self._lock:
            typed = self._entries.get(key)
            if typed is not None:
                self._entries.move_to_end(key)
            return typed

    def put(self, key: tuple[Any, ...], typed: list[Column]) -> None:
        with self._lock:
            self._entries[key] = typed
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)

    def forget(self, database: str, schema: str, table: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[:3] == (database, schema, table)]:
                del self._entries[key]


#: The process's ensured tables (the tasks of one Python worker share it)
ENSURED = EnsuredTables()


def _sql() -> Any:
    return import_psycopg2().sql


def lock(cur: Any, *names: str) -> None:
    """Serialise DDL on a name across sessions, until the transaction ends."""
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("quixsinks:" + ".".join(names),))


def existing_columns(cur: Any, schema: str, table: str) -> dict[str, str] | None:
    """Column name -> ``format_type`` of an existing table, in order; None if absent."""
    cur.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
          AND c.relkind IN ('r', 'p')
        ORDER BY a.attnum
        """,
        (schema, table),
    )
    rows = cur.fetchall()
    if rows:
        return {name: kind for name, kind in rows}
    cur.execute(
        "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        (schema, table),
    )
    return {} if cur.fetchone() else None


def tables_columns(cur: Any, schema: str, tables: Sequence[str]) -> dict[str, dict[str, str]]:
    """Column name -> ``format_type`` of each existing table of ``tables``, in order (one
    catalog query; a missing table is left out)."""
    cur.execute(
        """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum
        """,
        (schema, list(tables)),
    )
    out: dict[str, dict[str, str]] = {}
    for table, name, kind in cur.fetchall():
        out.setdefault(table, {})[name] = kind
    return out


def create_stage(
    cur: Any,
    ident: Any,
    columns: Sequence[Column],
    *,
    extra: Sequence[tuple[str, str]] = (),
    exists: bool,
    temporary: bool = False,
) -> None:
    """A staging table holding exactly ``columns`` (the ones the sink writes, typed as in
    the target) and the sink's ``extra`` bookkeeping columns, never ``LIKE`` the target:
    the target's other columns (NOT NULL, serial, identity, defaulted, generated) are
    left to the target when the rows move. When the
    table ``exists`` already (an earlier SinkBatch of the same task attempt), only the
    columns it lacks are added."""
    sql = _sql()
    defs = [(c.name, c.pg_type) for c in columns]
    defs.extend(extra)
    if exists:
        for name, kind in defs:
            cur.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                    ident, sql.Identifier(name), sql.SQL(kind)
                )
            )
        return
    body = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind)) for name, kind in defs
    )
    if temporary:
        statement = sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DROP")
    else:
        statement = sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({})")
    cur.execute(statement.format(ident, body))


def mirror_row_constraints(cur: Any, stage: Any, target: Any, columns: Sequence[str]) -> None:
    """Give the staging table ``stage`` the target's NOT NULL and CHECK constraints on
    ``columns`` (those a CHECK reads all among them), so that a row the target would refuse
    for them is refused when its task stages it (a row-level error, isolated per row)
    rather than when the driver moves the batch (which fails the batch). Nothing is
    mirrored for a target with triggers of its own (one may fill a null or fix a value
    before the constraint is checked). Idempotent."""
    sql = _sql()
    regclass = target.as_string(cur)
    cur.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT "
        "tgisinternal)",
        (regclass,),
    )
    if cur.fetchone()[0]:
        return
    names = list(columns)
    cur.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND "
        "NOT attisdropped AND attnotnull AND attname = ANY(%s)",
        (regclass, names),
    )
    for (name,) in cur.fetchall():
        cur.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET NOT NULL").format(
                stage, sql.Identifier(name)
            )
        )
    cur.execute(
        "SELECT c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
        "WHERE c.conrelid = %s::regclass AND c.contype = 'c' AND NOT EXISTS ("
        "SELECT 1 FROM unnest(c.conkey) k JOIN pg_attribute a ON a.attrelid = c.conrelid "
        "AND a.attnum = k WHERE a.attname <> ALL(%s)) AND c.conname NOT IN ("
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
        (regclass, names, stage.as_string(cur)),
    )
    for name, definition in cur.fetchall():
        cur.execute(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                stage, sql.Identifier(name), sql.SQL(definition)
            )
        )


def primary_key(cur: Any, schema: str, table: str) -> list[str]:
    cur.execute(
        """
        SELECT a.attname FROM pg_index i
        JOIN pg_class c ON c.oid = i.indrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
        WHERE i.indisprimary AND n.nspname = %s AND c.relname = %s
        ORDER BY array_position(i.indkey, a.attnum)
        """,
        (schema, table),
    )
    return [row[0] for row in cur.fetchall()]


def ensure_schema(cur: Any, schema: str) -> None:
    sql = _sql()
    cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    if cur.fetchone() is None:
        lock(cur, schema)
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


def ensure_ledger(cur: Any, schema: str) -> None:
    """The fenced ledger (one row per committed micro-batch, sink id and query id), the
    staging registry (every staging table with its creation time, for the sweep, and the
    number of SinkBatches staged in it, so that a write retried after a lost COMMIT
    acknowledgement does not stage its rows twice) and the decided prepared transactions.
    Each ledger row keeps its batch's commit record (``record``, jsonb)."""
    sql = _sql()
    columns = existing_columns(cur, schema, LEDGER_TABLE)
    if (
        columns is not None
        and "query_id" in columns
        and "record" in columns
        and "chunks" in (existing_columns(cur, schema, STAGING_REGISTRY) or {})
        and existing_columns(cur, schema, DECIDED_TABLE) is not None
    ):
        return
    lock(cur, schema, LEDGER_TABLE)
    ledger = sql.Identifier(schema, LEDGER_TABLE)
    cur.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, batch_id bigint NOT NULL, "
            "query_id text NOT NULL DEFAULT '', tables text[] NOT NULL, rows bigint NOT NULL, "
            "committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (sink_id, batch_id))"
        ).format(ledger)
    )
    # a ledger of quixsinks 0.1 has no query_id: its entries belong to no query
    cur.execute(
        sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS query_id text NOT NULL DEFAULT ''").format(
            ledger
        )
    )
    # a ledger of quixsinks before commit records has none: its entries keep null
    cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS record jsonb").format(ledger))
    cur.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (table_name text PRIMARY KEY, sink_id text NOT NULL, "
            "created_at timestamptz NOT NULL DEFAULT now(), chunks integer NOT NULL DEFAULT 0)"
        ).format(sql.Identifier(schema, STAGING_REGISTRY))
    )
    # a registry made by an earlier quixsinks does not count the SinkBatches staged
    cur.execute(
        sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS chunks integer NOT NULL DEFAULT 0").format(
            sql.Identifier(schema, STAGING_REGISTRY)
        )
    )
    cur.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (gid text PRIMARY KEY, sink_id text NOT NULL, "
            "decided_at timestamptz NOT NULL DEFAULT now())"
        ).format(sql.Identifier(schema, DECIDED_TABLE))
    )


def ensure_table(
    cur: Any,
    table: TableSchema,
    columns: Sequence[Column],
    *,
    primary_key_columns: Sequence[str],
    auto_update: bool,
    json_values: bool = False,
    contract: str = "evolve",
) -> list[Column]:
    """Make the target able to take ``columns``.

    Creates the table when missing, adds missing nullable columns (``contract`` evolve),
    adds the primary key when the table has none; never alters an existing column. An
    existing column takes our values where nothing is lost (:func:`accepts`: a table
    Quix's PostgreSQLSink created, with ``timestamp without time zone`` and a text
    ``__key``, included); otherwise the error says what to change.
    Returns the columns the target takes, with the types they have there: under the
    contracts discard_row and discard_value, the columns it lacks are left out.

    Raises:
        DestinationNotFoundError: the table is missing and auto_update is off.
        OptionError: a column's type conflicts with the table's, or a column is missing
            and auto_update is off.
        OptionError: a column is missing and the contract is freeze.
    """
    sql = _sql()
    ident = sql.Identifier(table.schema, table.name)
    lock(cur, table.schema, table.name)
    existing = existing_columns(cur, table.schema, table.name)
    if existing is None:
        if not auto_update:
            raise DestinationNotFoundError(
                f"table {table} does not exist; create it or set schema_auto_update=true",
                location=str(table),
            )
        ensure_schema(cur, table.schema)
        parts = [
            sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.pg_type)) for c in columns
        ]
        if primary_key_columns:
            parts.append(
                sql.SQL("PRIMARY KEY ({})").format(
                    sql.SQL(", ").join(sql.Identifier(c) for c in primary_key_columns)
                )
            )
        cur.execute(sql.SQL("CREATE TABLE {} ({})").format(ident, sql.SQL(", ").join(parts)))
        existing = {c.name: c.pg_type for c in columns}
    else:
        missing = [c for c in columns if c.name not in existing]
        for col in columns:
            if col.name in existing and not accepts(
                col, existing[col.name], json_values=json_values
            ):
                raise OptionError(
                    incompatible_message(table, col, existing[col.name], json_values=json_values),
                    option="table_name",
                    value=str(table),
                )
        if missing and contract == "freeze":
            # the table's shape, not a row's content: never dead-lettered row by row
            raise OptionError(
                f"postgresql: table {table} lacks the columns "
                f"{', '.join(c.name for c in missing)} and schema_contract is freeze; add "
                "them to the table, or choose schema_contract evolve, discard_row or "
                "discard_value",
                option="schema_contract",
                value="freeze",
            )
        if missing and contract in ("discard_row", "discard_value"):
            columns = [c for c in columns if c.name in existing]
            missing = []
        if missing and not auto_update:
            raise OptionError(
                f"postgresql: table {table} lacks the columns "
                f"{', '.join(c.name for c in missing)}; add them or set schema_auto_update=true",
                option="schema_auto_update",
            )
        for col in missing:
            cur.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                    ident, sql.Identifier(col.name), sql.SQL(col.pg_type)
                )
            )
            existing[col.name] = col.pg_type
        if primary_key_columns and not primary_key(cur, table.schema, table.name):
            cur.execute(
                sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(
                    ident, sql.SQL(", ").join(sql.Identifier(c) for c in primary_key_columns)
                )
            )
    return [Column(c.name, existing[c.name], c.source) for c in columns]


def stage_tables(cur: Any, schema: str, prefix: str) -> list[str]:
    """Names of the tables in ``schema`` starting with ``prefix`` (a sink's staging tables)."""
    cur.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND left(c.relname, %s) = %s",
        (schema, len(prefix), prefix),
    )
    return [row[0] for row in cur.fetchall()]
