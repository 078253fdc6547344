"""The BigQuery sink: Arrow into PENDING Storage Write streams, one driver transaction.

Executor (``write``): each SinkBatch's rows are converted to the Arrow types of the
table's columns (``schema.py``), tagged with the task attempt's token (``_qs_token``:
sink id, batch id, attempt id) and appended, in requests below ``max_request_bytes``
with explicit offsets, to a new PENDING write stream on the staging table
``<table>_qs_staging``; the stream is finalized and its name, token and row count go
to the driver in the receipt. A retried write opens a new stream: the old one is never
committed, so nothing of it is ever visible.

Driver (``commit``): fence the ledger (``_quixsinks_ledger`` in the dataset: rows of
another query id under this sink id stop the commit with LedgerFenceError unless
``takeover_query_id`` names that query); skip a batch the ledger holds; otherwise
BatchCommitWriteStreams the winning streams (their rows become visible in the staging
table only), then one multi-statement transaction: if the ledger has no row for this
sink id and batch, delete the target's rows (overwrite only), INSERT the target's
columns from the staging rows of the winning tokens, INSERT the ledger row, prune old
ledger rows, COMMIT. Then the staging rows of the batch (failed attempts' too) and
staging rows older than ``staging_max_age_hours`` are deleted. A driver that dies
anywhere in between leaves either no ledger row (a replay stages anew and commits its
own tokens only) or a ledger row (a replay is skipped): every row exactly once.

``write_mode=direct``: PENDING streams straight on the target, committed together by
the driver (each micro-batch appears at once); a replayed micro-batch after a driver
restart is written again (at-least-once).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from quixsinks.core.backpressure import RetryStats
from quixsinks.core.batch import SinkBatch, name_prefix
from quixsinks.core.errors import (
    CommitError,
    DestinationError,
    DestinationNotFoundError,
    QuixSinksError,
    RecordError,
)
from quixsinks.core.ledger import LedgerEntry, fence_owners, log_already_committed
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task

from .client import clients, describe, import_bigquery, translate, write_retry
from .options import BigQueryOptions, split_table_id
from .schema import (
    LEDGER_TABLE,
    STAGED_AT_COLUMN,
    TOKEN_COLUMN,
    BQField,
    Column,
    arrow_schema,
    column_plan,
    conflict,
    convert,
    quote,
    staging_table_name,
)

__all__ = ["BigQuerySink", "StagedStream"]

_LEDGER_FIELDS = (
    BQField("sink_id", "STRING", "REQUIRED"),
    BQField("batch_id", "INT64", "REQUIRED"),
    BQField("query_id", "STRING"),
    BQField("committed_at", "TIMESTAMP"),
)
_STAGING_EXTRA = (BQField(TOKEN_COLUMN, "STRING"), BQField(STAGED_AT_COLUMN, "TIMESTAMP"))


@dataclass
class StagedStream:
    """One finalized PENDING stream: its name, the table it writes, the attempt token its
    rows carry, its rows and the columns it wrote."""

    stream: str
    table: str
    token: str
    rows: int
    columns: tuple[str, ...]


class _Shapes:
    """Per process: the columns of the tables this process has checked (no table fetch
    per batch, unlike Quix's sink), refreshed when a batch brings a new column."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tables: dict[str, list[BQField]] = {}


_SHAPES = _Shapes()


class BigQuerySink(Sink[BigQueryOptions, StagedStream]):
    """Writes to a BigQuery table with the Storage Write API; exactly-once.
    See docs/sinks/bigquery.md."""

    name: ClassVar[str] = "bigquery"
    options_class = BigQueryOptions
    guarantee = "exactly-once"
    extra = "bigquery"
    supports_overwrite = True

    def __init__(self, options: BigQueryOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.columns: list[Column] | None = None
        #: Quix's minimal schema: the metadata columns (known before any JSON value)
        self.metadata: list[Column] = []

    @classmethod
    def check_dependencies(cls) -> None:
        import_bigquery()

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        assert self.records is not None
        if self.overwrite and not self.options.exactly_once:
            from quixsinks.core.errors import OptionError

            raise OptionError(
                "bigquery: overwrite needs write_mode=exactly-once (the delete and the load "
                "must be one transaction)",
                option="write_mode",
                value=self.options.write_mode,
            )
        key = schema.field(self.records.key).type if self.records.key else None
        self.metadata = column_plan(
            pa.schema([]),
            key,
            has_timestamp=self.records.timestamp is not None,
            include_metadata=self.options.include_metadata,
            json_columns=self.options.json_columns,
        )
        if not self.records.value_json:
            unknown = [n for n in self.options.json_columns if n not in self.records.values]
            if unknown:
                from quixsinks.core.errors import OptionError

                raise OptionError(
                    f"option 'json_columns' names {', '.join(map(repr, unknown))}, not among "
                    f"the value columns: {', '.join(self.records.values)}",
                    option="json_columns",
                    value=",".join(self.options.json_columns),
                )
            values = pa.schema([schema.field(n) for n in self.records.values])
            self.columns = column_plan(
                values,
                key,
                has_timestamp=self.records.timestamp is not None,
                include_metadata=self.options.include_metadata,
                json_columns=self.options.json_columns,
            )

    def preflight(self) -> None:
        """Check credentials, dataset and table once per driver process; create them (and
        the ledger and staging tables) as the options allow."""
        wanted = self.columns if self.columns is not None else self.metadata
        if wanted:  # the target first: its dataset may be missing
            self._ensure(wanted)
        else:  # JSON values without metadata columns: the first write creates the table
            self._check_dataset()
        if self.options.exactly_once:
            self._ensure_table(self._ledger_id, list(_LEDGER_FIELDS), ledger=True)

    # ------------------------------------------------------------------ tables

    @property
    def _target_id(self) -> str:
        return self.options.table_path

    @property
    def _staging_id(self) -> str:
        o = self.options
        return f"{o.project_id}.{o.dataset_id}.{staging_table_name(o.table_name)}"

    @property
    def _ledger_id(self) -> str:
        return f"{self.options.project_id}.{self.options.dataset_id}.{LEDGER_TABLE}"

    def _sql_table(self, table_id: str) -> str:
        return ".".join(quote(part) for part in split_table_id(table_id))

    def _ensure(self, columns: list[Column]) -> tuple[list[BQField], list[BQField] | None]:
        """The target's (and in exactly-once mode the staging table's) columns, with
        every planned column present."""
        target = self._ensure_table(self._target_id, [c.field for c in columns])
        staging = None
        if self.options.exactly_once:
            staging = self._ensure_table(self._staging_id, [*target, *_STAGING_EXTRA], staging=True)
        return target, staging

    def _ensure_table(
        self,
        table_id: str,
        wanted: list[BQField],
        *,
        staging: bool = False,
        ledger: bool = False,
    ) -> list[BQField]:
        cached = _SHAPES.tables.get(table_id)
        if cached is not None and _covers(cached, wanted):
            return cached
        with _SHAPES.lock:
            fields = self._ensure_table_now(table_id, wanted, internal=staging or ledger)
            _SHAPES.tables[table_id] = fields
            return fields

    def _ensure_table_now(
        self, table_id: str, wanted: list[BQField], *, internal: bool
    ) -> list[BQField]:
        bigquery = import_bigquery()
        from google.api_core import exceptions as gexc

        opts = self.options
        bq = clients(opts).bigquery
        kw = self._ddl_kwargs()
        auto = opts.schema_auto_update or internal
        where = f"bigquery table {table_id}"
        try:
            try:
                table = bq.get_table(table_id, **kw)
            except gexc.NotFound:
                if not auto:
                    raise DestinationNotFoundError(
                        f"{where} does not exist (or its dataset does not) and "
                        "schema_auto_update is false: create it, or set "
                        "schema_auto_update=true",
                        location=table_id,
                    ) from None
                self._ensure_dataset()
                schema = [_schema_field(bigquery, f) for f in wanted]
                table = bq.create_table(
                    bigquery.Table(table_id, schema=schema), exists_ok=True, **kw
                )
                self.logger.info("created %s (%d columns)", where, len(schema))
            existing = [_from_schema_field(f) for f in table.schema]
            by_name = {f.name.lower(): f for f in existing}
            missing = []
            for f in wanted:
                there = by_name.get(f.name.lower())
                if there is None:
                    missing.append(f)
                    continue
                problem = conflict(f, there)
                if problem:
                    raise DestinationError(
                        f"{where}: column {f.name!r} conflicts with the rows: {problem}; "
                        "cast the column in Spark or write to another table",
                        location=table_id,
                    )
            if missing:
                if not auto:
                    raise DestinationError(
                        f"{where} lacks the columns {', '.join(f.name for f in missing)} and "
                        "schema_auto_update is false: add them, or set schema_auto_update=true",
                        location=table_id,
                    )
                added = [_nullable(f) for f in missing]
                table.schema = [*table.schema, *(_schema_field(bigquery, f) for f in added)]
                table = bq.update_table(table, ["schema"], **kw)
                self.logger.info(
                    "%s: added the columns %s", where, ", ".join(f.name for f in added)
                )
                existing = [_from_schema_field(f) for f in table.schema]
            return existing
        except QuixSinksError:
            raise
        except Exception as exc:
            raise translate(exc, where) from exc

    def _check_dataset(self) -> None:
        from google.api_core import exceptions as gexc

        opts = self.options
        try:
            clients(opts).bigquery.get_dataset(
                f"{opts.project_id}.{opts.dataset_id}", **self._ddl_kwargs()
            )
        except gexc.NotFound:
            if not opts.schema_auto_update:
                raise DestinationNotFoundError(
                    f"bigquery dataset {opts.project_id}.{opts.dataset_id} does not exist and "
                    "schema_auto_update is false: create it, or set schema_auto_update=true",
                    location=opts.table_path,
                ) from None
            self._ensure_dataset()
        except Exception as exc:
            raise translate(exc, describe(opts)) from exc

    def _ensure_dataset(self) -> None:
        bigquery = import_bigquery()
        opts = self.options
        dataset = bigquery.Dataset(f"{opts.project_id}.{opts.dataset_id}")
        if opts.location:
            dataset.location = opts.location
        clients(opts).bigquery.create_dataset(dataset, exists_ok=True, **self._ddl_kwargs())

    def _ddl_kwargs(self) -> dict[str, Any]:
        from google.api_core.retry import Retry
        from google.cloud.bigquery.retry import DEFAULT_RETRY

        retry: Retry = DEFAULT_RETRY.with_deadline(self.options.retry_timeout)
        return {"timeout": self.options.ddl_timeout, "retry": retry}

    # ------------------------------------------------------------------ executor

    def check_fence(self, task: Task) -> None:
        if not self.options.exactly_once:
            return
        ctx = task.context
        entries = task.retry(lambda: self._ledger_entries(ctx.sink_id), what="bigquery fence")
        fence_owners(
            ctx.sink_id,
            ctx.query_id,
            {e.query_id for e in entries},
            self.options.takeover_query_id,
        )

    def write(self, batch: SinkBatch) -> StagedStream | None:
        columns = self.columns
        if columns is None:  # JSON values: the columns are known only now
            key_type = batch.keys().type if self.records and self.records.key else None
            columns = column_plan(
                batch.values().schema,
                key_type,
                has_timestamp=bool(self.records and self.records.timestamp),
                include_metadata=self.options.include_metadata,
                json_columns=self.options.json_columns,
            )
        target, staging = self._ensure(columns)
        data = self._arrow(batch, columns, target)
        ctx = batch.context
        if staging is not None:
            token = f"{name_prefix(ctx.sink_id, ctx.query_id)}/{ctx.batch_id}/{ctx.attempt_id}"
            n = data.num_rows
            now = pa.scalar(dt.datetime.now(dt.UTC), pa.timestamp("us", "UTC"))
            data = data.append_column(TOKEN_COLUMN, pa.array([token] * n, pa.string()))
            data = data.append_column(STAGED_AT_COLUMN, pa.array([now] * n))
            table_id, fields = self._staging_id, staging
        else:
            token, table_id, fields = "", self._target_id, target
        data = _with_all_columns(data, fields)
        stream = self._append(table_id, data, batch)
        written = tuple(c.name for c in columns)
        return StagedStream(stream, table_id, token, data.num_rows, written)

    def _arrow(self, batch: SinkBatch, columns: list[Column], target: list[BQField]) -> pa.Table:
        """The batch's planned columns as Arrow arrays of the table's column types."""
        by_name = {f.name.lower(): f for f in target}
        values = batch.values()
        arrays: dict[str, pa.Array] = {}
        for col in columns:
            field = by_name[col.name.lower()]
            if col.source == "timestamp":
                raw: pa.Array = batch.timestamps_ms().cast(pa.timestamp("ms", "UTC"))
            elif col.source == "key":
                raw = batch.keys()
            else:
                raw = values.column(col.name).combine_chunks()
            arrays[field.name] = convert(raw, field)
        return pa.table(arrays)

    def _append(self, table_id: str, data: pa.Table, batch: SinkBatch) -> str:
        """Append ``data`` to a new PENDING stream on ``table_id``, finalize it; its name."""
        from google.cloud.bigquery_storage_v1 import types

        opts = self.options
        write = clients(opts).write
        project, dataset, table = split_table_id(table_id)
        parent = f"projects/{project}/datasets/{dataset}/tables/{table}"
        where = f"bigquery table {table_id}"
        chunks = list(_chunks(data, opts.max_request_bytes))
        retry = write_retry(opts)
        try:
            stream = write.create_write_stream(
                parent=parent,
                write_stream=types.WriteStream(type_=types.WriteStream.Type.PENDING),
                timeout=opts.ddl_timeout,
                retry=retry,
            )
            requests = _requests(stream.name, data.schema, chunks)
            responses = write.append_rows(
                requests, timeout=opts.insert_timeout * max(1, len(chunks)), retry=retry
            )
            for response in responses:
                _check_append(response, where)
            write.finalize_write_stream(name=stream.name, timeout=opts.ddl_timeout, retry=retry)
        except QuixSinksError:
            raise
        except Exception as exc:
            raise translate(exc, where) from exc
        batch.count("append_requests", len(chunks))
        return str(stream.name)

    # ------------------------------------------------------------------ driver: commit

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedStream]]) -> None:
        streams = [s for r in sorted(receipts, key=lambda r: r.partition_id) for s in r.staged]
        if not self.options.exactly_once:
            self._commit_streams(self._target_id, streams)
            return
        self.options.retry_policy().call(
            lambda: self._commit_once(context, streams),
            stats=RetryStats(),
            what=f"bigquery commit of batch {context.batch_id}",
        )

    def _commit_once(self, context: CommitContext, streams: list[StagedStream]) -> None:
        sink_id, batch_id, query_id = context.sink_id, context.batch_id, context.query_id
        entries = self._ledger_entries(sink_id)
        dropped = fence_owners(
            sink_id, query_id, {e.query_id for e in entries}, self.options.takeover_query_id
        )
        if dropped is not None:
            self.logger.warning(
                "sink id %s: taking over from query %s (takeover_query_id)", sink_id, dropped
            )
            self._query(
                f"DELETE FROM {self._sql_table(self._ledger_id)} WHERE sink_id = "
                f"{_literal(sink_id)} AND query_id = {_literal(dropped)}"
            )
            entries = [e for e in entries if e.query_id != dropped]
        if any(e.batch_id == batch_id for e in entries):
            log_already_committed(sink_id, batch_id)
            self._clean_staging_after_commit(context)
            return
        self._commit_streams(self._staging_id, streams)
        try:
            self._query(self._transaction(context, streams))
        except DestinationError:
            # the guard's ERROR(): another query wrote under this sink id meanwhile
            entries = self._ledger_entries(sink_id)
            fence_owners(sink_id, query_id, {e.query_id for e in entries}, None)
            raise
        self._clean_staging_after_commit(context)

    def _clean_staging_after_commit(self, context: CommitContext) -> None:
        """The batch has landed: a failed cleanup must not fail it. Staging rows of losing
        attempts are never read (the target takes the winners' tokens only) and are swept by
        age in a later commit."""
        try:
            self._clean_staging(context)
        except QuixSinksError as exc:
            self.logger.warning(
                "bigquery: batch %d of %s landed, but deleting its staging rows failed (%s); "
                "a later commit sweeps them",
                context.batch_id,
                context.sink_id,
                exc,
            )

    def _transaction(self, context: CommitContext, streams: list[StagedStream]) -> str:
        ledger = self._sql_table(self._ledger_id)
        target = self._sql_table(self._target_id)
        sink, batch, query = _literal(context.sink_id), context.batch_id, _literal(context.query_id)
        names: list[str] = []
        for s in streams:
            names.extend(n for n in s.columns if n not in names)
        tokens = sorted({s.token for s in streams if s.rows})
        body = []
        if self.overwrite:
            body.append(f"DELETE FROM {target} WHERE TRUE;")
        if tokens and names:
            cols = ", ".join(quote(n) for n in names)
            body.append(
                f"INSERT INTO {target} ({cols}) SELECT {cols} FROM "
                f"{self._sql_table(self._staging_id)} WHERE {quote(TOKEN_COLUMN)} IN "
                f"({', '.join(_literal(t) for t in tokens)});"
            )
        body.append(
            f"INSERT INTO {ledger} (sink_id, batch_id, query_id, committed_at) VALUES "
            f"({sink}, {batch}, {query}, CURRENT_TIMESTAMP());"
        )
        keep = self.options.ledger_keep_batches
        if context.ledgered and batch - keep > 0:
            body.append(
                f"DELETE FROM {ledger} WHERE sink_id = {sink} AND batch_id < {batch - keep};"
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

    def _commit_streams(self, table_id: str, streams: list[StagedStream]) -> None:
        """BatchCommitWriteStreams; a stream committed before (a retried commit) is fine."""
        names = [s.stream for s in streams if s.table == table_id]
        if not names:
            return
        from google.cloud.bigquery_storage_v1 import types

        write = clients(self.options).write
        project, dataset, table = split_table_id(table_id)
        parent = f"projects/{project}/datasets/{dataset}/tables/{table}"
        where = f"bigquery table {table_id}"
        try:
            retry = write_retry(self.options)
            response = write.batch_commit_write_streams(
                request=types.BatchCommitWriteStreamsRequest(parent=parent, write_streams=names),
                timeout=self.options.ddl_timeout,
                retry=retry,
            )
            failed = [e.entity for e in response.stream_errors]
            for name in failed:
                stream = write.get_write_stream(
                    name=name, timeout=self.options.ddl_timeout, retry=retry
                )
                if not stream.commit_time:
                    raise CommitError(
                        f"{where}: BigQuery did not commit the write stream {name}: "
                        f"{response.stream_errors[0].error_message}; the micro-batch will be "
                        "replayed when the query restarts from its checkpoint"
                    )
        except QuixSinksError:
            raise
        except Exception as exc:
            raise translate(exc, where) from exc

    def _clean_staging(self, context: CommitContext) -> None:
        """Delete the batch's staging rows (every attempt's), stale ones of any query, and
        the ledger row of a batch write without the key (it only made a retried commit
        idempotent)."""
        prefix = f"{name_prefix(context.sink_id, context.query_id)}/{context.batch_id}/"
        seconds = int(self.options.staging_max_age_hours * 3600)
        self._query(
            f"DELETE FROM {self._sql_table(self._staging_id)} WHERE "
            f"STARTS_WITH({quote(TOKEN_COLUMN)}, {_literal(prefix)}) OR "
            f"{quote(STAGED_AT_COLUMN)} < TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL "
            f"{seconds} SECOND)"
        )
        if not context.ledgered:
            self._query(
                f"DELETE FROM {self._sql_table(self._ledger_id)} WHERE sink_id = "
                f"{_literal(context.sink_id)}"
            )

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedStream]]) -> None:
        if not self.options.exactly_once:
            return  # uncommitted PENDING streams are never visible
        entries = self._ledger_entries(context.sink_id)
        landed = any(
            e.batch_id == context.batch_id and e.query_id == context.query_id for e in entries
        )
        if not landed:
            self._clean_staging(context)

    # ------------------------------------------------------------------ queries

    def _ledger_entries(self, sink_id: str) -> list[LedgerEntry]:
        """The ledger rows of ``sink_id`` (read with tabledata.list: no query job)."""
        bq = clients(self.options).bigquery
        try:
            rows = bq.list_rows(self._ledger_id, **self._ddl_kwargs())
            return [
                LedgerEntry(r["sink_id"], int(r["batch_id"]), r["query_id"] or "")
                for r in rows
                if r["sink_id"] == sink_id
            ]
        except Exception as exc:
            raise translate(exc, f"bigquery table {self._ledger_id}") from exc

    def _query(self, sql: str) -> None:
        bq = clients(self.options).bigquery
        opts = self.options
        try:
            job = bq.query(sql, timeout=opts.ddl_timeout, **_job_retry(opts.retry_timeout))
            job.result(timeout=opts.retry_timeout + opts.insert_timeout)
        except Exception as exc:
            raise translate(exc, describe(opts)) from exc


# ---------------------------------------------------------------------- helpers


def _job_retry(deadline: float) -> dict[str, Any]:
    from google.cloud.bigquery.retry import DEFAULT_JOB_RETRY, DEFAULT_RETRY

    return {
        "retry": DEFAULT_RETRY.with_deadline(deadline),
        "job_retry": DEFAULT_JOB_RETRY.with_deadline(deadline),
    }


def _literal(text: str) -> str:
    """A BigQuery string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _covers(existing: list[BQField], wanted: list[BQField]) -> bool:
    """Whether ``existing`` has every wanted column, each of a fitting type."""
    by_name = {f.name.lower(): f for f in existing}
    return all(
        f.name.lower() in by_name and conflict(f, by_name[f.name.lower()]) is None for f in wanted
    )


def _nullable(f: BQField) -> BQField:
    return f if f.mode == "REPEATED" else BQField(f.name, f.type, "NULLABLE", f.fields)


def _schema_field(bigquery: Any, f: BQField) -> Any:
    return bigquery.SchemaField(
        f.name, f.type, mode=f.mode, fields=[_schema_field(bigquery, c) for c in f.fields]
    )


def _from_schema_field(f: Any) -> BQField:
    return BQField.canonical(
        f.name, f.field_type, f.mode, [_from_schema_field(c) for c in f.fields]
    )


def _with_all_columns(data: pa.Table, fields: list[BQField]) -> pa.Table:
    """``data`` with the table's columns in the table's order (nulls for columns this batch
    does not have)."""
    schema = arrow_schema(fields)
    by_name = {n.lower(): n for n in data.column_names}
    arrays = []
    for f in schema:
        name = by_name.get(f.name.lower())
        arrays.append(data.column(name) if name is not None else pa.nulls(data.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _chunks(data: pa.Table, max_bytes: int) -> Iterator[pa.RecordBatch]:
    """Record batches whose IPC form stays below ``max_bytes``; a single row above it is a
    RecordError (BigQuery's request limit is 10 MB)."""
    if data.num_rows == 0:
        return
    per_row = max(1, data.nbytes // max(1, data.num_rows))
    step = max(1, int(max_bytes * 0.8) // per_row)
    start = 0
    while start < data.num_rows:
        length = min(step, data.num_rows - start)
        batch = data.slice(start, length).combine_chunks().to_batches()
        record = batch[0] if batch else pa.record_batch([], schema=data.schema)
        size = record.serialize().size
        if size > max_bytes:
            if length == 1:
                raise RecordError(
                    f"bigquery: row {start} of this batch is {size} bytes as Arrow, more than "
                    f"one append request may carry ({max_bytes} bytes; BigQuery's limit is "
                    "10 MB); split or shorten the row",
                    row=start,
                )
            step = max(1, length // 2)
            continue
        yield record
        start += length


def _requests(name: str, schema: pa.Schema, chunks: list[pa.RecordBatch]) -> Iterator[Any]:
    from google.cloud.bigquery_storage_v1 import types

    offset = 0
    for i, chunk in enumerate(chunks):
        arrow = types.AppendRowsRequest.ArrowData()
        if i == 0:
            arrow.writer_schema = types.ArrowSchema(
                serialized_schema=schema.serialize().to_pybytes()
            )
        arrow.rows = types.ArrowRecordBatch(
            serialized_record_batch=chunk.serialize().to_pybytes(), row_count=chunk.num_rows
        )
        request = types.AppendRowsRequest(write_stream=name, offset=offset)
        request.arrow_rows = arrow
        offset += chunk.num_rows
        yield request


#: google.rpc.Code ALREADY_EXISTS: the rows at this offset were appended before (a
#: resent request after a lost answer): they are there once
_ALREADY_EXISTS = 6


def _check_append(response: Any, where: str) -> None:
    pb = getattr(response, "_pb", response)
    if pb.HasField("error") and pb.error.code not in (0, _ALREADY_EXISTS):
        if pb.row_errors:
            first = pb.row_errors[0]
            raise RecordError(
                f"{where}: BigQuery refused row {first.index} of an append: {first.message}",
                row=int(first.index),
            )
        raise DestinationError(
            f"{where}: append refused (code {pb.error.code}): {pb.error.message}", location=where
        )
