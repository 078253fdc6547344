"""The PostgreSQL sink: COPY into a staging table on executors, one transaction on the driver.

Executor (``write``): the rows of a SinkBatch are converted to CSV by Arrow and loaded
with ``COPY ... FROM STDIN`` into the target's UNLOGGED staging table, tagged with the
sink id, the micro-batch id, the task attempt and the Spark partition, in one
transaction per SinkBatch (a retried write leaves nothing behind).

Driver (``commit``), one transaction: insert the ledger row ``(sink id, batch id)``
(``ON CONFLICT DO NOTHING``: if it exists, the batch was committed before and is
skipped), truncate the target for overwrite, move the winning attempts' rows into the
target (``INSERT ... SELECT``, with ``ON CONFLICT`` for upsert or do-nothing), delete the
batch's staged rows, including those of failed attempts. Either all of it happens or none.

``write_mode=direct`` skips staging: each SinkBatch is COPYed straight into the target
(at-least-once: a replayed micro-batch is written again, unless upsert or do-nothing
absorbs the repeat).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from quixsinks.core.batch import SinkBatch
from quixsinks.core.errors import OptionError, QuixSinksError
from quixsinks.core.sink import CommitContext, Receipt, Sink

from . import ddl
from .client import ConnectionSlot, connect, describe, import_psycopg2, translate
from .options import PostgreSQLOptions
from .schema import (
    LEDGER_TABLE,
    Column,
    TableSchema,
    check_not_null,
    column_plan,
    copy_table,
)

__all__ = ["PostgreSQLSink", "StagedRows"]

_CSV = pa_csv.WriteOptions(include_header=False, quoting_style="needed")
# Columns ensured in this process: (database, schema, table, columns) -> typed columns
_ENSURED: dict[tuple[Any, ...], list[Column]] = {}


@dataclass
class StagedRows:
    """What one write staged: rows per target table."""

    tables: dict[str, int] = field(default_factory=dict)


class PostgreSQLSink(Sink[PostgreSQLOptions, StagedRows]):
    """Writes to PostgreSQL tables; exactly-once. See docs/sinks/postgresql.md."""

    name: ClassVar[str] = "postgresql"
    options_class = PostgreSQLOptions
    guarantee = "exactly-once"
    extra = "postgresql"
    supports_overwrite = True
    _transient = ("_conn", "_slot")

    def __init__(self, options: PostgreSQLOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.columns: list[Column] | None = None
        self.exclude: tuple[str, ...] = ()
        self._conn: Any = None
        self._slot: ConnectionSlot | None = None

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
        if self.overwrite and opts.write_mode == "direct":
            raise OptionError(
                "postgresql: overwrite needs write_mode=exactly-once (the truncate and the load "
                "must be one transaction)",
                option="write_mode",
                value="direct",
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
            if self.options.write_mode == "exactly-once":
                ddl.ensure_ledger(cur, self.options.schema_name)
            if self.columns is not None and self.options.table_name is not None:
                self._ensure(cur, self.options.table_name, self.columns)

    # ------------------------------------------------------------------ shared

    def _table(self, name: str) -> TableSchema:
        return TableSchema(self.options.schema_name, name)

    def _ensure(self, cur: Any, table_name: str, columns: list[Column]) -> list[Column]:
        key = (describe(self.options), self.options.schema_name, table_name, tuple(columns))
        typed = _ENSURED.get(key)
        if typed is None:
            typed = ddl.ensure_table(
                cur,
                self._table(table_name),
                columns,
                primary_key_columns=self.options.primary_key_columns,
                auto_update=self.options.schema_auto_update,
                with_stage=self.options.write_mode == "exactly-once",
            )
            cur.connection.commit()
            _ENSURED[key] = typed
        return typed

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
            conn.rollback()
            raise translate(exc, describe(self.options)) from exc
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    # ------------------------------------------------------------------ executor

    def setup(self) -> None:
        self._slot = ConnectionSlot(self.options)
        self._slot.acquire()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._slot is not None:
            self._slot.release()
            self._slot = None

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.options)
        return self._conn

    def write(self, batch: SinkBatch) -> StagedRows:
        psycopg2 = import_psycopg2()
        opts = self.options
        columns = self.columns
        if columns is None:  # JSON values: the columns are known only now
            key_type = batch.keys().type if self.records and self.records.key else None
            columns = column_plan(
                batch.values().schema,
                key_type,
                include_metadata=opts.include_metadata,
                exclude=self.exclude,
            )
        check_not_null(batch, columns, opts.primary_key_columns)
        staged = StagedRows()
        conn = self._connection()
        targets = self._tables(batch)
        try:
            with conn.cursor() as cur:
                # DDL first (it commits), then every COPY of this batch in one transaction
                typed = {name: self._ensure(cur, name, columns) for name, _ in targets}
                for table_name, rows in targets:
                    self._copy(cur, batch, table_name, typed[table_name], rows)
                    staged.tables[table_name] = len(rows) if rows is not None else batch.num_rows
            conn.commit()
        except psycopg2.Error as exc:
            conn.rollback()
            raise translate(exc, f"{describe(opts)} table {opts.table_name or '*'}") from exc
        except BaseException:
            conn.rollback()
            raise
        return staged

    def _tables(self, batch: SinkBatch) -> list[tuple[str, pa.Array | None]]:
        """(table name, row indices or None for all) for each target table of the batch."""
        if self.options.table_name is not None:
            return [(self.options.table_name, None)]
        assert self.options.table_name_column is not None
        names = batch.column(self.options.table_name_column)
        if names.null_count:
            row = pc.index(pc.is_null(names), True).as_py()
            raise QuixSinksError(
                f"postgresql: 'table_name_column' {self.options.table_name_column!r} is null "
                f"in row {row}; every row must name its table"
            )
        out = []
        for name in pc.unique(names).to_pylist():
            rows = pc.indices_nonzero(pc.equal(names, name))
            out.append((str(name), rows))
        return out

    def _copy(
        self,
        cur: Any,
        batch: SinkBatch,
        table_name: str,
        columns: list[Column],
        rows: pa.Array | None,
    ) -> None:
        sql = import_psycopg2().sql
        table = self._table(table_name)
        staging = self.options.write_mode == "exactly-once"
        ctx = batch.context
        data = copy_table(
            batch,
            columns,
            rows,
            (ctx.sink_id, ctx.batch_id, ctx.attempt_id, ctx.partition_id) if staging else None,
        )
        names = [sql.Identifier(n) for n in data.column_names]
        target = table.stage if staging else table.name
        if not staging and self._needs_conflict_clause():
            # direct upsert/do-nothing: through a temporary table and INSERT ... ON CONFLICT
            temp = sql.Identifier(table.stage.replace("_stage_", "_direct_"))
            cur.execute(
                sql.SQL(
                    "CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS) "
                    "ON COMMIT DELETE ROWS"
                ).format(temp, sql.Identifier(table.schema, table.name))
            )
            self._copy_into(cur, temp, names, data)
            cur.execute(self._insert_select(table, temp, [c.name for c in columns], None))
            return
        self._copy_into(cur, sql.Identifier(table.schema, target), names, data)

    @staticmethod
    def _copy_into(cur: Any, target: Any, names: list[Any], data: pa.Table) -> None:
        sql = import_psycopg2().sql
        out = pa.BufferOutputStream()
        pa_csv.write_csv(data, out, write_options=_CSV)
        statement = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(
            target, sql.SQL(", ").join(names)
        )
        cur.copy_expert(statement, io.BytesIO(out.getvalue().to_pybytes()))

    def _needs_conflict_clause(self) -> bool:
        return self.options.upsert_on_primary_key or self.options.on_conflict_do_nothing

    def _insert_select(
        self, table: TableSchema, source: Any, columns: list[str], where: Any
    ) -> Any:
        """INSERT INTO target SELECT from source [WHERE], with the conflict handling asked."""
        sql = import_psycopg2().sql
        opts = self.options
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        pk = sql.SQL(", ").join(sql.Identifier(c) for c in opts.primary_key_columns)
        condition = sql.SQL(" WHERE {}").format(where) if where is not None else sql.SQL("")
        order = sql.SQL("__qs_partition, __qs_seq") if where is not None else None
        if opts.upsert_on_primary_key:
            # last row of each key wins: the latest partition, then the latest row in it
            latest = (
                sql.SQL(", __qs_partition DESC, __qs_seq DESC")
                if where is not None
                else sql.SQL("")
            )
            select = sql.SQL(
                "SELECT DISTINCT ON ({pk}) {cols} FROM {src}{cond} ORDER BY {pk}{latest}"
            ).format(pk=pk, cols=cols, src=source, cond=condition, latest=latest)
            updates = [c for c in columns if c not in opts.primary_key_columns]
            action = (
                sql.SQL("DO UPDATE SET ")
                + sql.SQL(", ").join(
                    sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in updates
                )
                if updates
                else sql.SQL("DO NOTHING")
            )
            conflict = sql.SQL(" ON CONFLICT ({}) ").format(pk) + action
        else:
            select = sql.SQL("SELECT {cols} FROM {src}{cond}").format(
                cols=cols, src=source, cond=condition
            )
            if order is not None:
                select += sql.SQL(" ORDER BY ") + order
            conflict = (
                sql.SQL(" ON CONFLICT DO NOTHING") if opts.on_conflict_do_nothing else sql.SQL("")
            )
        return (
            sql.SQL("INSERT INTO {} ({}) ").format(sql.Identifier(table.schema, table.name), cols)
            + select
            + conflict
        )

    # ------------------------------------------------------------------ driver: commit

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        if self.options.write_mode == "direct":
            return
        sql = import_psycopg2().sql
        tables: dict[str, int] = {}
        for receipt in receipts:
            for staged in receipt.staged:
                for name, rows in staged.tables.items():
                    tables[name] = tables.get(name, 0) + rows
        if self.overwrite and self.options.table_name is not None:
            tables.setdefault(self.options.table_name, 0)
        if not tables:
            return
        attempts = [r.attempt_id for r in receipts]
        schema = self.options.schema_name
        with self._session() as cur:
            if context.streaming:
                cur.execute(
                    sql.SQL(
                        "INSERT INTO {} (sink_id, batch_id, tables, rows) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1"
                    ).format(sql.Identifier(schema, LEDGER_TABLE)),
                    (context.sink_id, context.batch_id, sorted(tables), sum(tables.values())),
                )
                if cur.fetchone() is None:
                    self.logger.info(
                        "batch %d of %s is in the ledger already: skipped",
                        context.batch_id,
                        context.sink_id,
                    )
                    self._delete_staged(cur, tables, context, None)
                    return
            for name in sorted(tables):
                table = self._table(name)
                if self.overwrite:
                    cur.execute(
                        sql.SQL("TRUNCATE {}").format(sql.Identifier(table.schema, table.name))
                    )
                staged_columns = ddl.existing_columns(cur, table.schema, table.stage) or {}
                columns = [c for c in staged_columns if not c.startswith("__qs_")]
                where = sql.SQL("__qs_sink = %s AND __qs_batch = %s AND __qs_attempt = ANY(%s)")
                cur.execute(
                    self._insert_select(
                        table, sql.Identifier(table.schema, table.stage), columns, where
                    ),
                    (context.sink_id, context.batch_id, attempts),
                )
            self._delete_staged(cur, tables, context, None)

    def _delete_staged(
        self, cur: Any, tables: dict[str, int], context: CommitContext, attempts: list[str] | None
    ) -> None:
        """Delete this sink's staged rows of this and earlier batches (or of ``attempts``)."""
        sql = import_psycopg2().sql
        for name in sorted(tables):
            table = self._table(name)
            if ddl.existing_columns(cur, table.schema, table.stage) is None:
                continue
            stage = sql.Identifier(table.schema, table.stage)
            if attempts is None:
                cur.execute(
                    sql.SQL("DELETE FROM {} WHERE __qs_sink = %s AND __qs_batch <= %s").format(
                        stage
                    ),
                    (context.sink_id, context.batch_id),
                )
            else:
                cur.execute(
                    sql.SQL(
                        "DELETE FROM {} WHERE __qs_sink = %s AND __qs_batch = %s "
                        "AND __qs_attempt = ANY(%s)"
                    ).format(stage),
                    (context.sink_id, context.batch_id, attempts),
                )

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        if self.options.write_mode == "direct":
            return
        tables = {name: 0 for r in receipts for s in r.staged for name in s.tables}
        if tables:
            with self._session() as cur:
                self._delete_staged(cur, tables, context, [r.attempt_id for r in receipts])
