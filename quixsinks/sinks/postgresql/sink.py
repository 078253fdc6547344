"""The PostgreSQL sink: COPY into staging tables on executors, one transaction on the driver.

Executor (``write``): the rows of a SinkBatch are encoded from Arrow (binary COPY by
pgpq, CSV where it cannot map a column, see ``copy.py``) and loaded with ``COPY ... FROM
STDIN`` into an UNLOGGED staging table of this task attempt
(``_qs_<sink>_<batch>_<target>_<attempt>``, holding only the columns the sink writes, so
that the target's defaults, identities and generated columns apply), in one
transaction per SinkBatch (a retried write leaves nothing behind). No per-row
bookkeeping: the table's name says whose rows they are.

Driver (``commit``), one transaction: lock the sink id (an advisory lock), fence the
ledger (rows of another query id under this sink id stop the commit with
LedgerFenceError, unless ``takeover_query_id`` names that query: its rows are deleted),
insert the ledger row ``(sink id, batch id, query id)`` (``ON CONFLICT DO NOTHING``: if
it exists, the batch was committed before and is skipped), truncate the target for
overwrite, move the winning attempts' rows into the target (``INSERT ... SELECT ...
UNION ALL``, with ``ON CONFLICT`` for upsert or do-nothing), drop the batch's staging
tables (those of failed attempts included), prune ledger rows older than
``ledger_keep_batches`` and drop staging tables of any sink older than
``staging_max_age_hours`` (a query that never ran again). Either all of it happens or
none. Tasks check the fence too, before they stage anything. A batch write keeps a ledger
row only when it is keyed (``sink_id`` and ``batch_id``: its rerun is skipped, and its
commit is retried like a micro-batch's); without the key it commits in the same
transaction without one, and is never retried (a commit whose answer was lost may have
landed).

``write_mode=prepared`` is exactly-once without the second copy, on PostgreSQL's
two-phase commit: each SinkBatch is COPYed straight into the target in a transaction that
the task PREPAREs (``PREPARE TRANSACTION``, id from ``prepared_gid``) instead of
committing. The driver, holding the sink id's advisory lock, fences the ledger, inserts
the ledger row and the winning transaction ids into ``_quixsinks_decided`` in one
transaction, then ``COMMIT PREPARED`` each winner and ``ROLLBACK PREPARED`` the others of
this batch (failed or replayed attempts). A driver that dies in between leaves decided
ids that the next commit (or preflight) commits: decided means committed, eventually;
undecided means rolled back. Readers see a micro-batch's rows appear task by task.

``write_mode=direct`` skips staging: each SinkBatch is COPYed straight into the target
(at-least-once: a replayed micro-batch is written again, unless upsert or do-nothing
absorbs the repeat).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_null
from quixsinks.core.backpressure import RetryStats
from quixsinks.core.batch import SinkBatch
from quixsinks.core.clients import ClientCache, MachineSlots, client_key
from quixsinks.core.errors import CommitError, OptionError, QuixSinksError, RecordError
from quixsinks.core.ledger import fence_owners, log_already_committed
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task

from . import ddl
from .client import connect, describe, import_psycopg2, translate
from .copy import CopyData, copy_data
from .options import PostgreSQLOptions
from .schema import (
    DECIDED_TABLE,
    DELETE_COLUMN,
    LEDGER_TABLE,
    ROW_COLUMN,
    STAGING_REGISTRY,
    Column,
    TableSchema,
    check_not_null,
    column_arrays,
    column_plan,
    identifier_problem,
    prepared_gid,
    settle_action,
    stage_batch,
    stage_prefix,
    stage_table_name,
)

__all__ = ["PostgreSQLSink", "StagedRows"]

#: SQLSTATEs that mean the target changed behind the sink's back (dropped table, schema or
#: column): the process's "already ensured" entry is stale; refresh it and retry once
_STALE_CODES = frozenset({"42P01", "3F000", "42703"})


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


_ENSURED = EnsuredTables()
# Executor connections, reused by the tasks of one Python worker process
_CONNECTIONS: ClientCache[Any] = ClientCache("postgresql connections", lambda c: c.close())


@dataclass
class StagedRows:
    """What one write staged: per target table, its staging table and the rows in it."""

    tables: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: write_mode=prepared: the prepared transaction holding these rows
    prepared: list[str] = field(default_factory=list)


class PostgreSQLSink(Sink[PostgreSQLOptions, StagedRows]):
    """Writes to PostgreSQL tables; exactly-once. See docs/sinks/postgresql.md."""

    name: ClassVar[str] = "postgresql"
    options_class = PostgreSQLOptions
    guarantee = "exactly-once"
    extra = "postgresql"
    supports_overwrite = True

    def __init__(self, options: PostgreSQLOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.columns: list[Column] | None = None
        self.exclude: tuple[str, ...] = ()

    @classmethod
    def check_dependencies(cls) -> None:
        import_psycopg2()

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        assert self.records is not None
        opts = self.options
        exclude = []
        if opts.table_name_column is not None:
            if opts.table_name_column not in schema.names:
                raise OptionError(
                    f"option 'table_name_column' names column {opts.table_name_column!r}, which "
                    f"the DataFrame does not have; its columns are: {', '.join(schema.names)}",
                    option="table_name_column",
                    value=opts.table_name_column,
                )
            exclude.append(opts.table_name_column)
            if self.overwrite:
                raise OptionError(
                    "postgresql: overwrite needs a fixed 'table_name', not 'table_name_column'",
                    option="table_name_column",
                )
        if opts.delete_column is not None:
            field = schema.field(opts.delete_column) if opts.delete_column in schema.names else None
            if field is None or not (
                pa.types.is_boolean(field.type)
                or pa.types.is_string(field.type)
                or pa.types.is_large_string(field.type)
            ):
                raise OptionError(
                    f"option 'delete_column' must name a boolean or text column of the "
                    f"DataFrame; {opts.delete_column!r} is "
                    + (f"of type {field.type}" if field is not None else "not among its columns"),
                    option="delete_column",
                    value=opts.delete_column,
                )
            exclude.append(opts.delete_column)
        if self.overwrite and opts.write_mode != "exactly-once":
            raise OptionError(
                "postgresql: overwrite needs write_mode=exactly-once (the truncate and the load "
                "must be one transaction)",
                option="write_mode",
                value=opts.write_mode,
            )
        self.exclude = tuple(exclude)
        if not self.records.value_json:
            values = pa.schema([schema.field(n) for n in self.records.values])
            key = schema.field(self.records.key).type if self.records.key else None
            self.columns = column_plan(
                values, key, include_metadata=opts.include_metadata, exclude=self.exclude
            )
            names = {c.name for c in self.columns}
            missing = [c for c in opts.primary_key_columns if c not in names]
            if missing:
                raise OptionError(
                    f"option 'primary_key_columns' names {', '.join(map(repr, missing))}, not "
                    f"among the table's columns: {', '.join(sorted(names))}",
                    option="primary_key_columns",
                    value=",".join(opts.primary_key_columns),
                )

    def preflight(self) -> None:
        """Connect once (clear errors for auth, database, network) and prepare the tables."""
        with self._session() as cur:
            ddl.ensure_schema(cur, self.options.schema_name)
            if self.options.exactly_once:
                ddl.ensure_ledger(cur, self.options.schema_name)
            if self.options.write_mode == "prepared":
                cur.execute("SHOW max_prepared_transactions")
                if int(cur.fetchone()[0]) == 0:
                    raise OptionError(
                        f"postgresql: write_mode=prepared needs prepared transactions, and "
                        f"{describe(self.options)} has max_prepared_transactions = 0: set it "
                        "above the number of tasks writing at once (postgresql.conf, then "
                        "restart the server), or use write_mode=exactly-once",
                        option="write_mode",
                        value="prepared",
                    )
            if self.columns is not None and self.options.table_name is not None:
                self._ensure(cur, self.options.table_name, self.columns)
        if self.options.write_mode == "prepared":
            with self._decisions() as cur:
                self._settle(cur, None, None)  # what a driver that died had decided

    # ------------------------------------------------------------------ shared

    def _table(self, name: str) -> TableSchema:
        return TableSchema(self.options.schema_name, name)

    def _ensure(self, cur: Any, table_name: str, columns: list[Column]) -> list[Column]:
        key = (describe(self.options), self.options.schema_name, table_name, tuple(columns))
        typed = _ENSURED.get(key)
        if typed is None:
            if self.options.write_mode == "prepared":
                # a new column waits for the batch's prepared transactions (they hold the
                # table) while the driver waits for this task: do not wait forever
                cur.execute("SET LOCAL lock_timeout = '10s'")
            try:
                typed = self._ensure_now(cur, table_name, columns)
            except import_psycopg2().errors.LockNotAvailable as exc:
                if self.options.write_mode != "prepared":
                    raise
                cur.connection.rollback()
                raise QuixSinksError(
                    f"postgresql: table {self._table(table_name)} needs new columns, which "
                    "cannot be added while this micro-batch's prepared transactions hold "
                    "the table (write_mode=prepared); add the columns first, or use "
                    "write_mode=exactly-once for a stream whose columns change"
                ) from exc
            cur.connection.commit()
            _ENSURED.put(key, typed)
        return typed

    def _ensure_now(self, cur: Any, table_name: str, columns: list[Column]) -> list[Column]:
        return ddl.ensure_table(
            cur,
            self._table(table_name),
            columns,
            primary_key_columns=self.options.primary_key_columns,
            auto_update=self.options.schema_auto_update,
            json_values=self.columns is None,
            contract=self.options.schema_contract,
        )

    def _forget(self, table_names: list[str]) -> None:
        for name in table_names:
            _ENSURED.forget(describe(self.options), self.options.schema_name, name)

    @contextlib.contextmanager
    def _session(self) -> Iterator[Any]:
        """A cursor on a new connection for one transaction: commit on success, roll back
        and translate psycopg2's error on failure, close in any case."""
        psycopg2 = import_psycopg2()
        conn = connect(self.options)
        try:
            with conn.cursor() as cur:
                yield cur
            conn.commit()
        except psycopg2.Error as exc:
            _rollback(conn)
            raise translate(exc, describe(self.options)) from exc
        except BaseException:
            _rollback(conn)
            raise
        finally:
            conn.close()

    def _rollback(self, conn: Any) -> None:
        """Roll back a cached connection; one that is broken (the server went away) is
        dropped from the cache instead, so that the retry connects anew."""
        if not _rollback(conn):
            _CONNECTIONS.discard(client_key(self.options))

    # ------------------------------------------------------------------ executor

    def setup(self, task: Task) -> None:
        opts = self.options
        slot = MachineSlots("pg", f"{opts.host}:{opts.port}", opts.max_connections_per_executor)
        slot.acquire()
        task.on_close(slot.release)

    def check_fence(self, task: Task) -> None:
        if not self.options.exactly_once:
            return
        ctx = task.context
        owners = task.retry(lambda: self._ledger_owners(task), what="postgresql fence check")
        fence_owners(ctx.sink_id, ctx.query_id, owners, self.options.takeover_query_id)

    def _ledger_owners(self, task: Task) -> set[str]:
        psycopg2 = import_psycopg2()
        conn = self._connection(task)
        try:
            with conn.cursor() as cur:
                owners = self._owners(cur, task.context.sink_id)
            conn.rollback()
        except psycopg2.Error as exc:
            self._rollback(conn)
            raise translate(exc, describe(self.options)) from exc
        return owners

    def _connection(self, task: Task | None) -> Any:
        """The task's connection: the process's cached one, healthy and idle, or a new one."""
        key = client_key(self.options)
        conn = _CONNECTIONS.get(key, lambda: connect(self.options))
        if conn.closed:
            _CONNECTIONS.discard(key)
            conn = _CONNECTIONS.get(key, lambda: connect(self.options))
        if task is not None and "conn" not in task.state:
            task.state["conn"] = conn

            def release() -> None:  # a connection left broken or mid-transaction goes
                if conn.closed or conn.get_transaction_status() != 0:  # 0: idle
                    _CONNECTIONS.discard(key)

            task.on_close(release)
        return conn

    def write(self, batch: SinkBatch) -> StagedRows:
        psycopg2 = import_psycopg2()
        opts = self.options
        columns = self.columns
        if columns is None:  # JSON values: the columns are known only now
            key_type = batch.keys().type if self.records and self.records.key else None
            values = batch.values().schema
            # a key null in every row adds no column (its type is not known yet)
            values = pa.schema([f for f in values if not pa.types.is_null(f.type)])
            columns = column_plan(
                values,
                key_type,
                include_metadata=opts.include_metadata,
                exclude=self.exclude,
            )
        check_not_null(batch, columns, opts.primary_key_columns)
        targets = self._tables(batch)
        for refreshed in (False, True):
            conn = self._connection(batch.task)
            try:
                return self._write_once(conn, batch, targets, columns)
            except psycopg2.Error as exc:
                self._rollback(conn)
                if not refreshed and getattr(exc, "pgcode", None) in _STALE_CODES:
                    # the table changed behind our back since this process ensured it
                    self.logger.info("table changed since it was checked (%s): retrying", exc)
                    self._forget([name for name, _ in targets])
                    continue
                raise translate(exc, f"{describe(opts)} table {opts.table_name or '*'}") from exc
            except BaseException:
                self._rollback(conn)
                raise
        raise AssertionError("unreachable")

    def _write_once(
        self,
        conn: Any,
        batch: SinkBatch,
        targets: list[tuple[str, pa.Array | None]],
        columns: list[Column],
    ) -> StagedRows:
        staged = StagedRows()
        created: dict[str, set[str]] = {}
        # this SinkBatch's number in the task attempt: a retry of this very write (its
        # COMMIT landed, the acknowledgement was lost) finds it claimed and stages nothing
        chunk = batch.task.state.get("chunks", 0) + 1 if batch.task is not None else None
        with conn.cursor() as cur:
            # DDL first (it commits), then every COPY of this batch in one transaction
            typed = {name: self._ensure(cur, name, columns) for name, _ in targets}
            for table_name, rows in targets:
                kept = typed[table_name]
                if len(kept) < len(columns):  # schema_contract discard_row / discard_value
                    rows = self._discard(batch, columns, kept, rows)
                    if rows is not None and len(rows) == 0:
                        continue
                stage = self._copy(cur, batch, table_name, kept, rows, created, chunk)
                count = len(rows) if rows is not None else batch.num_rows
                staged.tables[table_name] = (stage, count)
            if self.options.write_mode == "prepared" and staged.tables:
                staged.prepared.append(self._prepare_transaction(cur, batch))
        conn.commit()
        if batch.task is not None:
            batch.task.state["chunks"] = chunk
        known = self._stages_made(batch)
        for stage, names in created.items():
            known.setdefault(stage, set()).update(names)
        return staged

    def _prepare_transaction(self, cur: Any, batch: SinkBatch) -> str:
        """PREPARE the open transaction (this write's COPYs) for the driver; its id."""
        ctx = batch.context
        state = batch.task.state if batch.task is not None else {}
        n = state.get("prepared", 0)
        gid = prepared_gid(ctx.sink_id, ctx.batch_id, ctx.attempt_id, n, self.options.schema_name)
        try:
            cur.execute("PREPARE TRANSACTION %s", (gid,))
        except import_psycopg2().errors.DuplicateObject:
            # a retry of this very write after a lost answer: the first PREPARE landed
            # (same attempt, same rows); this transaction is rolled back
            cur.connection.rollback()
        state["prepared"] = n + 1
        return gid

    def _discard(
        self,
        batch: SinkBatch,
        columns: list[Column],
        kept: list[Column],
        rows: pa.Array | None,
    ) -> pa.Array | None:
        """The rows to write when the table lacks some ``columns``: all of them for
        discard_value (those columns are not written), only the rows without a value in
        any of them for discard_row."""
        names = {c.name for c in kept}
        dropped = [c for c in columns if c.name not in names]
        batch.count("discarded_columns", len(dropped))
        if self.options.schema_contract != "discard_row":
            return rows
        arrays = column_arrays(batch, dropped)
        mask = None
        for array in arrays.values():
            empty = pc.is_null(array)
            mask = empty if mask is None else pc.and_(mask, empty)
        assert mask is not None
        keep = pc.indices_nonzero(mask) if rows is None else rows.filter(mask.take(rows))
        total = batch.num_rows if rows is None else len(rows)
        batch.count("discarded_rows", total - len(keep))
        return keep if len(keep) < total else rows

    @staticmethod
    def _stages_made(batch: SinkBatch) -> dict[str, set[str]]:
        """Staging tables this task attempt has created, with their columns."""
        if batch.task is None:
            return {}
        made: dict[str, set[str]] = batch.task.state.setdefault("stages", {})
        return made

    def _tables(self, batch: SinkBatch) -> list[tuple[str, pa.Array | None]]:
        """(table name, row indices or None for all) for each target table of the batch."""
        if self.options.table_name is not None:
            return [(self.options.table_name, None)]
        assert self.options.table_name_column is not None
        column_name = self.options.table_name_column
        names = batch.column(column_name)
        if pa.types.is_binary(names.type) or pa.types.is_large_binary(names.type):
            try:
                names = pc.cast(names, pa.string())
            except pa.ArrowInvalid:
                raise RecordError(
                    f"postgresql: 'table_name_column' {column_name!r} holds bytes that are not "
                    "UTF-8 text; table names must be text",
                    column=column_name,
                ) from None
        elif pa.types.is_nested(names.type):
            raise RecordError(
                f"postgresql: 'table_name_column' {column_name!r} has type {names.type}; it "
                "must hold text (cast it to string in Spark)",
                column=column_name,
            )
        else:
            names = pc.cast(names, pa.string())
        row = first_null(names)
        if row is not None:
            raise QuixSinksError(
                f"postgresql: 'table_name_column' {self.options.table_name_column!r} is null "
                f"in row {row}; every row must name its table"
            )
        out = []
        for name in pc.unique(names).to_pylist():
            rows = pc.indices_nonzero(pc.equal(names, name))
            problem = identifier_problem(name)
            if problem:
                raise RecordError(
                    f"postgresql: 'table_name_column' {column_name!r} names a table PostgreSQL "
                    f"cannot keep as given in row {rows[0].as_py()}: {problem}",
                    column=column_name,
                    row=rows[0].as_py(),
                )
            out.append((name, rows))
        return out

    def _copy(
        self,
        cur: Any,
        batch: SinkBatch,
        table_name: str,
        columns: list[Column],
        rows: pa.Array | None,
        created: dict[str, set[str]],
        chunk: int | None = None,
    ) -> str:
        """COPY the rows into this attempt's staging table (or the target); its name.

        Staging tables (and direct mode's temporary tables) hold only ``columns``: the
        rows move with an explicit column list, so the target's defaults, identities and
        generated columns apply to the columns the sink does not write. In staging mode
        the SinkBatch number ``chunk`` is claimed in the staging registry in the same
        transaction as the COPY: a claimed number means these rows are staged already."""
        sql = import_psycopg2().sql
        table = self._table(table_name)
        target = sql.Identifier(table.schema, table.name)
        upsert = self.options.upsert_on_primary_key
        first_row = batch.counters.get("staged_rows", 0) if upsert else None
        extra = [(ROW_COLUMN, "bigint")] if upsert else []
        if self.options.delete_column is not None:
            extra.append((DELETE_COLUMN, "boolean"))
        if self.options.write_mode == "exactly-once":  # prepared: straight into the target
            ctx = batch.context
            stage = stage_table_name(ctx.sink_id, ctx.batch_id, table, ctx.attempt_id)
            ident = sql.Identifier(table.schema, stage)
            # one UNLOGGED table per task attempt: no per-row bookkeeping, dropped at commit
            known = self._stages_made(batch).get(stage)
            wanted = {c.name for c in columns}
            if known is None or not wanted <= known:
                ddl.create_stage(cur, ident, columns, extra=extra, exists=known is not None)
                cur.execute(
                    sql.SQL(
                        "INSERT INTO {} (table_name, sink_id) VALUES (%s, %s) "
                        "ON CONFLICT DO NOTHING"
                    ).format(sql.Identifier(table.schema, STAGING_REGISTRY)),
                    (stage, ctx.sink_id),
                )
                created[stage] = wanted
            if chunk is not None and not self._claim(cur, table.schema, stage, chunk):
                self.logger.info(
                    "SinkBatch %d of %s is staged already (a retry after a lost COMMIT "
                    "acknowledgement): not staged again",
                    chunk,
                    stage,
                )
                return stage
            data = self._encode(batch, columns, rows, first_row)
            batch.count("staged_rows", len(rows) if rows is not None else batch.num_rows)
            self._copy_into(cur, ident, data)
            return stage
        if self._needs_conflict_clause():
            # direct upsert/do-nothing: through a temporary table and INSERT ... ON CONFLICT
            data = self._encode(batch, columns, rows, first_row)
            batch.count("staged_rows", len(rows) if rows is not None else batch.num_rows)
            temp = sql.Identifier(
                "_qs_direct_" + hashlib.sha1(str(table).encode()).hexdigest()[:16]
            )
            ddl.create_stage(cur, temp, columns, extra=extra, exists=False, temporary=True)
            self._copy_into(cur, temp, data)
            cur.execute(self._insert_select(table, [(temp, 0)], [c.name for c in columns]))
        else:
            self._copy_into(cur, target, self._encode(batch, columns, rows, None))
        return table.name

    @staticmethod
    def _claim(cur: Any, schema: str, stage: str, chunk: int) -> bool:
        """Record in the staging registry that SinkBatch ``chunk`` of the task attempt is
        in ``stage`` (committed with its COPY); False when an earlier try of this very
        write did so already."""
        sql = import_psycopg2().sql
        cur.execute(
            sql.SQL(
                "UPDATE {} SET chunks = %s WHERE table_name = %s AND chunks < %s RETURNING 1"
            ).format(sql.Identifier(schema, STAGING_REGISTRY)),
            (chunk, stage, chunk),
        )
        return cur.fetchone() is not None

    def _encode(
        self,
        batch: SinkBatch,
        columns: list[Column],
        rows: pa.Array | None,
        first_row: int | None,
    ) -> CopyData:
        binary = self.options.copy_format == "binary"
        delete = self._delete_flags(batch) if self.options.delete_column is not None else None
        return copy_data(batch, columns, rows, first_row, delete=delete, binary=binary)

    def _delete_flags(self, batch: SinkBatch) -> pa.Array:
        """Per row: whether it deletes its key (delete_column true, or 'd'/'delete')."""
        assert self.options.delete_column is not None
        column = batch.column(self.options.delete_column)
        if pa.types.is_boolean(column.type):
            flags = column
        else:
            text = pc.utf8_lower(pc.cast(column, pa.string()))
            flags = pc.is_in(text, pa.array(["d", "delete"]))
        return pc.fill_null(flags, False)

    @staticmethod
    def _copy_into(cur: Any, target: Any, data: CopyData) -> None:
        sql = import_psycopg2().sql
        names = sql.SQL(", ").join(sql.Identifier(n) for n in data.columns)
        statement = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT {})").format(
            target, names, sql.SQL(data.fmt)
        )
        cur.copy_expert(statement, data.stream())

    def _needs_conflict_clause(self) -> bool:
        return self.options.upsert_on_primary_key or self.options.on_conflict_do_nothing

    def _insert_select(
        self, table: TableSchema, sources: list[tuple[Any, int]], columns: list[str]
    ) -> Any:
        """INSERT INTO target the rows of ``sources`` ((table, partition), in order), with
        the conflict handling asked for; only ``columns`` are written (and updated)."""
        sql = import_psycopg2().sql
        opts = self.options
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        target = sql.Identifier(table.schema, table.name)
        if opts.upsert_on_primary_key:
            row = sql.Identifier(ROW_COLUMN)
            delete = sql.Identifier(DELETE_COLUMN)
            deletes = opts.delete_column is not None
            picked = sql.SQL(", {}").format(delete) if deletes else sql.SQL("")
            union = sql.SQL(" UNION ALL ").join(
                sql.SQL("SELECT {}{}, {} AS __qs_partition, {} FROM {}").format(
                    cols, picked, sql.Literal(partition), row, source
                )
                for source, partition in sources
            )
            pk_names = list(opts.primary_key_columns)
            pk = sql.SQL(", ").join(sql.Identifier(c) for c in pk_names)
            updates = [c for c in columns if c not in pk_names]
            action = (
                sql.SQL("DO UPDATE SET ")
                + sql.SQL(", ").join(
                    sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in updates
                )
                if updates
                else sql.SQL("DO NOTHING")
            )
            # the last row of each key wins: the latest partition, then the latest row
            last = sql.SQL(
                "SELECT DISTINCT ON ({pk}) {cols}{picked} FROM ({union}) s "
                "ORDER BY {pk}, __qs_partition DESC, {row} DESC"
            ).format(pk=pk, cols=cols, picked=picked, union=union, row=row)
            if not deletes:
                return sql.SQL("INSERT INTO {} ({}) {} ON CONFLICT ({}) {}").format(
                    target, cols, last, pk, action
                )
            # a key whose last row deletes it is deleted, the others upserted: one
            # statement, so both see the same snapshot (their keys are disjoint)
            matches = sql.SQL(" AND ").join(
                sql.SQL("t.{0} = l.{0}").format(sql.Identifier(c)) for c in pk_names
            )
            return sql.SQL(
                "WITH l AS MATERIALIZED ({last}), d AS (DELETE FROM {target} t USING l "
                "WHERE l.{delete} AND {matches}) INSERT INTO {target} ({cols}) "
                "SELECT {cols} FROM l WHERE NOT l.{delete} ON CONFLICT ({pk}) {action}"
            ).format(
                last=last,
                target=target,
                delete=delete,
                matches=matches,
                cols=cols,
                pk=pk,
                action=action,
            )
        union = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {} FROM {}").format(cols, source) for source, _ in sources
        )
        conflict = (
            sql.SQL(" ON CONFLICT DO NOTHING") if opts.on_conflict_do_nothing else sql.SQL("")
        )
        return sql.SQL("INSERT INTO {} ({}) ").format(target, cols) + union + conflict

    # ------------------------------------------------------------------ driver: commit

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        if self.options.write_mode == "direct":
            return
        if self.options.write_mode == "prepared":
            # idempotent (the ledger row, the decided ids): retried when the connection breaks
            self.options.retry_policy().call(
                lambda: self._commit_prepared(context, receipts),
                stats=RetryStats(),
                what=f"postgresql commit of batch {context.batch_id}",
            )
            return
        # target -> [(staging table, partition)], in partition order; rows per staging table
        sources: dict[str, list[tuple[str, int]]] = {}
        staged_rows: dict[str, int] = {}
        for receipt in sorted(receipts, key=lambda r: r.partition_id):
            for staged in receipt.staged:
                for name, (stage, rows) in staged.tables.items():
                    if (stage, receipt.partition_id) not in sources.setdefault(name, []):
                        sources[name].append((stage, receipt.partition_id))
                    staged_rows[stage] = staged_rows.get(stage, 0) + rows
        if self.overwrite and self.options.table_name is not None:
            sources.setdefault(self.options.table_name, [])
        if not context.ledgered:  # no ledger: a retry after a lost COMMIT could repeat it
            self._commit_once(context, sources, staged_rows)
            return
        # a ledgered commit is idempotent (the ledger row): retry it when the connection
        # breaks (a server restart); a landed commit is found in the ledger and skipped
        self.options.retry_policy().call(
            lambda: self._commit_once(context, sources, staged_rows),
            stats=RetryStats(),
            what=f"postgresql commit of batch {context.batch_id}",
        )

    def _commit_once(
        self,
        context: CommitContext,
        sources: dict[str, list[tuple[str, int]]],
        staged_rows: dict[str, int],
    ) -> None:
        sql = import_psycopg2().sql
        schema = self.options.schema_name
        rows = sum(staged_rows.values())
        with self._session() as cur:
            if context.ledgered:
                self._fence(cur, context)
                cur.execute(
                    sql.SQL(
                        "INSERT INTO {} (sink_id, batch_id, query_id, tables, rows) "
                        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1"
                    ).format(sql.Identifier(schema, LEDGER_TABLE)),
                    (context.sink_id, context.batch_id, context.query_id, sorted(sources), rows),
                )
                if cur.fetchone() is None:
                    log_already_committed(context.sink_id, context.batch_id)
                    self._drop_stages(cur, context, None)
                    return
            stage_columns = ddl.tables_columns(
                cur, schema, [stage for staged in sources.values() for stage, _ in staged]
            )
            for name in sorted(sources):
                table = self._table(name)
                if self.overwrite:
                    cur.execute(
                        sql.SQL("TRUNCATE {}").format(sql.Identifier(table.schema, table.name))
                    )
                if sources[name]:
                    self._move(cur, table, sources[name], stage_columns, context, staged_rows)
            self._drop_stages(cur, context, None)
            if context.ledgered:
                self._prune(cur, context)

    def _check_staged(
        self, cur: Any, context: CommitContext, staged_rows: dict[str, int], stages: list[str]
    ) -> None:
        """CommitError unless each of ``stages`` holds the rows its task staged.

        Staging tables are UNLOGGED: PostgreSQL empties them in crash recovery, and they
        are empty on a promoted replica. A micro-batch whose staged rows are gone is not
        committed (nor recorded in the ledger): its replay stages it again."""
        sql = import_psycopg2().sql
        schema = self.options.schema_name
        cur.execute(
            sql.SQL(" UNION ALL ").join(
                sql.SQL("SELECT {}::text, count(*) FROM {}").format(
                    sql.Literal(stage), sql.Identifier(schema, stage)
                )
                for stage in stages
            )
        )
        found = dict(cur.fetchall())
        short = [(s, found[s], staged_rows[s]) for s in stages if found[s] != staged_rows[s]]
        if not short:
            return
        again = "restart the query" if context.streaming else "run the write again"
        detail = ", ".join(f"{s} holds {n} of {want}" for s, n, want in short[:3])
        more = f" (and {len(short) - 3} more)" if len(short) > 3 else ""
        raise CommitError(
            f"postgresql: batch {context.batch_id} cannot be committed: the rows its tasks "
            f"staged are not all there ({detail}{more} rows). PostgreSQL empties UNLOGGED "
            "staging tables when it recovers from a crash and on a promoted replica; nothing "
            f"of this batch was written: {again} to stage it again"
        )

    def _commit_prepared(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        """Decide (ledger row + decided ids, one transaction), then settle."""
        sql = import_psycopg2().sql
        schema = self.options.schema_name
        ordered = sorted(receipts, key=lambda r: r.partition_id)
        staged = [s for r in ordered for s in r.staged]
        gids = [gid for s in staged for gid in s.prepared]
        tables = sorted({name for s in staged for name in s.tables})
        rows = sum(count for s in staged for _, count in s.tables.values())
        with self._decisions(context.sink_id) as cur:
            cur.execute("BEGIN")
            decided = True
            if context.ledgered:
                self._fence(cur, context)
                cur.execute(
                    sql.SQL(
                        "INSERT INTO {} (sink_id, batch_id, query_id, tables, rows) "
                        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1"
                    ).format(sql.Identifier(schema, LEDGER_TABLE)),
                    (context.sink_id, context.batch_id, context.query_id, tables, rows),
                )
                decided = cur.fetchone() is not None
                if not decided:
                    log_already_committed(context.sink_id, context.batch_id)
            if decided and gids:
                cur.execute(
                    sql.SQL(
                        "INSERT INTO {} (gid, sink_id) SELECT unnest(%s::text[]), %s "
                        "ON CONFLICT DO NOTHING"
                    ).format(sql.Identifier(schema, DECIDED_TABLE)),
                    (gids, context.sink_id),
                )
            if context.ledgered:
                self._prune(cur, context)
            cur.execute("COMMIT")
            self._settle(cur, context.sink_id, context.batch_id)

    @contextlib.contextmanager
    def _decisions(self, sink_id: str | None = None) -> Iterator[Any]:
        """An autocommit cursor (COMMIT PREPARED cannot run in a transaction block) on a
        new connection, holding the sink id's advisory lock (the one the ledger's commit
        transaction takes) for the whole session when ``sink_id`` is given."""
        psycopg2 = import_psycopg2()
        conn = connect(self.options)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                if sink_id is not None:
                    cur.execute(
                        "SELECT pg_advisory_lock(hashtextextended(%s, 0))",
                        (self._lock_key(sink_id),),
                    )
                yield cur
        except psycopg2.Error as exc:
            raise translate(exc, describe(self.options)) from exc
        finally:
            conn.close()  # releases the session's advisory lock

    def _settle(self, cur: Any, sink_id: str | None, batch_id: int | None) -> None:
        """Finish prepared transactions: COMMIT PREPARED every decided one (any sink's: a
        driver may have died after deciding), ROLLBACK PREPARED the undecided ones of
        ``sink_id`` up to ``batch_id`` (failed attempts, replays of a committed batch) and
        any sink's undecided ones older than ``staging_max_age_hours`` (abandoned). Only
        transactions of this schema are rolled back: another schema's are decided in that
        schema's table, which this sink does not read."""
        psycopg2 = import_psycopg2()
        sql = psycopg2.sql
        decided_table = sql.Identifier(self.options.schema_name, DECIDED_TABLE)
        cur.execute(
            sql.SQL(
                "SELECT p.gid, d.gid IS NOT NULL, "
                "p.prepared < now() - make_interval(secs => %s) FROM pg_prepared_xacts p "
                "LEFT JOIN {} d ON d.gid = p.gid WHERE p.database = current_database()"
            ).format(decided_table),
            (self.options.staging_max_age_hours * 3600,),
        )
        for gid, decided, old in cur.fetchall():
            action = settle_action(
                gid,
                decided=decided,
                old=old,
                schema=self.options.schema_name,
                sink_id=sink_id,
                batch_id=batch_id,
            )
            if action is None:
                continue
            if action == "abandoned":
                self.logger.warning("rolling back abandoned prepared transaction %s", gid)
            statement = "COMMIT PREPARED %s" if action == "commit" else "ROLLBACK PREPARED %s"
            with contextlib.suppress(psycopg2.errors.UndefinedObject):
                cur.execute(statement, (gid,))  # unless another committer finished it
        cur.execute(
            sql.SQL(
                "DELETE FROM {} d WHERE NOT EXISTS (SELECT 1 FROM pg_prepared_xacts p "
                "WHERE p.gid = d.gid AND p.database = current_database())"
            ).format(decided_table)
        )

    def _move(
        self,
        cur: Any,
        table: TableSchema,
        sources: list[tuple[str, int]],
        stage_columns: dict[str, dict[str, str]],
        context: CommitContext,
        staged_rows: dict[str, int],
    ) -> None:
        """Move the staged rows of one target: each staging table with its own columns (a
        later task may have written more columns than an earlier one), consecutive ones
        with the same columns in one statement, in partition order.

        A statement that moved as many rows as the tasks staged proves its staging tables
        whole (a retried write never stages twice); one that moved fewer (staged rows lost,
        or absorbed by upsert, do-nothing or a trigger) has its staging tables counted
        (:meth:`_check_staged`): the check costs nothing when nothing is missing."""
        sql = import_psycopg2().sql
        missing = [stage for stage, _ in sources if stage not in stage_columns]
        if missing:
            raise CommitError(
                f"postgresql: the staging table(s) {', '.join(missing)} of {table} are gone "
                "(dropped by hand, or swept as abandoned by staging_max_age_hours); the "
                "micro-batch cannot be committed; restart the query to write it again"
            )
        union: dict[str, str] = {}
        runs: list[tuple[list[str], list[tuple[Any, int]]]] = []
        for stage, partition in sources:
            names = [c for c in stage_columns[stage] if c not in (ROW_COLUMN, DELETE_COLUMN)]
            for c in names:
                union.setdefault(c, stage_columns[stage][c])
            ident = sql.Identifier(table.schema, stage)
            if runs and runs[-1][0] == names:
                runs[-1][1].append((ident, partition))
            else:
                runs.append((names, [(ident, partition)]))
        # the target may have been dropped or altered since the tasks checked it
        typed = self._ensure_now(cur, table.name, [Column(n, t, "value") for n, t in union.items()])
        taken = {c.name for c in typed}  # a discard contract may leave some out
        for names, run in runs:
            cur.execute(self._insert_select(table, run, [n for n in names if n in taken]))
            stages = [ident.strings[-1] for ident, _ in run]
            if cur.rowcount < sum(staged_rows.get(stage, 0) for stage in stages):
                self._check_staged(cur, context, staged_rows, stages)

    def _owners(self, cur: Any, sink_id: str) -> set[str]:
        """The query ids holding ledger rows of ``sink_id`` (the fence's input)."""
        sql = import_psycopg2().sql
        cur.execute(
            sql.SQL("SELECT DISTINCT query_id FROM {} WHERE sink_id = %s").format(
                sql.Identifier(self.options.schema_name, LEDGER_TABLE)
            ),
            (sink_id,),
        )
        return {row[0] for row in cur.fetchall()}

    def _fence(self, cur: Any, context: CommitContext) -> None:
        """Serialise the sink id's commits, then apply the ledger's fencing rule."""
        sql = import_psycopg2().sql
        ledger = sql.Identifier(self.options.schema_name, LEDGER_TABLE)
        cur.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (self._lock_key(context.sink_id),),
        )
        dropped = fence_owners(
            context.sink_id,
            context.query_id,
            self._owners(cur, context.sink_id),
            self.options.takeover_query_id,
        )
        if dropped is not None:
            self.logger.warning(
                "sink id %s: taking over from query %s (takeover_query_id): its ledger rows "
                "are deleted",
                context.sink_id,
                dropped,
            )
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE sink_id = %s AND query_id = %s").format(ledger),
                (context.sink_id, dropped),
            )

    def _lock_key(self, sink_id: str) -> str:
        return f"quixsinks:{self.options.schema_name}:{sink_id}"

    def _prune(self, cur: Any, context: CommitContext) -> None:
        """Old ledger rows of this sink id; staging tables nobody will commit."""
        sql = import_psycopg2().sql
        schema = self.options.schema_name
        cur.execute(
            sql.SQL("DELETE FROM {} WHERE sink_id = %s AND batch_id < %s").format(
                sql.Identifier(schema, LEDGER_TABLE)
            ),
            (context.sink_id, context.batch_id - self.options.ledger_keep_batches),
        )
        cur.execute(
            sql.SQL(
                "DELETE FROM {} WHERE created_at < now() - make_interval(secs => %s) "
                "RETURNING table_name"
            ).format(sql.Identifier(schema, STAGING_REGISTRY)),
            (self.options.staging_max_age_hours * 3600,),
        )
        abandoned = [row[0] for row in cur.fetchall()]
        if abandoned:
            self.logger.warning(
                "dropping %d abandoned staging table(s) older than %g h",
                len(abandoned),
                self.options.staging_max_age_hours,
            )
            cur.execute(
                sql.SQL("DROP TABLE IF EXISTS {}").format(
                    sql.SQL(", ").join(sql.Identifier(schema, n) for n in abandoned)
                )
            )

    def _drop_stages(self, cur: Any, context: CommitContext, only: list[str] | None) -> None:
        """Drop this sink's staging tables of this and earlier batches (those of failed
        task attempts included), or only the tables named in ``only``."""
        sql = import_psycopg2().sql
        schema = self.options.schema_name
        names = ddl.stage_tables(cur, schema, stage_prefix(context.sink_id))
        doomed = [
            n
            for n in names
            if (
                n in only
                if only is not None
                else (stage_batch(n, context.sink_id) or 0) <= context.batch_id
            )
        ]
        if doomed:
            cur.execute(
                sql.SQL("DROP TABLE IF EXISTS {}").format(
                    sql.SQL(", ").join(sql.Identifier(schema, n) for n in doomed)
                )
            )
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE table_name = ANY(%s)").format(
                    sql.Identifier(schema, STAGING_REGISTRY)
                ),
                (doomed,),
            )

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        if self.options.write_mode == "direct":
            return
        if self.options.write_mode == "prepared":
            gids = [gid for r in receipts for s in r.staged for gid in s.prepared]
            if gids:
                with self._decisions(context.sink_id) as cur:
                    self._rollback_undecided(cur, gids)
            return
        stages = [stage for r in receipts for s in r.staged for stage, _ in s.tables.values()]
        if stages:
            with self._session() as cur:
                self._drop_stages(cur, context, stages)

    def _rollback_undecided(self, cur: Any, gids: list[str]) -> None:
        """ROLLBACK PREPARED those of ``gids`` that no commit has decided (never a landed
        batch's: a commit that failed after deciding is finished by the next one)."""
        psycopg2 = import_psycopg2()
        cur.execute(
            psycopg2.sql.SQL(
                "SELECT p.gid FROM pg_prepared_xacts p WHERE p.gid = ANY(%s) AND p.database = "
                "current_database() AND NOT EXISTS (SELECT 1 FROM {} d WHERE d.gid = p.gid)"
            ).format(psycopg2.sql.Identifier(self.options.schema_name, DECIDED_TABLE)),
            (gids,),
        )
        for (gid,) in cur.fetchall():
            with contextlib.suppress(psycopg2.errors.UndefinedObject):
                cur.execute("ROLLBACK PREPARED %s", (gid,))


def _rollback(conn: Any) -> bool:
    """Roll back ``conn``; False (and nothing raised) when the connection is broken."""
    if conn.closed:
        return False
    try:
        conn.rollback()
    except import_psycopg2().Error:
        return False
    return True
