"""The write modes of the ``postgresql`` sink, one strategy each on :class:`WriteMode`.

The sink picks one from ``write_mode`` when it is built; every mode answers the same
questions: where a task's COPY goes (:meth:`WriteMode.load`), what closes the task's
transaction (:meth:`WriteMode.seal`), how the driver publishes a batch
(:meth:`WriteMode.commit`) and how it cleans up a failed one (:meth:`WriteMode.abort`).

- :class:`StagingMode` (``exactly-once``): COPY into an UNLOGGED staging table per task
  attempt; the driver moves the rows into the targets in one transaction with the ledger row.
- :class:`PreparedMode` (``prepared``): COPY into the target in a prepared (two-phase)
  transaction; the driver decides (ledger row and the winning transaction ids, one
  transaction), then commits the winners and rolls back the others.
- :class:`DirectMode` (``direct``): COPY into the target (at-least-once), nothing to commit.

Every mode writes a table's rows through :meth:`WriteMode.write_rows`: a SAVEPOINT of the
task's transaction around the COPY; when PostgreSQL refuses it for what a row holds
(SQLSTATE class 22 or 23) or the encoder finds a NUL character, the sink rolls back to the
savepoint and writes the halves again, down to the rows refused (``batch.refuse``, as
``on_error`` says). The transaction stays usable and holds only the rows written: one bad
row in n costs about 2·log2(n) COPYs, in one transaction (one prepared transaction for
``prepared``).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from quixsinks.core.backpressure import RetryStats
from quixsinks.core.batch import SinkBatch
from quixsinks.core.errors import CommitError, OptionError, QuixSinksError, RecordError
from quixsinks.core.ledger import log_already_committed
from quixsinks.core.sink import CommitContext, Receipt

from . import ddl
from .client import autocommit_session, describe, import_psycopg2, row_level, session, translate
from .ledger import PostgresLedgerStore, fence, lock_key
from .options import PostgreSQLOptions
from .schema import (
    DECIDED_TABLE,
    DELETE_COLUMN,
    ROW_COLUMN,
    STAGING_REGISTRY,
    Column,
    NulError,
    TableSchema,
    gid_in_schema,
    prepared_gid,
    settle_action,
    stage_batch,
    stage_prefix,
    stage_table_name,
)
from .wire import CopyData, copy_data, delete_flags, nul_rows

if TYPE_CHECKING:
    from .sink import PostgreSQLSink

__all__ = [
    "DirectMode",
    "Load",
    "PreparedMode",
    "Refused",
    "StagedRows",
    "StagingMode",
    "WriteMode",
    "write_mode",
]


@dataclass
class StagedRows:
    """What one write staged: per target table, its staging table and the rows in it."""

    tables: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: write_mode=prepared: the prepared transaction holding these rows
    prepared: list[str] = field(default_factory=list)


class Refused:
    """The rows one write refuses, handed to ``batch.refuse`` only once the write's
    transaction has committed (:meth:`apply`): a write retried after a connection error
    finds them again and must not refuse them twice. Under on_error=fail the first one
    raises at once, naming the row."""

    def __init__(self, batch: SinkBatch, fail: bool) -> None:
        self.batch = batch
        self.fail = fail
        self.rows: list[tuple[int, BaseException]] = []

    def __call__(self, row: int, error: BaseException) -> None:
        if self.fail:
            self.batch.refuse(row, error)
        self.rows.append((row, error))

    def apply(self, *more: Refused) -> None:
        """Refuse the rows (with those of ``more``), in row order."""
        rows = sorted([r for refused in (self, *more) for r in refused.rows], key=lambda r: r[0])
        for row, error in rows:
            self.batch.refuse(row, error)


@dataclass
class Load:
    """One target table's share of a SinkBatch: the rows (all, or the indices ``rows``)
    and the columns the table takes; ``refuse`` takes the rows PostgreSQL refuses,
    ``refused`` counts them."""

    batch: SinkBatch
    table: TableSchema
    columns: list[Column]
    rows: pa.Array | None
    refuse: Callable[[int, BaseException], None]
    refused: int = 0

    @property
    def count(self) -> int:
        return len(self.rows) if self.rows is not None else self.batch.num_rows

    @property
    def written(self) -> int:
        """The rows the load wrote (those not refused)."""
        return self.count - self.refused

    def indices(self) -> pa.Array:
        """The rows as indices into the batch's table."""
        if self.rows is not None:
            return self.rows
        return pa.array(range(self.batch.num_rows), pa.int64())

    def part(self, rows: pa.Array) -> Load:
        """The same table's load of ``rows`` only (indices into the batch's table)."""
        return Load(self.batch, self.table, self.columns, rows, self.refuse)


class WriteMode:
    """How the rows of a batch travel from the tasks' COPY to the target tables. The base
    COPYs straight into the target and has nothing to commit; the modes override."""

    def __init__(self, sink: PostgreSQLSink) -> None:
        self.sink = sink
        self.options: PostgreSQLOptions = sink.options

    def preflight(self, cur: Any) -> None:
        """Driver, before any task, in the preflight's transaction: check what this mode
        needs from the server."""

    def recover(self) -> None:
        """Driver, after the preflight: finish what a driver that died left behind."""

    def ensure(self, cur: Any, table: TableSchema, fn: Callable[[], list[Column]]) -> list[Column]:
        """Run the DDL ``fn`` that makes ``table`` able to take the task's columns."""
        return fn()

    def begin(self, batch: SinkBatch) -> dict[str, Any]:
        """Scratch state of one write (kept across its retries), for :meth:`loaded`."""
        return {}

    def load(self, cur: Any, load: Load, scratch: dict[str, Any]) -> str:
        """COPY the rows of ``load`` (refusing those PostgreSQL refuses, counted in
        ``load.refused``); the table they went to."""
        target = import_psycopg2().sql.Identifier(load.table.schema, load.table.name)
        self.write_rows(cur, load, lambda piece: copy_into(cur, target, self._encode(piece)))
        return load.table.name

    def seal(self, cur: Any, batch: SinkBatch, staged: StagedRows) -> None:
        """The last statement of the task's transaction, before its COMMIT."""

    def loaded(self, batch: SinkBatch, scratch: dict[str, Any]) -> None:
        """After the task's COMMIT landed."""

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        """Driver: publish the batch."""

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        """Driver: clean up after a failed batch."""

    # ------------------------------------------------------------------ shared

    def write_rows(self, cur: Any, load: Load, write: Callable[[Load], None]) -> None:
        """``write(load)`` inside a SAVEPOINT; rows refused for what they hold are found by
        halving (each half in its own savepoint) and handed to ``load.refuse`` (under
        on_error=fail that raises, naming the row). Counts them in ``load.refused``; the
        counters of a rolled-back write are restored. Any other error propagates with the
        transaction aborted (the caller rolls back)."""
        psycopg2 = import_psycopg2()
        batch = load.batch
        where = f"{describe(self.options)} table {load.table}"
        pending = [load]
        while pending:
            piece = pending.pop()
            counted = dict(batch.counters)
            cur.execute("SAVEPOINT quixsinks_rows")
            try:
                write(piece)
            except NulError:
                cur.execute("ROLLBACK TO SAVEPOINT quixsinks_rows")
                _restore(batch, counted)
                rows = piece.indices()
                bad = nul_rows(batch, piece.columns, rows, self.options.key_text_format)
                for row, column in bad.items():
                    error = RecordError(
                        f"postgresql: column {column!r} holds a NUL character (U+0000) in "
                        f"row {row} of partition {batch.partition_id}, which PostgreSQL text "
                        "and jsonb cannot store (table "
                        f"{load.table}); remove it, or write the value as binary",
                        column=column,
                        row=row,
                    )
                    load.refuse(row, error)
                load.refused += len(bad)
                refused = set(bad)
                rest = [r for r in rows.to_pylist() if r not in refused]
                if rest and len(rest) < len(rows):
                    pending.append(piece.part(pa.array(rest, pa.int64())))
                elif rest:  # no NUL found where the encoder saw one: not a row's fault
                    raise
                continue
            except psycopg2.Error as exc:
                if not row_level(exc):
                    raise
                cur.execute("ROLLBACK TO SAVEPOINT quixsinks_rows")
                _restore(batch, counted)
                rows = piece.indices()
                if len(rows) == 1:
                    load.refuse(rows[0].as_py(), translate(exc, where, rows=True))
                    load.refused += 1
                    continue
                half = len(rows) // 2
                pending.append(piece.part(rows.slice(half)))
                pending.append(piece.part(rows.slice(0, half)))  # popped first: order kept
                continue
            cur.execute("RELEASE SAVEPOINT quixsinks_rows")

    def _encode(self, load: Load, *, numbered: bool = False) -> CopyData:
        """The COPY payload of ``load``; ``numbered``: for a staging table (each row's
        number for upsert, counted as staged)."""
        opts, batch = self.options, load.batch
        first_row = None
        if numbered and opts.upsert_on_primary_key:  # the last row of a key wins
            first_row = batch.counters.get("staged_rows", 0)
        delete = delete_flags(batch, opts.delete_column) if opts.delete_column else None
        binary = opts.copy_format == "binary"
        data = copy_data(
            batch,
            load.columns,
            load.rows,
            first_row,
            delete=delete,
            binary=binary,
            key_text_format=opts.key_text_format,
        )
        if numbered:
            batch.count("staged_rows", load.count)
        return data

    def _extra_columns(self) -> list[tuple[str, str]]:
        """The bookkeeping columns of a staging table: row order, delete flag."""
        extra = [(ROW_COLUMN, "bigint")] if self.options.upsert_on_primary_key else []
        if self.options.delete_column is not None:
            extra.append((DELETE_COLUMN, "boolean"))
        return extra

    def _prune(self, cur: Any, context: CommitContext) -> None:
        """Old ledger rows of this sink id; staging tables nobody will commit."""
        sql = import_psycopg2().sql
        schema = self.options.schema_name
        PostgresLedgerStore(cur, schema).prune(
            context.sink_id, self.options.ledger_keep_batches, context.batch_id
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
            self.sink.logger.warning(
                "dropping %d abandoned staging table(s) older than %g h",
                len(abandoned),
                self.options.staging_max_age_hours,
            )
            cur.execute(
                sql.SQL("DROP TABLE IF EXISTS {}").format(
                    sql.SQL(", ").join(sql.Identifier(schema, n) for n in abandoned)
                )
            )

    def _retried(self, context: CommitContext, fn: Callable[[], None]) -> None:
        """Run an idempotent commit, retried when the connection breaks (a server restart)."""
        self.options.retry_policy().call(
            fn, stats=RetryStats(), what=f"postgresql commit of batch {context.batch_id}"
        )


def copy_into(cur: Any, target: Any, data: CopyData) -> None:
    """``COPY target (columns) FROM STDIN`` with ``data``."""
    sql = import_psycopg2().sql
    names = sql.SQL(", ").join(sql.Identifier(n) for n in data.columns)
    statement = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT {})").format(
        target, names, sql.SQL(data.fmt)
    )
    cur.copy_expert(statement, data.stream())


def insert_select(
    options: PostgreSQLOptions,
    table: TableSchema,
    sources: list[tuple[Any, int]],
    columns: list[str],
) -> Any:
    """INSERT INTO target the rows of ``sources`` ((table, partition), in order), with the
    conflict handling asked for; only ``columns`` are written (and updated)."""
    sql = import_psycopg2().sql
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    target = sql.Identifier(table.schema, table.name)
    if not options.upsert_on_primary_key:
        union = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {} FROM {}").format(cols, source) for source, _ in sources
        )
        conflict = (
            sql.SQL(" ON CONFLICT DO NOTHING") if options.on_conflict_do_nothing else sql.SQL("")
        )
        return sql.SQL("INSERT INTO {} ({}) ").format(target, cols) + union + conflict
    row = sql.Identifier(ROW_COLUMN)
    delete = sql.Identifier(DELETE_COLUMN)
    deletes = options.delete_column is not None
    picked = sql.SQL(", {}").format(delete) if deletes else sql.SQL("")
    union = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {}{}, {} AS __qs_partition, {} FROM {}").format(
            cols, picked, sql.Literal(partition), row, source
        )
        for source, partition in sources
    )
    pk_names = list(options.primary_key_columns)
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
    # a key whose last row deletes it is deleted, the others upserted: one statement, so
    # both see the same snapshot (their keys are disjoint)
    matches = sql.SQL(" AND ").join(
        sql.SQL("t.{0} = l.{0}").format(sql.Identifier(c)) for c in pk_names
    )
    return sql.SQL(
        "WITH l AS MATERIALIZED ({last}), d AS (DELETE FROM {target} t USING l "
        "WHERE l.{delete} AND {matches}) INSERT INTO {target} ({cols}) "
        "SELECT {cols} FROM l WHERE NOT l.{delete} ON CONFLICT ({pk}) {action}"
    ).format(
        last=last, target=target, delete=delete, matches=matches, cols=cols, pk=pk, action=action
    )


class DirectMode(WriteMode):
    """COPY straight into the target (at-least-once: a replayed micro-batch is written
    again, unless upsert or do-nothing absorbs the repeat); nothing to commit."""

    def load(self, cur: Any, load: Load, scratch: dict[str, Any]) -> str:
        opts, table = self.options, load.table
        if not (opts.upsert_on_primary_key or opts.on_conflict_do_nothing):
            return super().load(cur, load, scratch)
        # upsert/do-nothing: through a temporary table and INSERT ... ON CONFLICT
        digest = hashlib.sha1(str(table).encode()).hexdigest()[:16]
        temp = import_psycopg2().sql.Identifier("_qs_direct_" + digest)
        extra = self._extra_columns()
        ddl.create_stage(cur, temp, load.columns, extra=extra, exists=False, temporary=True)
        sql = import_psycopg2().sql
        names = [c.name for c in load.columns]

        def write(piece: Load) -> None:
            copy_into(cur, temp, self._encode(piece, numbered=True))
            cur.execute(insert_select(opts, table, [(temp, 0)], names))
            cur.execute(sql.SQL("DELETE FROM {}").format(temp))  # the next half starts empty

        self.write_rows(cur, load, write)
        return table.name


class StagingMode(WriteMode):
    """``exactly-once``: stage per task attempt, move in the driver's ledgered transaction."""

    def begin(self, batch: SinkBatch) -> dict[str, Any]:
        # this SinkBatch's number in the task attempt: a retry of this very write (its
        # COMMIT landed, the acknowledgement was lost) finds it claimed and stages nothing
        chunk = batch.task.state.get("chunks", 0) + 1 if batch.task is not None else None
        return {"chunk": chunk, "created": {}}

    def load(self, cur: Any, load: Load, scratch: dict[str, Any]) -> str:
        """COPY the rows into this attempt's staging table (UNLOGGED, holding only
        ``columns``: the rows move with an explicit column list, so the target's defaults,
        identities and generated columns apply to the others); its name. The SinkBatch
        number is claimed in the staging registry in the same transaction as the COPY: a
        claimed number means these rows are staged already."""
        sql = import_psycopg2().sql
        table, ctx = load.table, load.batch.context
        stage = stage_table_name(ctx.sink_id, ctx.batch_id, table, ctx.attempt_id)
        ident = sql.Identifier(table.schema, stage)
        known = _stages_made(load.batch).get(stage)
        wanted = {c.name for c in load.columns}
        if known is None or not wanted <= known:
            extra = self._extra_columns()
            ddl.create_stage(cur, ident, load.columns, extra=extra, exists=known is not None)
            if self.options.delete_column is None:  # a deleting row need not be whole
                target = sql.Identifier(table.schema, table.name)
                ddl.mirror_row_constraints(cur, ident, target, sorted(wanted))
            cur.execute(
                sql.SQL(
                    "INSERT INTO {} (table_name, sink_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"
                ).format(sql.Identifier(table.schema, STAGING_REGISTRY)),
                (stage, ctx.sink_id),
            )
            scratch["created"][stage] = wanted
        chunk = scratch["chunk"]

        def copy(piece: Load) -> None:
            copy_into(cur, ident, self._encode(piece, numbered=True))

        if chunk is not None and not _claim(cur, table.schema, stage, chunk):
            self.sink.logger.info(
                "SinkBatch %d of %s is staged already (a retry after a lost COMMIT "
                "acknowledgement): not staged again",
                chunk,
                stage,
            )
            # the rows the landed try refused are found again (and refused once: that
            # try's refusals were never applied), then this copy is rolled back; what it
            # counted stays: it is what the landed try staged and refused (the staged row
            # count numbers the next SinkBatch's rows, which upsert orders by)
            cur.execute("SAVEPOINT quixsinks_again")
            self.write_rows(cur, load, copy)
            cur.execute("ROLLBACK TO SAVEPOINT quixsinks_again")
            return stage
        self.write_rows(cur, load, copy)
        return stage

    def loaded(self, batch: SinkBatch, scratch: dict[str, Any]) -> None:
        if batch.task is not None:
            batch.task.state["chunks"] = scratch["chunk"]
        known = _stages_made(batch)
        for stage, names in scratch["created"].items():
            known.setdefault(stage, set()).update(names)

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        # target -> [(staging table, partition)], in partition order; rows per staging table
        sources: dict[str, list[tuple[str, int]]] = {}
        staged_rows: dict[str, int] = {}
        for receipt in sorted(receipts, key=lambda r: r.partition_id):
            for staged in receipt.staged:
                for name, (stage, rows) in staged.tables.items():
                    if (stage, receipt.partition_id) not in sources.setdefault(name, []):
                        sources[name].append((stage, receipt.partition_id))
                    staged_rows[stage] = staged_rows.get(stage, 0) + rows
        if self.sink.overwrite and self.options.table_name is not None:
            sources.setdefault(self.options.table_name, [])
        if not context.ledgered:  # no ledger: a retry after a lost COMMIT could repeat it
            self._commit_once(context, receipts, sources, staged_rows)
            return
        # a ledgered commit is idempotent (the ledger row): a landed one is found and skipped
        self._retried(context, lambda: self._commit_once(context, receipts, sources, staged_rows))

    def _commit_once(
        self,
        context: CommitContext,
        receipts: list[Receipt[StagedRows]],
        sources: dict[str, list[tuple[str, int]]],
        staged_rows: dict[str, int],
    ) -> None:
        sql = import_psycopg2().sql
        schema = self.options.schema_name
        with session(self.options) as cur:
            if context.ledgered:
                store = fence(cur, self.options, context)
                record = context.commit_record(receipts).to_json()
                if not store.insert(context, sorted(sources), sum(staged_rows.values()), record):
                    log_already_committed(context.sink_id, context.batch_id)
                    self._drop_stages(cur, context, None)
                    return
            stage_columns = ddl.tables_columns(
                cur, schema, [stage for staged in sources.values() for stage, _ in staged]
            )
            for name in sorted(sources):
                table = TableSchema(schema, name)
                if self.sink.overwrite:
                    cur.execute(
                        sql.SQL("TRUNCATE {}").format(sql.Identifier(table.schema, table.name))
                    )
                if sources[name]:
                    self._move(cur, table, sources[name], stage_columns, context, staged_rows)
            self._drop_stages(cur, context, None)
            if context.ledgered:
                self._prune(cur, context)

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
        typed = self.sink.ensure_now(
            cur, table.name, [Column(n, t, "value") for n, t in union.items()]
        )
        taken = {c.name for c in typed}  # a discard contract may leave some out
        for names, run in runs:
            cur.execute(insert_select(self.options, table, run, [n for n in names if n in taken]))
            stages = [ident.strings[-1] for ident, _ in run]
            if cur.rowcount < sum(staged_rows.get(stage, 0) for stage in stages):
                self._check_staged(cur, context, staged_rows, stages)

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

    def _drop_stages(self, cur: Any, context: CommitContext, only: list[str] | None) -> None:
        """Drop this sink's staging tables of this batch and of earlier batches the ledger
        holds (those of failed task attempts included), or only the tables named in
        ``only``."""
        sql = import_psycopg2().sql
        schema = self.options.schema_name
        names = ddl.stage_tables(cur, schema, stage_prefix(context.sink_id))
        if only is not None:
            doomed = [n for n in names if n in only]
        else:
            batches = {n: stage_batch(n, context.sink_id) for n in names}
            done = _committed_lower(
                cur, self.options, context.sink_id, context.batch_id, batches.values()
            )
            doomed = [n for n, b in batches.items() if b == context.batch_id or b in done]
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
        stages = [stage for r in receipts for s in r.staged for stage, _ in s.tables.values()]
        if stages:
            with session(self.options) as cur:
                self._drop_stages(cur, context, stages)


class PreparedMode(WriteMode):
    """``prepared``: COPY into the target in a prepared transaction the driver decides on.

    Decided means committed, eventually (a driver that dies after deciding leaves ids the
    next commit or preflight commits); undecided means rolled back."""

    def preflight(self, cur: Any) -> None:
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

    def recover(self) -> None:
        with autocommit_session(self.options) as cur:
            self._settle(cur, None, None)  # what a driver that died had decided

    def ensure(self, cur: Any, table: TableSchema, fn: Callable[[], list[Column]]) -> list[Column]:
        # a new column waits for the batch's prepared transactions (they hold the table)
        # while the driver waits for this task: do not wait forever
        cur.execute("SET LOCAL lock_timeout = '10s'")
        try:
            return fn()
        except import_psycopg2().errors.LockNotAvailable as exc:
            cur.connection.rollback()
            raise QuixSinksError(
                f"postgresql: table {table} needs new columns, which cannot be added while "
                "this micro-batch's prepared transactions hold the table "
                "(write_mode=prepared); add the columns first, or use "
                "write_mode=exactly-once for a stream whose columns change"
            ) from exc

    def seal(self, cur: Any, batch: SinkBatch, staged: StagedRows) -> None:
        """PREPARE the open transaction (this write's COPYs) for the driver."""
        if not staged.tables:
            return
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
        staged.prepared.append(gid)

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        # idempotent (the ledger row, the decided ids): retried when the connection breaks
        self._retried(context, lambda: self._commit_once(context, receipts))

    def _commit_once(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        """Decide (ledger row + decided ids, one transaction), then settle."""
        sql = import_psycopg2().sql
        ordered = sorted(receipts, key=lambda r: r.partition_id)
        staged = [s for r in ordered for s in r.staged]
        gids = [gid for s in staged for gid in s.prepared]
        tables = sorted({name for s in staged for name in s.tables})
        rows = sum(count for s in staged for _, count in s.tables.values())
        with autocommit_session(self.options, lock_key(self.options, context.sink_id)) as cur:
            cur.execute("BEGIN")
            decided = True
            if context.ledgered:
                store = fence(cur, self.options, context)
                record = context.commit_record(receipts).to_json()
                decided = store.insert(context, tables, rows, record)
                if not decided:
                    log_already_committed(context.sink_id, context.batch_id)
            if decided and gids:
                self._check_still_prepared(cur, context, gids)
                cur.execute(
                    sql.SQL(
                        "INSERT INTO {} (gid, sink_id) SELECT unnest(%s::text[]), %s "
                        "ON CONFLICT DO NOTHING"
                    ).format(sql.Identifier(self.options.schema_name, DECIDED_TABLE)),
                    (gids, context.sink_id),
                )
            if context.ledgered:
                self._prune(cur, context)
            cur.execute("COMMIT")
            self._settle(cur, context.sink_id, context.batch_id)

    def _check_still_prepared(self, cur: Any, context: CommitContext, gids: list[str]) -> None:
        """Before the batch is decided: every winning prepared transaction is still there.
        One rolled back meanwhile (abandoned past ``staging_max_age_hours``, or by an
        operator) holds rows that are gone: the batch must not be recorded as written."""
        cur.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid = ANY(%s) "
            "AND database = current_database()",
            (gids,),
        )
        gone = sorted(set(gids) - {gid for (gid,) in cur.fetchall()})
        if gone:
            cur.execute("ROLLBACK")
            raise CommitError(
                f"postgresql: batch {context.batch_id} of sink id {context.sink_id} cannot be "
                f"committed: {len(gone)} of its prepared transactions are gone ({gone[0]}"
                f"{', ...' if len(gone) > 1 else ''}), rolled back before the driver decided "
                f"them (older than staging_max_age_hours, or by hand); nothing is recorded, "
                "and the batch's rerun or replay writes it again"
            )

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
        found = cur.fetchall()
        committed: set[int] = set()
        if sink_id is not None and batch_id is not None:  # not a preflight's recovery
            batches = [stage_batch(gid, sink_id) for gid, _, _ in found]
            committed = _committed_lower(cur, self.options, sink_id, batch_id, batches)
        for gid, decided, old in found:
            action = settle_action(
                gid,
                decided=decided,
                old=old,
                schema=self.options.schema_name,
                sink_id=sink_id,
                batch_id=batch_id,
                committed=committed,
            )
            if action is None:
                continue
            if action == "abandoned":
                self.sink.logger.warning("rolling back abandoned prepared transaction %s", gid)
            statement = "COMMIT PREPARED %s" if action == "commit" else "ROLLBACK PREPARED %s"
            with contextlib.suppress(psycopg2.errors.UndefinedObject):
                cur.execute(statement, (gid,))  # unless another committer finished it
        cur.execute(
            sql.SQL(
                "DELETE FROM {} d WHERE NOT EXISTS (SELECT 1 FROM pg_prepared_xacts p "
                "WHERE p.gid = d.gid AND p.database = current_database())"
            ).format(decided_table)
        )

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedRows]]) -> None:
        """ROLLBACK PREPARED every transaction of the batch that no commit has decided: the
        receipts' and those of attempts whose receipts never reached the driver (a task
        that failed after preparing, a lost executor), which would hold their rows' locks
        and block the replay. Never a landed batch's decided ones: a commit that failed
        after deciding is finished by the next one."""
        psycopg2 = import_psycopg2()
        schema = self.options.schema_name
        with autocommit_session(self.options, lock_key(self.options, context.sink_id)) as cur:
            cur.execute(
                psycopg2.sql.SQL(
                    "SELECT p.gid FROM pg_prepared_xacts p WHERE p.database = "
                    "current_database() AND NOT EXISTS (SELECT 1 FROM {} d WHERE d.gid = p.gid)"
                ).format(psycopg2.sql.Identifier(schema, DECIDED_TABLE)),
            )
            for (gid,) in cur.fetchall():
                if not gid_in_schema(gid, schema):
                    continue
                if stage_batch(gid, context.sink_id) != context.batch_id:
                    continue
                with contextlib.suppress(psycopg2.errors.UndefinedObject):
                    cur.execute("ROLLBACK PREPARED %s", (gid,))


def _committed_lower(
    cur: Any,
    options: PostgreSQLOptions,
    sink_id: str,
    batch_id: int,
    batch_ids: Iterable[int | None],
) -> set[int]:
    """Those of ``batch_ids`` below ``batch_id`` that the ledger holds: what their attempts
    left (staging tables, undecided prepared transactions) lost and may go. A lower batch
    the ledger lacks may be a keyed write of the sink id still running: its leftovers stay
    until ``staging_max_age_hours``."""
    lower = {b for b in batch_ids if b is not None and b < batch_id}
    store = PostgresLedgerStore(cur, options.schema_name)
    return {b for b in sorted(lower) if store.get(sink_id, b) is not None}


def _restore(batch: SinkBatch, counted: dict[str, int]) -> None:
    """What a rolled-back write counted (staged rows, fallbacks) did not happen."""
    batch.counters.clear()
    batch.counters.update(counted)


def _stages_made(batch: SinkBatch) -> dict[str, set[str]]:
    """Staging tables this task attempt has created, with their columns."""
    if batch.task is None:
        return {}
    made: dict[str, set[str]] = batch.task.state.setdefault("stages", {})
    return made


def _claim(cur: Any, schema: str, stage: str, chunk: int) -> bool:
    """Record in the staging registry that SinkBatch ``chunk`` of the task attempt is in
    ``stage`` (committed with its COPY); False when an earlier try of this very write did
    so already."""
    sql = import_psycopg2().sql
    cur.execute(
        sql.SQL(
            "UPDATE {} SET chunks = %s WHERE table_name = %s AND chunks < %s RETURNING 1"
        ).format(sql.Identifier(schema, STAGING_REGISTRY)),
        (chunk, stage, chunk),
    )
    return cur.fetchone() is not None


_MODES: dict[str, type[WriteMode]] = {
    "exactly-once": StagingMode,
    "prepared": PreparedMode,
    "direct": DirectMode,
}


def write_mode(sink: PostgreSQLSink) -> WriteMode:
    """The strategy of the sink's ``write_mode``."""
    return _MODES[sink.options.write_mode](sink)
