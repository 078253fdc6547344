"""The PostgreSQL sink: COPY into staging tables on executors, one transaction on the driver.

Executor (``write``): the rows of a SinkBatch are encoded from Arrow (binary COPY by
pgpq, CSV where it cannot map a column, see ``wire.py``) and loaded with ``COPY ... FROM
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

Row-level errors (see docs/sinks/postgresql.md, "Row-level errors"): a value PostgreSQL
refuses for one row (SQLSTATE class 22 or 23 at the task's COPY), a NUL character, a null
primary key or a row naming no valid table is refused per row (``on_error``), isolated by
savepoints inside the task's transaction; refusals are handed over once the write
committed. The ledger row keeps the batch's commit record (``record``), which
:meth:`PostgreSQLSink.commit_records` reads back.

The write modes are strategies in ``modes.py`` (this module reads: options and
preflight, the executor write, the driver commit and abort); the client and the error
translation are in ``client.py``, the ledger store in ``ledger.py``.

``write_mode=direct`` skips staging: each SinkBatch is COPYed straight into the target
(at-least-once: a replayed micro-batch is written again, unless upsert or do-nothing
absorbs the repeat).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.batch import SinkBatch
from quixsinks.core.clients import MachineSlots
from quixsinks.core.commits import CommitRecord
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task

from . import ddl, ledger
from .client import (
    describe,
    import_psycopg2,
    is_stale,
    rollback_cached,
    session,
    task_connection,
    translate,
)
from .modes import Load, Refused, StagedRows, WriteMode, write_mode
from .options import PostgreSQLOptions
from .schema import (
    LEDGER_TABLE,
    TEXT_TYPES,
    Column,
    TableSchema,
    column_plan,
    is_binary,
    non_utf8_rows,
    null_key_rows,
)
from .wire import discard, route

__all__ = ["PostgreSQLSink", "StagedRows"]


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
        self.mode: WriteMode = write_mode(self)

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
            if pa.types.is_nested(schema.field(opts.table_name_column).type):
                raise OptionError(
                    f"option 'table_name_column' names column {opts.table_name_column!r} of "
                    f"type {schema.field(opts.table_name_column).type}; it must hold text "
                    "(cast it to string in Spark)",
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
        with session(self.options) as cur:
            ddl.ensure_schema(cur, self.options.schema_name)
            if self.options.exactly_once:
                ddl.ensure_ledger(cur, self.options.schema_name)
            self.mode.preflight(cur)
            if self.columns is not None and self.options.table_name is not None:
                self._ensure(cur, self.options.table_name, self.columns)
        self.mode.recover()

    # ------------------------------------------------------------------ tables

    def _ensure(self, cur: Any, table_name: str, columns: list[Column]) -> list[Column]:
        """The target's columns for ``columns``, made so once per process (DDL commits)."""
        key = (describe(self.options), self.options.schema_name, table_name, tuple(columns))
        typed = ddl.ENSURED.get(key)
        if typed is None:
            table = TableSchema(self.options.schema_name, table_name)
            typed = self.mode.ensure(cur, table, lambda: self.ensure_now(cur, table_name, columns))
            cur.connection.commit()
            ddl.ENSURED.put(key, typed)
        return typed

    def ensure_now(self, cur: Any, table_name: str, columns: list[Column]) -> list[Column]:
        """Make the table able to take ``columns`` (in ``cur``'s transaction); its columns."""
        return ddl.ensure_table(
            cur,
            TableSchema(self.options.schema_name, table_name),
            columns,
            primary_key_columns=self.options.primary_key_columns,
            auto_update=self.options.schema_auto_update,
            json_values=self.columns is None,
            contract=self.options.schema_contract,
        )

    # ------------------------------------------------------------------ executor

    def setup(self, task: Task) -> None:
        opts = self.options
        slot = MachineSlots("pg", f"{opts.host}:{opts.port}", opts.max_connections_per_executor)
        slot.acquire()
        task.on_close(slot.release)

    def check_fence(self, task: Task) -> None:
        if self.options.exactly_once:
            task.retry(lambda: self._check_fence(task), what="postgresql fence check")

    def _check_fence(self, task: Task) -> None:
        conn = task_connection(self.options, task)
        try:
            with conn.cursor() as cur:
                try:
                    ledger.check(cur, self.options, task.context.sink_id, task.context.query_id)
                finally:
                    conn.rollback()  # the connection goes back idle, fenced or not
        except import_psycopg2().Error as exc:
            rollback_cached(self.options, conn)
            raise translate(exc, describe(self.options)) from exc

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
                values, key_type, include_metadata=opts.include_metadata, exclude=self.exclude
            )
        fail = opts.on_error == "fail"
        early = Refused(batch, fail)  # rows refused before any statement
        targets: list[tuple[str, pa.Array | None]]
        if opts.table_name is not None:
            targets = [(opts.table_name, None)]
        else:
            assert opts.table_name_column is not None
            targets = list(route(batch, opts.table_name_column, early))
        if opts.primary_key_columns:
            targets = _without_null_keys(batch, columns, opts.primary_key_columns, targets, early)
        for refreshed in (False, True):
            scratch = self.mode.begin(batch)
            conn = task_connection(opts, batch.task)
            refused = Refused(batch, fail)
            try:
                staged = self._write_once(conn, batch, targets, columns, scratch, refused)
            except psycopg2.Error as exc:
                rollback_cached(opts, conn)
                if not refreshed and is_stale(exc):
                    # the table changed behind our back since this process ensured it
                    self.logger.info("table changed since it was checked (%s): retrying", exc)
                    for name, _ in targets:
                        ddl.ENSURED.forget(describe(opts), opts.schema_name, name)
                    continue
                where = f"{describe(opts)} table {opts.table_name or '*'}"
                # a row-level error here (a deferred constraint at PREPARE or COMMIT) is
                # isolated by the glue: this write left nothing behind
                raise translate(exc, where, rows=True) from exc
            except BaseException:
                rollback_cached(opts, conn)
                raise
            self.mode.loaded(batch, scratch)
            early.apply(refused)
            return staged
        raise AssertionError("unreachable")

    def _write_once(
        self,
        conn: Any,
        batch: SinkBatch,
        targets: list[tuple[str, pa.Array | None]],
        columns: list[Column],
        scratch: dict[str, Any],
        refused: Refused,
    ) -> StagedRows:
        """DDL first (it commits), then every COPY of this batch in one transaction."""
        staged = StagedRows()
        with conn.cursor() as cur:
            typed = {name: self._ensure_for_write(cur, name, columns) for name, _ in targets}
            for table_name, rows in targets:
                if rows is not None and len(rows) == 0:  # every row of it was refused
                    continue
                kept = typed[table_name]
                if len(kept) < len(columns):  # schema_contract discard_row / discard_value
                    whole_rows = self.options.schema_contract == "discard_row"
                    rows = discard(batch, columns, kept, rows, whole_rows=whole_rows)
                    if rows is not None and len(rows) == 0:
                        continue
                table = TableSchema(self.options.schema_name, table_name)
                rows = self._without_non_utf8_keys(batch, table, kept, rows, refused)
                if rows is not None and len(rows) == 0:
                    continue
                load = Load(batch, table, kept, rows, refused)
                staged.tables[table_name] = (self.mode.load(cur, load, scratch), load.written)
            self.mode.seal(cur, batch, staged)
        conn.commit()
        return staged

    def _without_non_utf8_keys(
        self,
        batch: SinkBatch,
        table: TableSchema,
        kept: list[Column],
        rows: pa.Array | None,
        refuse: Refused,
    ) -> pa.Array | None:
        """``rows`` less those whose binary key is not UTF-8, refused, when the table's
        ``__key`` is text (Quix's) and key_text_format is utf8; the rows are checked
        before any of them is written."""
        column = next((c for c in kept if c.source == "key"), None)
        if (
            column is None
            or self.options.key_text_format != "utf8"
            or column.pg_type.split("(")[0] not in TEXT_TYPES
            or not is_binary(batch.keys().type)
        ):
            return rows
        bad = non_utf8_rows(batch.keys(), rows)
        if not bad:
            return rows
        for row in bad:
            refuse(
                row,
                RecordError(
                    f"postgresql: the key of row {row} of partition {batch.partition_id} is "
                    f"not valid UTF-8, and column {column.name!r} of table {table} is "
                    f"{column.pg_type}, which holds the key's text; write keys as PostgreSQL's "
                    "bytea text (\\x...) with key_text_format=hex (what Quix's PostgreSQLSink "
                    "writes for a bytes key), or decode the key in Spark",
                    column=column.name,
                    row=row,
                ),
            )
        keep = rows.to_pylist() if rows is not None else range(batch.num_rows)
        refused = set(bad)
        return pa.array([r for r in keep if r not in refused], pa.int64())

    def _ensure_for_write(self, cur: Any, table_name: str, columns: list[Column]) -> list[Column]:
        """:meth:`_ensure` on an executor: its errors concern the table, never a row."""
        psycopg2 = import_psycopg2()
        try:
            return self._ensure(cur, table_name, columns)
        except psycopg2.Error as exc:
            if is_stale(exc):
                raise  # write() checks the table again
            raise translate(exc, f"{describe(self.options)} table {table_name}") from exc

    # ------------------------------------------------------------------ driver: commit

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        self.mode.commit(context, receipts)

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        self.mode.abort(context, receipts)

    # ------------------------------------------------------------------ reading back

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The commit records kept in the ledger table (``record`` column) of the sink's
        schema, oldest first: the last ``ledger_keep_batches`` batches of each sink id.
        Needs only the connection options (connection and statement timeouts apply)."""
        with session(self.options) as cur:
            columns = ddl.existing_columns(cur, self.options.schema_name, LEDGER_TABLE)
            if columns is None or "record" not in columns:
                return []  # no ledger here, or one written before records were kept
            return ledger.PostgresLedgerStore(cur, self.options.schema_name).records(sink_id)


def _without_null_keys(
    batch: SinkBatch,
    columns: list[Column],
    required: tuple[str, ...],
    targets: list[tuple[str, pa.Array | None]],
    refuse: Refused,
) -> list[tuple[str, pa.Array | None]]:
    """``targets`` less the rows with a null primary key, which go to ``refuse``."""
    masks = null_key_rows(batch, columns, required)
    nulls: pa.Array | None = None
    for mask in masks.values():
        nulls = mask if nulls is None else pc.or_(nulls, mask)
    if nulls is None or not pc.any(nulls).as_py():
        return targets
    out: list[tuple[str, pa.Array | None]] = []
    for name, rows in targets:
        rows = rows if rows is not None else pa.array(range(batch.num_rows), pa.int64())
        bad = pc.array_take(nulls, rows)
        for row in rows.filter(bad).to_pylist():
            column = next(c for c, mask in masks.items() if mask[row].as_py())
            refuse(
                row,
                RecordError(
                    f"postgresql: primary key column {column!r} is null in row {row} of "
                    f"partition {batch.partition_id}; a primary key cannot be null",
                    column=column,
                    row=row,
                ),
            )
        out.append((name, rows.filter(pc.invert(bad))))
    return out
