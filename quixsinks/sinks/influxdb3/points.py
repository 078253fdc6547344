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

from quixsinks.core.arrow import join_lines
from quixsinks.core.batch import SinkBatch
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.options import option
from quixsinks.core.sink import CommonOptions, Sink

from .wire import TIME_KEY, LineProtocol, Precision, check_names, field_kind, timestamps

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
        lines, skipped = protocol.lines(columns, times, batch.num_rows)
        if skipped:
            batch.count("skipped_no_fields", skipped)
        task = batch.task
        for start in range(0, len(lines), self.options.batch_size):
            chunk = lines.slice(start, self.options.batch_size)
            request = functools.partial(self._send, join_lines(chunk, b"").to_pybytes())
            what = f"{self.name} write of {len(chunk)} lines"
            # one retry layer: per request, under the task's policy (the glue adds none)
            sent = task.retry(request, what=what) if task is not None else request()
            if not sent:
                batch.count("skipped_retention", len(chunk))
        batch.count("points", len(lines))

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
        if TIME_KEY in fields:
            raise RecordError(
                f"{self.name}: the JSON values of this batch have a key 'time', which cannot be "
                "a field (InfluxDB's time column; InfluxDB 1.x drops such a field silently): "
                "rename the key, or choose the fields with fields_keys",
                column=TIME_KEY,
            )
        return dataclasses.replace(protocol, fields=fields)
