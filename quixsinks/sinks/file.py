"""``file``: JSON Lines, Parquet or CSV files in a directory, exactly once (Quix FileSink).

Layout under ``path``::

    <sink id>-<batch id>-<partition>-<piece>.jsonl   one file per task piece per micro-batch
    <sink id>.jsonl                                  with append=true: one growing file
    _quixsinks/                                      staging area and ledger (hidden from
                                                     Spark and pandas readers by the "_")

With JSON values (a Kafka ``value``), Parquet files of one directory keep one type per
column: the first file to write a column fixes its type, later files are widened to it
(nulls, int64 into float64) or fail with a RecordError (see quixsinks.core.column_types).

The sink id is the streaming query's id (the same after a restart from the checkpoint)
or the ``sink_id`` option; a batch write uses a fresh ``write-<uuid>``. File names are
fixed by the micro-batch, so a replayed or retried micro-batch never leaves a duplicate
or an orphan file (see quixsinks.core.publish for the protocol).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import BinaryIO, ClassVar, Literal

import pyarrow as pa

from quixsinks.core.batch import SinkBatch
from quixsinks.core.column_types import ColumnTypes
from quixsinks.core.destinations import LocalDestination
from quixsinks.core.errors import InvalidFormatError
from quixsinks.core.formats import (
    CSV_DIALECTS,
    CSVFormat,
    Format,
    JSONFormat,
    ParquetCompression,
    ParquetFormat,
)
from quixsinks.core.options import load_callable, option
from quixsinks.core.publish import AppendPublisher, FilePublisher, StagedFile, StagingArea
from quixsinks.core.sink import CommitContext, CommonOptions, Receipt, Sink, staged_in_order
from quixsinks.spark.datasource import QuixDataSource

__all__ = ["FileDataSource", "FileOptions", "FileSink"]

STATE_PREFIX = "_quixsinks"


@dataclass(frozen=True, kw_only=True)
class FileOptions(CommonOptions):
    sink_name: ClassVar[str] = "file"

    path: str = option(doc="Output directory (created if missing; its parent must exist)")
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
        False, doc="Append every micro-batch to one file per sink id (json and csv only)"
    )

    def validate(self) -> None:
        super().validate()
        if self.append and self.format == "parquet":
            raise InvalidFormatError(
                "format 'parquet' cannot be appended to; set append=false (one file per "
                "micro-batch) or use format 'json' or 'csv'",
                option="append",
                value="true",
                allowed=("json", "csv"),
            )
        if self.dumps is not None and self.format != "json":
            raise InvalidFormatError(
                f"option 'dumps' applies to format 'json' only, not {self.format!r}",
                option="dumps",
                value=self.dumps,
            )


class FileSink(Sink[FileOptions, StagedFile]):
    """Writes micro-batches as files; exactly-once. See docs/sinks/file.md."""

    name: ClassVar[str] = "file"
    options_class = FileOptions
    guarantee = "exactly-once"
    supports_overwrite = True

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
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

    # ------------------------------------------------------------------ shared

    def destination(self) -> LocalDestination:
        return LocalDestination(self.options.path)

    def staging(self) -> StagingArea:
        return StagingArea(self.destination(), STATE_PREFIX)

    def file_format(self) -> Format:
        opts = self.options
        if opts.format == "parquet":
            return ParquetFormat(compression=opts.compression)
        if opts.format == "csv":
            return CSVFormat(dialect=opts.dialect)
        dumps = load_callable(opts.dumps, option_name="dumps") if opts.dumps else None
        return JSONFormat(compress=opts.compress, dumps=dumps)

    def _appender(self, sink_id: str) -> AppendPublisher:
        extension = self.file_format().file_extension
        return AppendPublisher(
            self.staging(), f"{sink_id}{extension}", f"{STATE_PREFIX}/append/{sink_id}.jsonl"
        )

    # ------------------------------------------------------------------ executor

    def write(self, batch: SinkBatch) -> StagedFile:
        fmt = self.file_format()
        if isinstance(fmt, ParquetFormat) and batch.records.value_json:
            # JSON values are typed per batch: keep one type per column across the files
            types = ColumnTypes(self.destination(), f"{STATE_PREFIX}/columns")
            where = self.options.path
            fmt = dataclasses.replace(fmt, conform=lambda table: types.conform(table, where))
        ctx = batch.context
        piece = batch.counters.get("files", 0)
        batch.count("files")
        name = (
            f"{ctx.sink_id}-{ctx.batch_id:010d}-{ctx.partition_id:05d}-{piece:04d}"
            f"{fmt.file_extension}"
        )
        header = b"" if self.options.append else fmt.header()
        final_key = f"{ctx.sink_id}{fmt.file_extension}" if self.options.append else name

        def produce(out: BinaryIO) -> None:
            out.write(header)
            fmt.write_to(batch, out)

        return self.staging().stage(ctx, name, produce, final_key=final_key, rows=batch.num_rows)

    # ------------------------------------------------------------------ driver

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedFile]]) -> None:
        files = staged_in_order(receipts)
        if self.options.append:
            if files:
                self._appender(context.sink_id).publish(
                    context.sink_id,
                    context.batch_id,
                    files,
                    header=self.file_format().header(),
                )
            return
        FilePublisher(self.staging()).publish(
            context.sink_id,
            context.batch_id,
            files,
            replace_prefix="" if self.overwrite else None,
            keep_ledger=context.streaming,
        )

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedFile]]) -> None:
        files = staged_in_order(receipts)
        if self.options.append:
            self._appender(context.sink_id).abort(context.sink_id, context.batch_id, files)
        else:
            FilePublisher(self.staging()).abort(context.sink_id, context.batch_id, files)


class FileDataSource(QuixDataSource):
    """``df.write.format("file")`` / ``df.writeStream.format("file")``.

    Options (snake_case or camelCase): ``path`` (required), ``format`` json|parquet|csv,
    ``compression``, ``compress``, ``dumps``, ``dialect``, ``append`` and the common
    options; see docs/sinks/file.md. Save modes append and overwrite; streaming output
    modes append and complete. Guarantee: exactly-once.
    """

    sink_class = FileSink
