"""Rows to points: the record model both InfluxDB sinks share (``influxdb3``, ``influxdb1``).

:class:`PointOptions` declares the options that say how a row becomes a point
(measurement, tags, fields, time, precision, and the request size and timeout);
:class:`PointsSink` resolves them against the DataFrame on the driver (``prepare``) and,
on the executors, turns each SinkBatch into line protocol with the one encoder
(:mod:`.wire`) and hands request bodies of ``batch_size`` lines to the sink's
``_send``, each under the task's RetryPolicy. A sink adds its server's options, its
start-up check, its client and ``_send``: nothing about rows.
"""

from __future__ import annotations

import dataclasses
import functools
from abc import abstractmethod
from dataclasses import dataclass
from typing import Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_true, join_lines
from quixsinks.core.batch import SinkBatch
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.options import option
from quixsinks.core.sink import CommonOptions, Sink

from .wire import (
    TIME_KEY,
    LineProtocol,
    LinesRefused,
    Precision,
    check_names,
    escape_name,
    field_kind,
    timestamps,
)

__all__ = ["PointOptions", "PointsSink"]


@dataclass(frozen=True, kw_only=True)
class PointOptions(CommonOptions):
    """How rows become points (Quix's names), shared by the InfluxDB sinks."""

    measurement: str | None = option(None, doc="Measurement name (or measurement_column)")
    measurement_column: str | None = option(
        None, doc="Column whose value is each row's measurement"
    )
    fields_keys: tuple[str, ...] = option(
        (), doc="Comma-separated field columns; empty: every value column not a tag or time"
    )
    tags_keys: tuple[str, ...] = option(
        (), doc="Comma-separated tag columns (sorted; values written as strings)"
    )
    time_key: str | None = option(
        None,
        aliases=("time_setter",),
        doc="Column with the point time (timestamp, or integer epoch in time_precision); "
        "default: the record timestamp",
    )
    time_precision: Precision = option("ms", doc="Precision of the written times")
    include_metadata_tags: bool = option(False, doc="Add the tags __key, __topic and __partition")
    allow_missing_fields: bool = option(
        False, doc="Skip fields_keys the DataFrame lacks instead of failing"
    )
    convert_ints_to_floats: bool = option(
        False, doc="Write integer fields as floats (avoids int/float type conflicts)"
    )
    invalid_floats: Literal["error", "drop"] = option(
        "error", doc="NaN or infinity in a field: fail the batch, or leave the field out"
    )
    decimal_fields: Literal["float", "string"] = option(
        "float",
        doc="Decimal fields: float (rounded to the nearest double) or string (exact digits)",
    )
    batch_size: int = option(
        1000, minimum=1, doc="Lines per write request (the vendor advises about 10,000)"
    )
    request_timeout_ms: int = option(10_000, minimum=1, doc="HTTP timeout of one request")

    def validate(self) -> None:
        super().validate()
        if (self.measurement is None) == (self.measurement_column is None):
            raise OptionError(
                f"{self.sink_name}: give exactly one of 'measurement' and 'measurement_column'",
                option="measurement",
            )
        if self.measurement is not None and not self.measurement.strip():
            raise OptionError(
                f"{self.sink_name}: 'measurement' is empty",
                option="measurement",
                value=self.measurement,
            )
        check_names(self.tags_keys, self.fields_keys)


OptionsT = TypeVar("OptionsT", bound=PointOptions)


class PointsSink(Sink[OptionsT, None]):
    """Rows to line protocol to ``_send``; the base of both InfluxDB sinks.

    Effectively exactly-once: a point is identified by measurement, tag set and time, so
    a replayed micro-batch or a retried task overwrites the same points with the same
    values. Nothing to commit on the driver.
    """

    guarantee = "effectively exactly-once"
    retries_requests = True  # each request under the task's RetryPolicy, see write()

    def __init__(self, options: OptionsT, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.protocol: LineProtocol | None = None
        self.time_column: str | None = None
        self.metadata_tags: dict[str, str] = {}

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        records = self.records
        assert records is not None
        opts = self.options
        name = self.name
        names = set(schema.names)
        if opts.measurement_column is not None and opts.measurement_column not in names:
            raise OptionError(
                f"{name}: 'measurement_column' names {opts.measurement_column!r}, which the "
                f"DataFrame does not have; its columns are: {', '.join(schema.names)}",
                option="measurement_column",
                value=opts.measurement_column,
            )
        self.time_column = opts.time_key or records.timestamp
        if self.time_column is None:
            raise OptionError(
                f"{name}: no time column; set 'time_key' or 'timestamp_column' (the DataFrame "
                "has no timestamp column to take the record time from)",
                option="time_key",
            )
        if self.time_column not in names:
            raise OptionError(
                f"{name}: 'time_key' names {self.time_column!r}, which the DataFrame does "
                f"not have; its columns are: {', '.join(schema.names)}",
                option="time_key",
                value=self.time_column,
            )
        time_type = schema.field(self.time_column).type
        if not (pa.types.is_timestamp(time_type) or pa.types.is_integer(time_type)):
            raise OptionError(
                f"{name}: time column {self.time_column!r} has type {time_type}; it must be "
                f"a timestamp or an integer epoch time in {opts.time_precision}",
                option="time_key",
                value=self.time_column,
            )
        if records.value_json:
            tags = list(opts.tags_keys)  # JSON keys or DataFrame columns, resolved per batch
        else:
            tags = [t for t in opts.tags_keys if t in names]
            absent_tags = [t for t in opts.tags_keys if t not in names]
            if absent_tags:
                self.logger.warning("tag columns %s are not in the DataFrame: skipped", absent_tags)
            for tag in tags:
                if pa.types.is_nested(schema.field(tag).type):
                    raise OptionError(
                        f"{name}: tag column {tag!r} has type {schema.field(tag).type}, which "
                        "cannot be a tag; use a column of text or numbers",
                        option="tags_keys",
                        value=tag,
                    )
        self.metadata_tags = {}
        if opts.include_metadata_tags:
            for tag, column in (
                ("__key", records.key),
                ("__topic", records.topic),
                ("__partition", records.partition),
            ):
                if column is not None:
                    self.metadata_tags[tag] = column
        taken = {self.time_column, opts.measurement_column, *tags}
        fields: list[str] = []
        if records.value_json:
            fields = list(opts.fields_keys)  # known per batch when empty
        elif opts.fields_keys:
            for field_name in opts.fields_keys:
                if field_name in names:
                    fields.append(field_name)
                elif not opts.allow_missing_fields:
                    raise OptionError(
                        f"{name}: field {field_name!r} is not in the DataFrame (columns: "
                        f"{', '.join(schema.names)}); set allow_missing_fields=true to skip it",
                        option="fields_keys",
                        value=field_name,
                    )
        else:
            fields = [n for n in records.values if n not in taken]
        if not records.value_json:
            for field_name in fields:
                if field_kind(schema.field(field_name).type) == "unsupported":
                    raise OptionError(
                        f"{name}: column {field_name!r} has type "
                        f"{schema.field(field_name).type}, which cannot be a field; flatten "
                        "it, serialise it to a string, or leave it out with fields_keys",
                        option="fields_keys",
                        value=field_name,
                    )
            if not fields:
                raise OptionError(
                    f"{name}: no field column left once tags and time are taken; every point "
                    "needs at least one field",
                    option="fields_keys",
                )
        self.protocol = LineProtocol(
            measurement=opts.measurement,
            measurement_column=opts.measurement_column,
            tags=(*tags, *self.metadata_tags),
            fields=tuple(fields),
            precision=opts.time_precision,
            ints_to_floats=opts.convert_ints_to_floats,
            invalid_floats=opts.invalid_floats,
            decimals=opts.decimal_fields,
        )

    # ------------------------------------------------------------------ executor

    def write(self, batch: SinkBatch) -> None:
        """Encode the batch, refusing the rows the encoder cannot write (as ``on_error``
        says), and send the lines in requests of ``batch_size``; rows whose lines the
        server refuses by number are refused, the request's other lines sent again.

        Refusals are applied once the whole write has succeeded (at once under
        ``on_error=fail``): a RecordError raised for the whole batch (a refusal the server
        does not pin to a line) leaves nothing behind, and the glue splits the batch to
        find the row (re-sending points is harmless: they are upserts).
        """
        refused: list[tuple[SinkBatch, int, RecordError]] = []
        kept, lines = self._encode(batch, refused)
        points = 0
        for start in range(0, len(lines), self.options.batch_size):
            length = min(self.options.batch_size, len(lines) - start)
            points += self._request(kept, lines, list(range(start, start + length)), refused)
        for piece, row, error in refused:
            piece.refuse(row, error)
        batch.count("points", points)

    def _refuse(
        self,
        batch: SinkBatch,
        row: int,
        error: RecordError,
        refused: list[tuple[SinkBatch, int, RecordError]],
    ) -> None:
        if self.options.on_error == "fail":
            batch.refuse(row, error)  # raises, naming the row
        refused.append((batch, row, error))

    def _encode(
        self, batch: SinkBatch, refused: list[tuple[SinkBatch, int, RecordError]]
    ) -> tuple[SinkBatch, pa.Array]:
        """The rows the encoder can write (a SinkBatch) and their lines, one per row; the
        others go to ``refused``. A refusal the encoder cannot pin to a row is raised."""
        while batch.num_rows:
            try:
                lines, without_fields = self._lines(batch)
            except RecordError as exc:
                if exc.row is None or not 0 <= exc.row < batch.num_rows:
                    raise
                self._refuse(batch, exc.row, exc, refused)
                batch = batch.without([exc.row])
                continue
            if without_fields:
                # nothing to write (a Kafka tombstone, every field null): skipped and
                # counted, as before; not a refusal, or a tombstone would fail the stream
                batch.count("skipped_no_fields", len(without_fields))
                batch = batch.without(without_fields)
            return batch, lines
        return batch, pa.array([], pa.string())

    def _lines(self, batch: SinkBatch) -> tuple[pa.Array, list[int]]:
        """The batch's lines (rows without a field left out) and the rows without a field."""
        assert self.protocol is not None
        assert self.time_column is not None
        protocol = self.protocol
        values = batch.values()
        if self.records is not None and self.records.value_json:
            protocol = self._json_protocol(protocol, values, batch)
        columns: dict[str, pa.Array] = {}
        for name in (*protocol.tags, *protocol.fields, protocol.measurement_column):
            if name is None or name in columns:
                continue
            if name in self.metadata_tags:
                columns[name] = batch.column(self.metadata_tags[name])
            elif name in values.column_names:
                columns[name] = values.column(name).combine_chunks()
            elif name in batch.table.column_names:
                columns[name] = batch.column(name)
            else:  # a tag that no row of this batch has: left out of every line
                columns[name] = pa.nulls(batch.num_rows, pa.string())
        times = timestamps(
            batch.column(self.time_column), self.options.time_precision, name=self.time_column
        )
        return protocol.lines(columns, times, batch.num_rows)

    def _request(
        self,
        kept: SinkBatch,
        lines: pa.Array,
        rows: list[int],
        refused: list[tuple[SinkBatch, int, RecordError]],
    ) -> int:
        """Send the lines of ``rows`` (indices into ``kept`` and ``lines``) in one request,
        under the task's RetryPolicy; returns the points written. Lines the server refuses
        by number are refused and the others sent again (the server may have stored them
        already: a point is an upsert); a refusal it does not pin to lines is raised."""
        task = kept.task
        while rows:
            body = join_lines(lines.take(pa.array(rows, pa.int64())), b"").to_pybytes()
            request = functools.partial(self._send, body)
            what = f"{self.name} write of {len(rows)} lines"
            try:
                # one retry layer: per request, under the task's policy (the glue adds none)
                sent = task.retry(request, what=what) if task is not None else request()
            except LinesRefused as exc:
                named = {n: why for n, why in exc.lines.items() if 1 <= n <= len(rows)}
                if not named or len(named) != len(exc.lines) or _multiline(lines, rows):
                    # a string field holding a newline shifts the server's line numbers
                    # off the rows: the glue isolates the rows by halving instead
                    raise RecordError(exc.message) from exc
                for number, why in sorted(named.items()):
                    error = RecordError(
                        f"{self.name}: the server refused the row's point: {why}",
                        row=rows[number - 1],
                    )
                    self._refuse(kept, rows[number - 1], error, refused)
                rows = [row for number, row in enumerate(rows, 1) if number not in named]
                continue
            if not sent:
                kept.count("skipped_retention", len(rows))
                return 0
            return len(rows)
        return 0

    @abstractmethod
    def _send(self, body: bytes) -> bool:
        """Write one request body (line protocol); False when the server dropped its points
        for the retention period (counted, not an error). Raise quixsinks errors only:
        RetryableError (or SinkBackpressureError) for what a retry can fix."""

    def _json_protocol(
        self, protocol: LineProtocol, values: pa.Table, batch: SinkBatch
    ) -> LineProtocol:
        """The fields of a batch of JSON values: ``fields_keys``, or every key that is not
        a tag; a ``fields_keys`` entry that no row of the batch has is a RecordError unless
        allow_missing_fields."""
        present = set(values.column_names) | set(batch.table.column_names)
        if protocol.fields:
            missing = [f for f in protocol.fields if f not in present]
            if missing and not self.options.allow_missing_fields:
                raise RecordError(
                    f"{self.name}: fields_keys {', '.join(map(repr, missing))} in no row of "
                    f"this batch's JSON values (keys: {', '.join(values.column_names) or 'none'})"
                    "; set allow_missing_fields=true to write the points without them",
                    column=missing[0],
                )
            fields = tuple(f for f in protocol.fields if f in present)
        else:
            taken = {protocol.measurement_column, *protocol.tags}
            fields = tuple(n for n in values.column_names if n not in taken)
        written: list[str] = []
        for name in fields:
            if name not in values.column_names:
                written.append(name)
                continue
            why = None
            if name == TIME_KEY:
                why = (
                    "the JSON value has a key 'time', which cannot be a field (InfluxDB's "
                    "time column; InfluxDB 1.x drops such a field silently): rename the key, "
                    "or choose the fields with fields_keys"
                )
            else:
                try:
                    escape_name(name)
                except OptionError as exc:  # a key of the rows' JSON: the rows' content
                    why = exc.message
            if why is None:
                written.append(name)
                continue
            row = first_true(pc.is_valid(values.column(name)))
            if row is not None:  # refused for the rows that have the key; else left out
                raise RecordError(f"{self.name}: {why}", column=name, row=row)
        fields = tuple(written)
        return dataclasses.replace(protocol, fields=fields)


def _multiline(lines: pa.Array, rows: list[int]) -> bool:
    """Whether a line of ``rows`` holds a newline before its end (a string field's)."""
    taken = lines.take(pa.array(rows, pa.int64()))
    return bool((pc.max(pc.count_substring(taken, "\n")).as_py() or 0) > 1)
