"""``tsdatalake``: Hive-partitioned Parquet per table, exactly once (Quix QuixTSDataLakeSink).

Layout under ``path``::

    <table>/<col>=<value>/.../data_<uuid>.parquet   the data (Hive readers see only this)
    _quixsinks/<table>/                             staging, fenced ledger, layout.json

A task splits its rows by partition (``wire.Layout``) and stages one Parquet file per
partition (more with ``max_rows_per_file``); the partition columns are left out of the
file. The driver publishes a micro-batch with the ``file`` sink's protocol
(:class:`~quixsinks.core.publish.FilePublisher`): one create-only marker holding the
winning manifest, then moves to fixed names. The uuid of a file name is derived from the
query, the batch, the task partition, the piece and the partition path, so a replayed or
retried micro-batch never leaves a duplicate or an orphan file, which Quix's retry does.

Silence detection (``stream_timeout_ms`` + ``on_stream_timeout``) is wired through the
commit into a watcher in the driver process: see :mod:`.silence`.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from quixsinks.core.batch import SinkBatch, name_prefix
from quixsinks.core.column_types import ColumnTypes
from quixsinks.core.commits import CommitRecord
from quixsinks.core.destinations import Destination, destination_for
from quixsinks.core.errors import DestinationNotFoundError, OptionError, RecordError
from quixsinks.core.publish import FilePublisher, PublishResult, StagedFile, StagingArea
from quixsinks.core.records import RecordSchema
from quixsinks.core.secrets import mask_value
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task
from quixsinks.core.tables.catalog import import_pyiceberg

from .client import CatalogTable, RegisteredFile, read_published
from .options import TIME_COLUMNS, TSDataLakeOptions
from .silence import SilenceSpool
from .wire import Layout, partitionable, unfit_rows

__all__ = ["TSDataLakeSink", "TSPiece"]

STATE_ROOT = "_quixsinks"
KAFKA_KEY_COLUMN = "_key"
_NAMESPACE = uuid.UUID("6f1c2a52-8f0e-4f55-9d43-6b8f1f0c7a11")


@dataclass
class TSPiece:
    """What one ``write`` staged: its files, and the keys it saw (silence detection).

    With catalog registration also the rows' schema (hive identity columns included) and
    each file's Parquet footer (``pyarrow.parquet.FileMetaData``), for the driver's
    Iceberg commit.
    """

    files: list[StagedFile] = field(default_factory=list)
    keys: list[tuple[Any, int]] = field(default_factory=list)
    schema: pa.Schema | None = None
    footers: list[Any] = field(default_factory=list)


class TSDataLakeSink(Sink[TSDataLakeOptions, TSPiece]):
    """Writes Hive-partitioned Parquet tables; exactly-once. See docs/sinks/tsdatalake.md.

    A subclass may define ``on_stream_timeout(key)`` (a staticmethod) instead of the
    option; register it with ``quixsinks.register(spark, MySink)``.
    """

    name: ClassVar[str] = "tsdatalake"
    options_class = TSDataLakeOptions
    guarantee = "exactly-once"
    #: a subclass may set the silence callback here instead of the option
    on_stream_timeout: ClassVar[Callable[[Any], object] | None] = None

    def __init__(self, options: TSDataLakeOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.target: Destination = destination_for(options.path, options)
        self.layout = Layout(
            options.hive_columns,
            options.timestamp_column if options.time_columns else None,
            options.timestamp_unit,
        )
        self.catalog_rows: pa.Schema | None = None

    def __repr__(self) -> str:
        return f"TSDataLakeSink({self.target.url!r}, table={self.options.table_name!r})"

    # ------------------------------------------------------------------ shared

    @property
    def state_prefix(self) -> str:
        return f"{STATE_ROOT}/{self.options.table_name}"

    def staging(self) -> StagingArea:
        return StagingArea(
            self.target,
            self.state_prefix,
            keep_batches=self.options.ledger_keep_batches,
            staging_max_age_hours=self.options.staging_max_age_hours,
        )

    @property
    def silence_callback_source(self) -> dict[str, str] | None:
        """What names the callback (the option, or this subclass), or None when silence
        detection is off. Only for this check and the commit's decision to record keys: the
        watcher finds the callback in the user's process (see :func:`.silence.track`)."""
        opts = self.options
        if not opts.silence_enabled:
            return None
        if opts.on_stream_timeout:
            return {"on_stream_timeout": opts.on_stream_timeout}
        if callable(type(self).on_stream_timeout):
            cls = type(self)
            return {"sink_class": f"{cls.__module__}:{cls.__qualname__}"}
        return None

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        opts = self.options
        self.records = RecordSchema.resolve(
            schema,
            key_column=opts.key_column,
            # the time stays a column of the rows; Kafka's own timestamp is metadata
            timestamp_column="auto" if RecordSchema.is_kafka(schema) else "none",
            value_columns=opts.value_columns,
            value_format=opts.value_format,
        )
        row_names = self._row_names(schema)
        clash = [c for c in opts.time_columns if row_names is not None and c in row_names]
        if clash:
            raise OptionError(
                f"tsdatalake: hive column {clash[0]!r} is derived from the timestamp column, "
                f"but the DataFrame also has a column {clash[0]!r}; rename that column (or "
                "leave it out of hive_columns)",
                option="hive_columns",
                value=",".join(opts.hive_columns),
            )
        if row_names is not None:  # columns known now (not parsed per batch from JSON)
            missing = [c for c in opts.hive_columns if c not in TIME_COLUMNS and c not in row_names]
            if missing:
                raise OptionError(
                    f"tsdatalake: hive column {missing[0]!r} is not a column of the DataFrame "
                    f"(columns: {', '.join(row_names)}); year, month, day and hour are "
                    "derived from timestamp_column",
                    option="hive_columns",
                    value=",".join(opts.hive_columns),
                    allowed=row_names,
                )
            for name in opts.hive_columns:
                if name in TIME_COLUMNS or name not in schema.names:
                    continue
                t = schema.field(name).type
                if not partitionable(t):
                    raise OptionError(
                        f"tsdatalake: hive column {name!r} has type {t}; partition by an "
                        "integer, string, boolean or date column",
                        option="hive_columns",
                        value=",".join(opts.hive_columns),
                    )
            if opts.time_columns:
                ts = opts.timestamp_column
                if ts not in schema.names:
                    raise OptionError(
                        f"tsdatalake: hive columns {', '.join(opts.time_columns)} need "
                        f"timestamp_column {ts!r}, which the DataFrame does not have "
                        f"(columns: {', '.join(schema.names)})",
                        option="timestamp_column",
                        value=ts,
                        allowed=list(schema.names),
                    )
                if ts not in row_names:  # the partitions come from the rows as written
                    raise OptionError(
                        f"tsdatalake: hive columns {', '.join(opts.time_columns)} need "
                        f"timestamp_column {ts!r} among the columns written, and "
                        f"value_columns leaves it out (written: {', '.join(row_names)}); "
                        "add it to value_columns",
                        option="value_columns",
                        value=",".join(opts.value_columns or ()),
                    )
                t = schema.field(ts).type
                if not (pa.types.is_timestamp(t) or pa.types.is_integer(t)):
                    raise OptionError(
                        f"tsdatalake: timestamp_column {ts!r} has type {t}; expected a "
                        "timestamp or an integer epoch in timestamp_unit",
                        option="timestamp_column",
                        value=ts,
                    )
            if len(opts.hive_columns) and set(opts.hive_columns) >= set(row_names):
                raise OptionError(
                    "tsdatalake: every column is a hive column; the files would hold no column",
                    option="hive_columns",
                    value=",".join(opts.hive_columns),
                )
        if opts.catalog_url:
            if not self.target.url.startswith(("/", "s3://")):
                raise OptionError(
                    f"tsdatalake: catalog registration (catalog_url) supports tables on local "
                    f"disk and S3 in this release, not {self.target.url}",
                    option="catalog_url",
                    value=mask_value(opts.catalog_url),
                )
            import_pyiceberg()  # the iceberg extra, before any data moves
            # the rows' columns when known now (JSON values: from the first micro-batch)
            self.catalog_rows = (
                None if row_names is None else pa.schema([schema.field(n) for n in row_names])
            )
        if opts.silence_enabled and self.silence_callback_source is None:
            self.logger.warning(
                "tsdatalake: stream_timeout_ms is set but no on_stream_timeout: silence "
                "detection is disabled"
            )
        if opts.on_stream_timeout and ":" not in opts.on_stream_timeout:
            raise OptionError(
                f"tsdatalake: on_stream_timeout {opts.on_stream_timeout!r} must be an import "
                "path 'package.module:function'",
                option="on_stream_timeout",
                value=opts.on_stream_timeout,
            )

    def _row_names(self, schema: pa.Schema) -> list[str] | None:
        """The columns of the written rows, or None when they come from parsed JSON."""
        records = self.records
        assert records is not None
        if records.value_json:
            return None
        names = list(records.values)
        if records.key is not None and records.key not in names:
            names.insert(0, records.key)
        return names

    def preflight(self) -> None:
        try:
            self.staging().check()
        except DestinationNotFoundError:
            create = getattr(self.target, "create_root", None)
            if not (self.options.auto_create_bucket and create is not None):
                raise
            create()
            self.staging().check()
        self._check_layout()
        if self.options.catalog_url:
            self.catalog().check(self.catalog_rows)
        if self.silence_callback_source is not None:  # refused before any data moves
            SilenceSpool.directory_for(self.options.stream_timeout_dir)

    def catalog(self) -> CatalogTable:
        """The Iceberg table the files are registered in (``catalog_url``)."""
        return CatalogTable(self.options, self.target.url)

    def _layout_record(self) -> dict[str, Any]:
        opts = self.options
        return {
            "hive_columns": list(opts.hive_columns),
            "timestamp_unit": opts.timestamp_unit,
            "workspace_id": opts.workspace_id,
        }

    def _check_layout(self) -> None:
        """Refuse a layout that disagrees with the table's (recorded, or its folders)."""
        opts = self.options
        key = f"{self.state_prefix}/layout.json"
        ours = "/".join(opts.hive_columns) or "(unpartitioned)"
        try:
            recorded = json.loads(self.target.read_bytes(key))
        except DestinationNotFoundError:
            recorded = None
        if recorded is not None:
            theirs = "/".join(recorded.get("hive_columns", [])) or "(unpartitioned)"
            if recorded.get("hive_columns", []) != list(opts.hive_columns):
                raise OptionError(
                    f"tsdatalake: table {opts.table_name!r} at {self.target.url} is "
                    f"partitioned as {theirs}, not {ours} (hive_columns); write with its "
                    "layout or to another table",
                    option="hive_columns",
                    value=",".join(opts.hive_columns),
                )
            if opts.time_columns and recorded.get("timestamp_unit") != opts.timestamp_unit:
                raise OptionError(
                    f"tsdatalake: table {opts.table_name!r} was written with timestamp_unit "
                    f"{recorded.get('timestamp_unit')!r}, not {opts.timestamp_unit!r}",
                    option="timestamp_unit",
                    value=opts.timestamp_unit,
                )
            return
        for existing in self.target.list(f"{opts.table_name}/"):
            parts = existing[len(opts.table_name) + 1 :].split("/")[:-1]
            if any(p.startswith(("_", ".")) for p in parts):
                continue
            names = [p.split("=", 1)[0] for p in parts]
            if names != list(opts.hive_columns):
                theirs = "/".join(names) or "(unpartitioned)"
                raise OptionError(
                    f"tsdatalake: existing files of table {opts.table_name!r} are partitioned "
                    f"as {theirs} (e.g. {existing}), not {ours} (hive_columns)",
                    option="hive_columns",
                    value=",".join(opts.hive_columns),
                )
            break
        # record it once, here rather than in every commit; a writer that recorded another
        # layout meanwhile is checked against
        if not self.target.create_exclusive(key, json.dumps(self._layout_record()).encode()):
            self._check_layout()

    # ------------------------------------------------------------------ executor

    def check_fence(self, task: Task) -> None:
        ctx = task.context
        self.staging().ledger(self.options.takeover_query_id).check(ctx.sink_id, ctx.query_id)

    def rows(self, batch: SinkBatch) -> pa.Table:
        """The rows as written (before the hive identity columns are taken out)."""
        records = batch.records
        if records.value_json:
            values = batch.values()
            clash = [c for c in self.options.time_columns if c in values.column_names]
            held = [c for c in clash if values.column(c).null_count < values.num_rows]
            if held:  # the rows holding it are isolated and refused (on_error)
                raise RecordError(
                    f"tsdatalake: hive column {held[0]!r} is derived from the timestamp "
                    f"column, but the JSON values also have a field {held[0]!r}; rename the "
                    "field (or leave it out of hive_columns)",
                    column=held[0],
                )
            if clash:  # a field only null in these rows (a slice of a batch): left out
                values = values.drop_columns(clash)
            if records.key is not None:
                if KAFKA_KEY_COLUMN in values.column_names:
                    values = values.drop_columns([KAFKA_KEY_COLUMN])
                values = values.add_column(0, KAFKA_KEY_COLUMN, batch.keys())
            return values
        names = list(records.values)
        if records.key is not None and records.key not in names:
            names.insert(0, records.key)
        return batch.table.select(names)

    def write(self, batch: SinkBatch) -> TSPiece:
        """Stage one Parquet file per partition (more with ``max_rows_per_file``).

        Rows whose partition directory would be too long, and (JSON values) rows holding a
        value whose type changed against the table's, are refused (``on_error``) once the
        other rows are staged, so a failed or retried write refuses nothing twice."""
        opts = self.options
        rows = self.rows(batch)
        types = None
        if batch.records.value_json:  # JSON values: one Parquet type per column per table
            types = ColumnTypes(self.target, f"{self.state_prefix}/columns")
        refused = self._refusals(rows, types)
        kept = batch
        if refused:
            if opts.on_error == "fail":
                batch.refuse(*refused[0])  # raises, naming the row
            keep = pc.invert(
                pc.is_in(pa.array(range(batch.num_rows)), pa.array([r for r, _ in refused]))
            )
            # JSON values are parsed again: the remaining rows' columns take their own types
            kept = dataclasses.replace(batch, table=batch.table.filter(keep), _values=None)
            rows = self.rows(kept)
        piece = self._write_rows(kept, rows, types)
        for row, error in refused:
            batch.refuse(row, error)
        return piece

    def _refusals(self, rows: pa.Table, types: ColumnTypes | None) -> list[tuple[int, RecordError]]:
        """The rows this table refuses, in row order, each with its error."""
        refused: dict[int, RecordError] = dict(unfit_rows(rows, self.options.hive_columns))
        if types is not None:
            identity = [c for c in self.options.hive_columns if c not in TIME_COLUMNS]
            for row, error in types.refusals(rows, self.options.table_name, exclude=identity):
                refused.setdefault(row, error)
        return sorted(refused.items())

    def _write_rows(self, batch: SinkBatch, rows: pa.Table, types: ColumnTypes | None) -> TSPiece:
        opts = self.options
        conform = None
        if types is not None:
            conform = lambda table: types.conform(table, opts.table_name)  # noqa: E731
        piece = TSPiece()
        if opts.catalog_url:
            piece.schema = rows.schema
        for path, part in self.layout.split(rows):
            chunks = [part]
            if opts.max_rows_per_file and part.num_rows > opts.max_rows_per_file:
                n = opts.max_rows_per_file
                chunks = [part.slice(i, n) for i in range(0, part.num_rows, n)]
            for chunk in chunks:
                piece.files.append(self._stage(batch, path, chunk, conform, piece))
        if opts.silence_enabled and batch.records.key is not None and batch.task is not None:
            piece.keys = self._seen_keys(batch)
        return piece

    def _stage(
        self,
        batch: SinkBatch,
        path: str,
        table: pa.Table,
        conform: Callable[[pa.Table], pa.Table] | None,
        piece: TSPiece,
    ) -> StagedFile:
        ctx = batch.context
        n = batch.counters.get("files", 0)
        batch.count("files")
        ident = uuid.uuid5(
            _NAMESPACE, f"{ctx.name_prefix}/{ctx.batch_id}/{ctx.partition_id}/{n}/{path}"
        )
        name = f"data_{ident}.parquet"
        folder = f"{self.options.table_name}/{path}" if path else self.options.table_name
        compression = self.options.compression
        footers: list[Any] = []  # the footer of the last try (for catalog registration)

        def produce(out: BinaryIO) -> None:
            data = conform(table) if conform is not None else table
            footers.clear()
            pq.write_table(data, out, compression=compression, metadata_collector=footers)

        staged = self.staging().stage(
            ctx, f"{n:06d}-{name}", produce, final_key=f"{folder}/{name}", rows=table.num_rows
        )
        if self.options.catalog_url:
            piece.footers.append(footers[-1])
        return staged

    def _seen_keys(self, batch: SinkBatch) -> list[tuple[Any, int]]:
        """The batch's distinct keys with the time they were seen, within the task's bound."""
        task = batch.task
        assert task is not None
        seen: set[Any] = task.state.setdefault("silence_keys", set())
        limit = self.options.stream_timeout_max_keys
        now = int(time.time() * 1000)
        out = []
        for key in pc.unique(batch.keys()).to_pylist():
            if key is None:
                continue
            if key not in seen and len(seen) >= limit:
                batch.count("silence_keys_dropped")
                continue
            seen.add(key)
            out.append((key, now))
        return out

    # ------------------------------------------------------------------ driver: commit

    def commit(self, context: CommitContext, receipts: list[Receipt[TSPiece]]) -> None:
        pieces = [p for r in sorted(receipts, key=lambda r: r.partition_id) for p in r.staged]
        files = [f for p in pieces for f in p.files]
        registering = bool(self.options.catalog_url)
        result = FilePublisher(self.staging(), self.options.takeover_query_id).publish(
            context.sink_id,
            context.batch_id,
            files,
            query_id=context.query_id,
            name_prefix=name_prefix(context.sink_id, context.query_id),
            # registering a batch write without the key: its marker goes after the
            # registration, so that an abort still finds (and rolls back) the published files
            keep_ledger=context.ledgered or registering,
            record=context.commit_record(receipts),
        )
        if registering:
            self._register(context, pieces, files, result)
        source = self.silence_callback_source
        if source is not None and context.streaming and context.query_id:
            dropped = sum(r.counters.get("silence_keys_dropped", 0) for r in receipts)
            if dropped:
                self.logger.warning(
                    "tsdatalake: %d key(s) not tracked for silence in batch %d "
                    "(stream_timeout_max_keys=%d per task)",
                    dropped,
                    context.batch_id,
                    self.options.stream_timeout_max_keys,
                )
            SilenceSpool(context.query_id, self.options.stream_timeout_dir).record(
                (kv for p in pieces for kv in p.keys),
                config={
                    "stream_timeout_ms": self.options.stream_timeout_ms,
                    "stream_timeout_state": self.options.stream_timeout_state,
                    "sink_id": context.sink_id,
                    "table": self.options.table_name,
                },
            )

    def _register(
        self,
        context: CommitContext,
        pieces: list[TSPiece],
        files: list[StagedFile],
        result: PublishResult,
    ) -> None:
        """Register the published files in the catalog, in one snapshot per batch."""
        if result.superseded:
            return
        if result.already_committed:  # the manifest is an earlier attempt's: footers re-read
            registered = [RegisteredFile(key, 0) for key in result.published]
        else:
            footers = [m for p in pieces for m in p.footers]
            registered = [
                RegisteredFile(f.final_key, f.nbytes, m)
                for f, m in zip(files, footers, strict=True)
            ]
        schemas = [p.schema for p in pieces if p.schema is not None]
        rows = pa.unify_schemas(schemas) if schemas else None
        self.catalog().register(
            context, registered, rows, lambda key: read_published(self.target, key)
        )
        if not context.ledgered:  # an unkeyed batch write is never seen again: marker goes
            self.staging().forget(context.sink_id, context.batch_id)

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The records kept in the batches' markers under ``_quixsinks/<table>``, oldest
        first (the newest ``ledger_keep_batches`` per sink id are kept)."""
        return self.staging().commit_records(sink_id)

    def abort(self, context: CommitContext, receipts: list[Receipt[TSPiece]]) -> None:
        files = [f for r in receipts for p in r.staged for f in p.files]
        FilePublisher(self.staging()).abort(
            context.sink_id, context.batch_id, files, ledgered=context.ledgered
        )
