"""The BigQuery sink: Arrow into PENDING Storage Write streams, one driver transaction.

Executor (``write``): each SinkBatch's rows are converted to the Arrow types of the
table's columns (``schema.py``), tagged with the task attempt's token (``_qs_token``:
sink id, batch id, attempt id) and appended, in requests below ``max_request_bytes``
with explicit offsets, to a new PENDING write stream on the staging table
``<table>_qs_staging``; the stream is finalized and its name, token and row count go
to the driver in the receipt. A retried write opens a new stream: the old one is never
committed, so nothing of it is ever visible. Rows BigQuery refuses (a value its column
cannot take, a row too large for one request, AppendRows ``row_errors``) are refused
(``on_error``) and left out of the stream that is committed (:mod:`.writing`).

Driver (``commit``): fence the ledger (``_quixsinks_ledger`` in the dataset: rows of
another query id under this sink id stop the commit with LedgerFenceError unless
``takeover_query_id`` names that query); skip a batch the ledger holds; otherwise
BatchCommitWriteStreams the winning streams (their rows become visible in the staging
table only), then one multi-statement transaction: if the ledger has no row for this
sink id and batch, delete the target's rows (overwrite only), INSERT the target's
columns from the staging rows of the winning tokens, INSERT the ledger row (with the
micro-batch's commit record), prune old ledger rows, COMMIT. Then the staging rows of the
batch (failed attempts' too) and staging rows older than ``staging_max_age_hours`` are
deleted. A driver that dies
anywhere in between leaves either no ledger row (a replay stages anew and commits its
own tokens only) or a ledger row (a replay is skipped): every row exactly once.

``write_mode=direct``: PENDING streams straight on the target, committed together by
the driver (each micro-batch appears at once); a replayed micro-batch after a driver
restart is written again (at-least-once).
"""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa

from quixsinks.core.batch import SinkBatch
from quixsinks.core.commits import CommitRecord
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task

from .client import import_bigquery
from .ddl import ColumnConflict, check_dataset, ensure_table
from .ledger import commit_records
from .modes import WriteMode, write_mode
from .options import BigQueryOptions
from .schema import BQField, Column, column_plan
from .streams import StagedStream, append
from .wire import RowsRefused, with_all_columns
from .writing import chunked, converted, refused

__all__ = ["BigQuerySink", "StagedStream"]


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

    @property
    def mode(self) -> WriteMode:
        return write_mode(self.options)

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        assert self.records is not None
        if self.overwrite and not self.options.exactly_once:
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
            self.mode.ensure(self._ensure_target(wanted))
        else:  # JSON values without metadata columns: the first write creates the table
            check_dataset(self.options)
        self.mode.preflight()

    def _ensure_target(self, columns: list[Column]) -> list[BQField]:
        return ensure_table(self.options, self.options.table_path, [c.field for c in columns])

    # ------------------------------------------------------------------ executor

    def check_fence(self, task: Task) -> None:
        self.mode.check_fence(task)

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
        mode = self.mode
        try:
            target = self._ensure_target(columns)
        except ColumnConflict as exc:
            if self.columns is not None:
                raise
            # JSON values: the rows' own types conflict with the table's; write() is
            # called again on halves of the batch, down to the rows that conflict
            raise RecordError(f"bigquery: {exc}") from exc
        fields = mode.ensure(target)
        batch, data = converted(batch, columns, target)
        table_id, data, token = mode.stage(data, batch.context)
        data = with_all_columns(data, fields)
        while data.num_rows:
            batch, data, records = chunked(batch, data, self.options.max_request_bytes)
            if not records:
                break
            try:
                stream = append(self.options, table_id, data.schema, records)
            except RowsRefused as exc:  # the stream stays unfinalized: never visible
                batch, data = refused(batch, data, exc)
                continue
            batch.count("append_requests", len(records))
            written = tuple(c.name for c in columns)
            return StagedStream(stream, table_id, token, data.num_rows, written)
        return None

    # ------------------------------------------------------------------ driver: commit

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedStream]]) -> None:
        streams = [s for r in sorted(receipts, key=lambda r: r.partition_id) for s in r.staged]
        self.mode.commit(
            context,
            streams,
            overwrite=self.overwrite,
            record=lambda: context.commit_record(list(receipts)).to_json(),
        )

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedStream]]) -> None:
        self.mode.abort(context)

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The commit records in the ledger table (``write_mode=exactly-once``), oldest
        first; ``write_mode=direct`` keeps no ledger."""
        if not self.options.exactly_once:
            return super().commit_records(sink_id)
        return commit_records(self.options, sink_id)
