"""``csvfile``: every record appended to one CSV file, exactly once (Quix CSVSink).

The file has Quix CSVSink's columns ``key, value, timestamp, topic, partition, offset``
(value as JSON by default) and its header once, when the file is new (or empty): a file
Quix's CSVSink started is continued, its bytes kept. ``quix_compat`` writes Quix's
bytes (its ``str`` keys, ``json.dumps`` values, Python's csv quoting). Tasks stage
their rows in ``.<file name>.quixsinks/`` beside the file; the driver appends them in
``commit`` and records each micro-batch with the file's length in a ledger there. A
batch already in the ledger is skipped; a half-finished append is truncated back
before anything else is appended. One file takes one writer at a time; concurrent
commits are serialised by a lock on the ledger.

``csvfile`` because Spark owns the name ``csv``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pyarrow as pa

from quixsinks.core.batch import SinkBatch
from quixsinks.core.commits import CommitRecord
from quixsinks.core.destinations import LocalDestination, absolute_local_path
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    RecordError,
    format_allowed,
)
from quixsinks.core.formats import CSVFormat
from quixsinks.core.options import load_callable, option
from quixsinks.core.publish import AppendPublisher, StagedFile, StagingArea
from quixsinks.core.sink import CommitContext, LedgerOptions, Receipt, Sink, Task, staged_in_order

__all__ = ["CSVFileOptions", "CSVFileSink"]

KEY_SERIALIZERS = ("str", "json")
VALUE_SERIALIZERS = ("json",)


def _key_as_json(key: Any) -> str:
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    return json.dumps(key, ensure_ascii=False, default=str)


@dataclass(frozen=True, kw_only=True)
class CSVFileOptions(LedgerOptions):
    sink_name: ClassVar[str] = "csvfile"

    path: str = option(doc="The CSV file (its directory must exist)")
    dialect: Literal["excel", "excel-tab", "unix"] = option("excel", doc="CSV dialect")
    key_serializer: str = option(
        "str", doc="str (UTF-8 text of the key), json, or an import path 'module:function'"
    )
    value_serializer: str = option(
        "json",
        doc="json (the value's JSON text: a Kafka JSON value as the producer wrote it) or "
        "an import path 'module:function', called with each message's own object",
    )
    quix_compat: bool = option(
        False,
        doc="Quix CSVSink's bytes: with the built-in serializers, keys as Python's str() "
        "(b'...', None) and values as json.dumps of each message; rows quoted as Python's "
        "csv module does; see 'Migrating from Quix Streams'",
    )

    def validate(self) -> None:
        super().validate()
        for name, builtins in (
            ("key_serializer", KEY_SERIALIZERS),
            ("value_serializer", VALUE_SERIALIZERS),
        ):
            value = getattr(self, name)
            if value not in builtins and ":" not in value:
                raise OptionError(
                    f"option {name!r} has value {value!r}, expected {format_allowed(builtins)} "
                    "or an import path 'module:function'",
                    option=name,
                    value=value,
                    allowed=builtins,
                )

    def key_function(self) -> Callable[[Any], str] | None:
        if self.key_serializer == "str":
            return None
        if self.key_serializer == "json":
            return _key_as_json
        return load_callable(self.key_serializer, option_name="key_serializer")

    def value_function(self) -> Callable[[Any], str] | None:
        if self.value_serializer in VALUE_SERIALIZERS:
            return None
        return load_callable(self.value_serializer, option_name="value_serializer")


class CSVFileSink(Sink[CSVFileOptions, StagedFile]):
    """Appends records to one CSV file; exactly-once. See docs/sinks/csvfile.md."""

    name: ClassVar[str] = "csvfile"
    options_class = CSVFileOptions
    guarantee = "exactly-once"

    def __init__(self, options: CSVFileOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        if "://" in options.path and not options.path.startswith("file://"):
            raise OptionError(
                f"csvfile appends to one local (or mounted) file, not {options.path!r}: an "
                "object store cannot append. To write CSV to object storage, use the 'file' "
                "sink with format=csv (one file per micro-batch, exactly-once)",
                option="path",
                value=options.path,
            )
        # resolved once, on the driver: executors get the absolute path
        self.file_path = absolute_local_path(options.path.removeprefix("file://"))

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        self.options.key_function()
        self.options.value_function()

    def preflight(self) -> None:
        path = self.file_path
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            raise DestinationNotFoundError(
                f"{path}: the directory {folder} does not exist; create it first", location=path
            )
        if os.path.isdir(path):
            raise DestinationError(
                f"{path} is a directory; 'path' names the CSV file", location=path
            )
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise DestinationAccessDeniedError(
                f"{path}: this user may not write the file", location=path
            )
        self._check_header()
        self._paths()[0].check()

    def _check_header(self) -> None:
        """An existing file (one Quix's CSVSink or an earlier write started) must begin with
        this dialect's header: appending rows of another layout would make it unreadable."""
        header = self.file_format().header()
        try:
            with open(self.file_path, "rb") as f:
                start = f.read(len(header))
        except FileNotFoundError:
            return
        # a shorter start is a header cut short by a crash, which the ledger undoes
        if start != header[: len(start)]:
            raise DestinationError(
                f"{self.file_path} does not start with the header {header!r} of dialect "
                f"{self.options.dialect!r} (it starts {start!r}): rows appended to it would "
                "not match its columns; use the dialect it was written with, or another path",
                location=self.file_path,
            )

    # ------------------------------------------------------------------ shared

    def _paths(self) -> tuple[StagingArea, str]:
        folder, file_name = os.path.split(self.file_path)
        staging = StagingArea(
            LocalDestination(folder),
            f".{file_name}.quixsinks",
            keep_batches=self.options.ledger_keep_batches,
            staging_max_age_hours=self.options.staging_max_age_hours,
        )
        return staging, file_name

    def file_format(self) -> CSVFormat:
        return CSVFormat(
            dialect=self.options.dialect,
            key_serializer=self.options.key_function(),
            value_serializer=self.options.value_function(),
            quix_compat=self.options.quix_compat,
        )

    def _appender(self) -> AppendPublisher:
        staging, file_name = self._paths()
        return AppendPublisher(
            staging,
            file_name,
            f"{staging.state_prefix}/ledger.jsonl",
            self.options.takeover_query_id,
        )

    # ------------------------------------------------------------------ executor

    def check_fence(self, task: Task) -> None:
        self._appender().fenced_ledger().check(task.context.sink_id, task.context.query_id)

    def types_json_values(self) -> bool:
        """The value column holds each value's JSON text (or a serializer's)."""
        return False

    def write(self, batch: SinkBatch) -> StagedFile:
        staging, file_name = self._paths()
        piece = batch.counters.get("pieces", 0)
        batch.count("pieces")
        try:
            return staging.stage(
                batch.context,
                f"{batch.partition_id:05d}-{piece:04d}.csv",
                functools.partial(self.file_format().write_to, batch),
                final_key=file_name,
                rows=batch.num_rows,
            )
        except RecordError as exc:
            # a serializer failed on one row: on_error=fail names it (skip and
            # dead_letter find it by isolation: this write leaves nothing behind)
            if exc.row is not None and self.options.on_error == "fail":
                batch.refuse(exc.row, exc)
            raise

    # ------------------------------------------------------------------ driver

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedFile]]) -> None:
        files = staged_in_order(receipts)
        if files:
            self._appender().publish(
                context.sink_id,
                context.batch_id,
                files,
                header=self.file_format().header(),
                query_id=context.query_id,
                record=lambda: context.commit_record(receipts),
            )

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The records kept in the ledger's ``done`` lines, oldest first (the newest
        ``ledger_keep_batches`` per sink id are kept)."""
        return self._appender().commit_records(sink_id)

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedFile]]) -> None:
        self._appender().abort(context.sink_id, context.batch_id, staged_in_order(receipts))
