"""``file``: JSON Lines, Parquet or CSV files in a directory, exactly once (Quix FileSink).

Layout under ``path``::

    <prefix>-<batch id>-<partition>-<piece>.jsonl   one file per task piece per micro-batch
    <sink id>.jsonl                                 with append=true: one growing file
    _quixsinks/                                     staging area and fenced ledger (hidden
                                                    from Spark and pandas readers by "_")

With JSON values (a Kafka ``value``), Parquet files of one directory keep one type per
column: the first file to write a column fixes its type, later files are widened to it
(nulls, int64 into float64); a row holding a value of another type is refused under
``on_error`` (see quixsinks.core.column_types), as is a row whose JSON value has a field
``_key`` or ``_timestamp``; the batch's other rows still make one file. Before the
first file in a directory that holds other Parquet files (Quix's FileSink's, under
``<topic>/<partition>/``), their column types are taken as the directory's.

The sink id is the streaming query's id (the same after a restart from the checkpoint)
or the ``sink_id`` option; a batch write uses a fresh ``write-<uuid>``, unless it is keyed
(``sink_id`` and ``batch_id``: recorded in the ledger, a rerun publishes nothing). The
prefix is the sink id, followed by the first 8 characters of the query id when an explicit
``sink_id`` is set (so a query that takes a sink id over never reuses an old query's
names; keyed batch writes use the bare sink id). File
names are fixed by the micro-batch, so a replayed or retried micro-batch never leaves a
duplicate or an orphan file (see quixsinks.core.publish for the protocol).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import BinaryIO, ClassVar, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from quixsinks.core.batch import SinkBatch, name_prefix
from quixsinks.core.column_types import ColumnTypes, rows_holding
from quixsinks.core.commits import CommitRecord
from quixsinks.core.destinations import (
    Destination,
    LocalDestination,
    StorageOptions,
    destination_for,
)
from quixsinks.core.errors import (
    DestinationNotFoundError,
    InvalidFormatError,
    OptionError,
    RecordError,
)
from quixsinks.core.formats import (
    CSV_DIALECTS,
    CSVFormat,
    Format,
    JSONFormat,
    ParquetCompression,
    ParquetFormat,
    non_utf8_rows,
)
from quixsinks.core.options import load_callable, option
from quixsinks.core.publish import AppendPublisher, FilePublisher, StagedFile, StagingArea
from quixsinks.core.sink import CommitContext, LedgerOptions, Receipt, Sink, Task, staged_in_order

__all__ = ["FileOptions", "FileSink"]

STATE_PREFIX = "_quixsinks"
#: columns of the Parquet files besides the JSON value's fields
QUIX_COLUMNS = ("_timestamp", "_key")
#: the names of the files this sink publishes (<prefix>-<batch>-<partition>-<piece>.<ext>)
OUR_FILE_NAME = re.compile(r"^[^/]*-\d{10}-\d{5}-\d{4}\.[^/]*$")
FORMATS: dict[str, type[Format]] = {"json": JSONFormat, "parquet": ParquetFormat, "csv": CSVFormat}


@dataclass(frozen=True, kw_only=True)
class FileOptions(LedgerOptions, StorageOptions):
    sink_name: ClassVar[str] = "file"

    path: str = option(
        doc="Output directory: an absolute local path (its parent must exist; on a cluster, "
        "one every executor sees), or s3://bucket/prefix, abfs[s]://container@account"
        ".dfs.core.windows.net/prefix, az://container/prefix, gs://bucket/prefix"
    )
    format: Literal["json", "parquet", "csv"] = option("json", doc="File format")
    compression: ParquetCompression = option("snappy", doc="Parquet compression codec")
    compress: bool = option(False, doc="gzip JSON files (extension .jsonl.gz)")
    dumps: str | None = option(
        None, doc="JSON only: import path 'module:function' of a dict -> str encoder"
    )
    dialect: Literal["excel", "excel-tab", "unix"] = option(
        "excel", doc=f"CSV only: dialect, one of {', '.join(CSV_DIALECTS)}"
    )
    append: bool = option(
        False,
        doc="Append every micro-batch to one file per sink id (json and csv; local or "
        "mounted directories only)",
    )
    quix_compat: bool = option(
        False,
        doc="Quix FileSink's record shapes where ours differ by design: Parquet _key as "
        "text, JSON lines as Quix's writer encodes them; a binary key that is not UTF-8 "
        "is refused (on_error); see 'Migrating from Quix Streams'",
    )
    max_rows_per_file: int = option(
        0, minimum=0, doc="Start a new file after this many rows (0: no limit)"
    )
    max_file_bytes: int = option(
        0,
        minimum=0,
        doc="Start a new file after about this many bytes of Arrow data (0: no limit; the "
        "encoded file is usually smaller)",
    )

    def validate(self) -> None:
        super().validate()
        if self.append and not FORMATS[self.format].appendable:
            raise InvalidFormatError(
                f"format {self.format!r} cannot be appended to; set append=false (one file "
                "per micro-batch) or use format 'json' or 'csv'",
                option="append",
                value="true",
                allowed=tuple(name for name, cls in FORMATS.items() if cls.appendable),
            )
        if self.dumps is not None and self.format != "json":
            raise InvalidFormatError(
                f"option 'dumps' applies to format 'json' only, not {self.format!r}",
                option="dumps",
                value=self.dumps,
            )


class FileSink(Sink[FileOptions, list[StagedFile]]):
    """Writes micro-batches as files; exactly-once. See docs/sinks/file.md."""

    name: ClassVar[str] = "file"
    options_class = FileOptions
    guarantee = "exactly-once"
    supports_overwrite = True

    def __init__(self, options: FileOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        # resolved once, on the driver: executors get the absolute location
        self.target: Destination = destination_for(options.path, options)
        self._key_type: pa.DataType | None = None  # of the Parquet _key column (prepare)

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        key = self.records.key if self.records is not None else None
        self._key_type = schema.field(key).type if key else None
        binary_key = self._key_type is not None and (
            pa.types.is_binary(self._key_type) or pa.types.is_large_binary(self._key_type)
        )
        if binary_key and self.options.quix_compat:
            self._key_type = pa.string()  # the type of the Parquet _key column
        if self.options.append and not self.target.supports_append:
            raise OptionError(
                f"append=true needs a local or mounted directory, not {self.target.url}: an "
                "object store cannot append; use append=false (one file per micro-batch, "
                "exactly-once as well)",
                option="append",
                value="true",
            )
        if self.overwrite and self.options.append:
            raise InvalidFormatError(
                "append=true cannot be combined with overwrite; use save mode 'append'",
                option="append",
                value="true",
            )
        if self.options.dumps:
            load_callable(self.options.dumps, option_name="dumps")

    def preflight(self) -> None:
        self.staging().check()
        if self.options.format == "parquet" and not self.overwrite:
            self._adopt_existing_files()

    def _adopt_existing_files(self) -> None:
        """Continue a directory another writer (Quix's FileSink) filled with Parquet files:
        before our first file there, their column types become the directory's, so ours
        match them; and the ``_key`` column keeps one type (Quix's is text: OptionError
        unless quix_compat=true)."""
        types = ColumnTypes(self.target, f"{STATE_PREFIX}/columns")
        if types.is_empty():
            files = [
                key
                for key in self.target.list()
                if key.endswith(".parquet")
                and not OUR_FILE_NAME.search(key)
                and not any(part.startswith(("_", ".")) for part in key.split("/"))
            ]
            schemas = [self._parquet_schema(key) for key in files]
            key_types = [s.field("_key").type for s in schemas if "_key" in s.names]
            if key_types:
                types.fixed("_key", key_types[0])
            types.adopt(schemas, exclude=QUIX_COLUMNS)
        ours = self._key_type
        if ours is None or pa.types.is_null(ours):
            return
        theirs = types.fixed("_key", ours)
        if theirs != ours:
            hint = (
                "set quix_compat=true (the key as text, as Quix writes it)"
                if pa.types.is_string(theirs) and pa.types.is_binary(ours)
                else "set quix_compat=false"
                if pa.types.is_binary(theirs)
                and pa.types.is_string(ours)
                and self.options.quix_compat
                else "write the key with the type of the directory's files, or use another path"
            )
            raise OptionError(
                f"the Parquet files in {self.options.path} have _key as {theirs}, this write "
                f"would make it {ours}: readers of the directory need one type; {hint}",
                option="quix_compat",
                value=str(self.options.quix_compat).lower(),
            )

    def _parquet_schema(self, key: str) -> pa.Schema:
        """The schema of a Parquet file of the directory: its footer on a local disk; the
        whole file from an object store (read once, at our first write)."""
        if isinstance(self.target, LocalDestination):
            return pq.read_schema(self.target.path(key))
        return pq.read_schema(pa.BufferReader(self.target.read_bytes(key)))

    # ------------------------------------------------------------------ shared

    def staging(self) -> StagingArea:
        return StagingArea(
            self.target,
            STATE_PREFIX,
            keep_batches=self.options.ledger_keep_batches,
            staging_max_age_hours=self.options.staging_max_age_hours,
        )

    def file_format(self) -> Format:
        opts = self.options
        if opts.format == "parquet":
            return ParquetFormat(compression=opts.compression, quix_compat=opts.quix_compat)
        if opts.format == "csv":
            return CSVFormat(dialect=opts.dialect, quix_compat=opts.quix_compat, sink_name="file")
        dumps = load_callable(opts.dumps, option_name="dumps") if opts.dumps else None
        return JSONFormat(compress=opts.compress, dumps=dumps, quix_compat=opts.quix_compat)

    def _appender(self, sink_id: str) -> AppendPublisher:
        extension = self.file_format().file_extension
        return AppendPublisher(
            self.staging(),
            f"{sink_id}{extension}",
            f"{STATE_PREFIX}/append/{sink_id}.jsonl",
            self.options.takeover_query_id,
        )

    # ------------------------------------------------------------------ executor

    def setup(self, task: Task) -> None:
        target = self.target
        if isinstance(target, LocalDestination) and not os.path.isdir(target.root):
            raise DestinationNotFoundError(
                f"{target.root} does not exist on this executor ({os.uname().nodename}), "
                "although the driver created it: on a cluster, 'path' must be a directory "
                "that every executor sees at the same path (a shared file system)",
                location=target.root,
            )

    def check_fence(self, task: Task) -> None:
        ctx = task.context
        if self.options.append:
            ledger = self._appender(ctx.sink_id).fenced_ledger()
        else:
            ledger = self.staging().ledger(self.options.takeover_query_id)
        ledger.check(ctx.sink_id, ctx.query_id)

    def types_json_values(self) -> bool:
        """Parquet files hold typed columns; JSON Lines and CSV hold each value's text."""
        return self.options.format == "parquet"

    def write(self, batch: SinkBatch) -> list[StagedFile]:
        """Stage the batch as one file, or several when max_rows_per_file/max_file_bytes
        cap the size (files roll over at those limits).

        Rows the format cannot hold are refused (``on_error``) once the other rows are
        staged, so a failed or retried write refuses nothing twice: with Parquet and JSON
        values, a value whose type changed against the directory's; with ``quix_compat``
        (json, parquet), a binary key that is not UTF-8 text."""
        refused = self._refusals(batch)
        rows = self._without(batch, refused) if refused else batch
        types = self._typed_columns(batch)
        if types is not None:
            rows = self._without_unheld_columns(rows)
        pieces = self._pieces(rows) if rows.num_rows else []
        staged = [self._stage_file(piece, types) for piece in pieces]
        for row, error in refused:
            batch.refuse(row, error)
        return staged

    def _typed_columns(self, batch: SinkBatch) -> ColumnTypes | None:
        """The directory's column types, where files keep one type per column."""
        if self.options.format != "parquet" or not batch.records.value_json:
            return None
        return ColumnTypes(self.target, f"{STATE_PREFIX}/columns")

    def _refusals(self, batch: SinkBatch) -> list[tuple[int, RecordError]]:
        """The rows the files cannot hold, each with its error, in row order; with
        on_error=fail the first one raises."""
        refused: dict[int, RecordError] = {}
        if self.options.quix_compat and self.options.format != "csv":
            for row in non_utf8_rows(batch.keys()):
                refused[row] = RecordError(
                    "the key holds bytes that are not UTF-8 text; quix_compat writes the key "
                    "as text, as Quix's FileSink does (it fails the whole batch on such a "
                    "key): fix the producer, decode or encode the key (e.g. hex) in Spark, "
                    "or set quix_compat=false (keys kept as bytes in Parquet, decoded with "
                    "replacement characters in JSON)",
                    column=batch.records.key,
                )
        types = self._typed_columns(batch)
        if types is not None:
            values = batch.values()
            for row, error in types.refusals(values, self.options.path, exclude=QUIX_COLUMNS):
                refused.setdefault(row, error)
            for name in QUIX_COLUMNS:
                if name not in values.column_names:
                    continue
                clash = RecordError(
                    f"the JSON value has a field {name!r}, which is a column of the sink's "
                    "Parquet files; rename the field (or use format=json)",
                    column=name,
                )
                for row in rows_holding(values.column(name), name, name).to_pylist():
                    refused.setdefault(row, clash)
        ordered = sorted(refused.items())
        if ordered and self.options.on_error == "fail":
            batch.refuse(*ordered[0])  # raises, naming the row
        return ordered

    @staticmethod
    def _without(batch: SinkBatch, refused: list[tuple[int, RecordError]]) -> SinkBatch:
        # the remaining rows are parsed again: their columns take their own types
        return dataclasses.replace(batch.without(row for row, _ in refused), _values=None)

    @staticmethod
    def _without_unheld_columns(batch: SinkBatch) -> SinkBatch:
        """A field named like a column the sink adds but null in every row (a slice of a
        batch) is left out."""
        values = batch.values()
        unheld = [n for n in QUIX_COLUMNS if n in values.column_names]
        if unheld:
            return dataclasses.replace(batch, _values=values.drop_columns(unheld))
        return batch

    def _pieces(self, batch: SinkBatch) -> list[SinkBatch]:
        pieces = [batch]
        if self.options.max_file_bytes:
            pieces = [
                p for b in pieces for p in b.iter_chunks_by_bytes(self.options.max_file_bytes)
            ]
        if self.options.max_rows_per_file:
            pieces = [p for b in pieces for p in b.iter_chunks(self.options.max_rows_per_file)]
        return pieces

    def _stage_file(self, batch: SinkBatch, types: ColumnTypes | None) -> StagedFile:
        fmt = self.file_format()
        if isinstance(fmt, ParquetFormat) and types is not None:
            # JSON values are typed per batch: keep one type per column across the files
            where = self.options.path
            fmt = dataclasses.replace(fmt, conform=lambda table: types.conform(table, where))
        ctx = batch.context
        piece = batch.counters.get("files", 0)
        batch.count("files")
        name = (
            f"{ctx.name_prefix}-{ctx.batch_id:010d}-{ctx.partition_id:05d}-{piece:04d}"
            f"{fmt.file_extension}"
        )
        header = b"" if self.options.append else fmt.header()
        final_key = f"{ctx.sink_id}{fmt.file_extension}" if self.options.append else name

        def produce(out: BinaryIO) -> None:
            out.write(header)
            fmt.write_to(batch, out)

        try:
            return self.staging().stage(
                ctx, name, produce, final_key=final_key, rows=batch.num_rows
            )
        except RecordError as exc:
            # an encoder failed on one row (a custom dumps): on_error=fail names it (skip
            # and dead_letter find it by isolation: this write leaves nothing behind)
            if exc.row is not None and self.options.on_error == "fail":
                batch.refuse(exc.row, exc)
            raise

    # ------------------------------------------------------------------ driver

    def commit(self, context: CommitContext, receipts: list[Receipt[list[StagedFile]]]) -> None:
        files = [f for staged in staged_in_order(receipts) for f in staged]
        if self.options.append:
            if files:
                self._appender(context.sink_id).publish(
                    context.sink_id,
                    context.batch_id,
                    files,
                    header=self.file_format().header(),
                    query_id=context.query_id,
                    record=lambda: context.commit_record(receipts),
                )
            return
        FilePublisher(self.staging(), self.options.takeover_query_id).publish(
            context.sink_id,
            context.batch_id,
            files,
            query_id=context.query_id,
            replace_prefix="" if self.overwrite else None,
            name_prefix=name_prefix(context.sink_id, context.query_id),
            keep_ledger=context.ledgered,
            record=context.commit_record(receipts),
        )

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The records kept in the batches' markers (with ``append``: in the append
        ledger's ``done`` lines), oldest first; the newest ``ledger_keep_batches`` per
        sink id are kept."""
        records = self.staging().commit_records(sink_id)
        append = f"{STATE_PREFIX}/append"
        for key in self.target.list(append):
            name = key.rpartition("/")[2]
            if not name.endswith(".jsonl") or (sink_id is not None and name != f"{sink_id}.jsonl"):
                continue
            records += self._appender(name[: -len(".jsonl")]).commit_records(sink_id)
        return sorted(records, key=lambda r: (r.committed_at, r.sink_id, r.batch_id))

    def abort(self, context: CommitContext, receipts: list[Receipt[list[StagedFile]]]) -> None:
        files = [f for staged in staged_in_order(receipts) for f in staged]
        if self.options.append:
            self._appender(context.sink_id).abort(context.sink_id, context.batch_id, files)
        else:
            FilePublisher(self.staging()).abort(
                context.sink_id, context.batch_id, files, ledgered=context.ledgered
            )
