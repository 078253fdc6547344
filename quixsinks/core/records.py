"""The record model: which columns of a DataFrame are a record's key, timestamp and value.

Quix Streams sinks see records made of a key, a value (a dict), a timestamp in
milliseconds, headers and the Kafka topic, partition and offset. A Spark DataFrame
has columns; :class:`RecordSchema` says which column plays which part:

* Spark's Kafka source schema (``key, value, topic, partition, offset, timestamp,
  timestampType[, headers]``) is recognised as is: ``key`` is the key, ``value`` is
  parsed as JSON into the value dict (``value_format=auto``), ``timestamp`` is the
  timestamp and the rest are metadata.
* Any other DataFrame: ``key_column`` (default: the column ``key`` if there is one),
  ``timestamp_column`` (default: the column ``timestamp`` if it is a timestamp or an
  integer), and every other column, or those named in ``value_columns``, is the value.

``none`` as key or timestamp column means "no key" / "no timestamp" (null).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from .arrow import as_binary, join_lines
from .errors import OptionError, RecordError

__all__ = ["AUTO", "KAFKA_COLUMNS", "NONE", "RecordSchema", "ValueFormat"]

AUTO = "auto"
NONE = "none"
ValueFormat = Literal["auto", "columns", "json"]

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
_KAFKA_METADATA = ("topic", "partition", "offset", "headers")


def _is_timestamp_like(t: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(t) or pa.types.is_integer(t))


@dataclass(frozen=True)
class RecordSchema:
    """The resolved roles of a DataFrame's columns. Small and picklable.

    Attributes:
        key: the key column, or None.
        timestamp: the timestamp column (timestamp type, or integer milliseconds), or None.
        values: the value columns, in DataFrame order.
        value_json: the single value column holds JSON text or bytes to parse into columns.
        topic, partition, offset, headers: Kafka metadata columns, when present.
    """

    key: str | None
    timestamp: str | None
    values: tuple[str, ...]
    value_json: bool = False
    topic: str | None = None
    partition: str | None = None
    offset: str | None = None
    headers: str | None = None

    @property
    def metadata_columns(self) -> tuple[str, ...]:
        names = (self.topic, self.partition, self.offset, self.headers)
        return tuple(n for n in names if n)

    @staticmethod
    def is_kafka(schema: pa.Schema) -> bool:
        return all(name in schema.names for name in KAFKA_COLUMNS[:6])

    @classmethod
    def resolve(
        cls,
        schema: pa.Schema,
        *,
        key_column: str = AUTO,
        timestamp_column: str = AUTO,
        value_columns: Sequence[str] = (),
        value_format: ValueFormat = "auto",
    ) -> RecordSchema:
        """Work out the roles of ``schema``'s columns, or raise :class:`OptionError`."""
        names = list(schema.names)
        kafka = cls.is_kafka(schema)

        def pick(option: str, given: str, default: str | None) -> str | None:
            if given.lower() == NONE:
                return None
            if given.lower() == AUTO:
                return default
            if given not in names:
                raise OptionError(
                    f"option {option!r} names column {given!r}, which the DataFrame does not "
                    f"have; its columns are: {', '.join(names)}",
                    option=option,
                    value=given,
                    allowed=names,
                )
            return given

        key = pick("key_column", key_column, "key" if "key" in names else None)
        ts_default = (
            "timestamp"
            if "timestamp" in names and _is_timestamp_like(schema.field("timestamp").type)
            else None
        )
        timestamp = pick("timestamp_column", timestamp_column, ts_default)
        if timestamp is not None and not _is_timestamp_like(schema.field(timestamp).type):
            raise OptionError(
                f"option 'timestamp_column': column {timestamp!r} has type "
                f"{schema.field(timestamp).type}, expected a timestamp or integer milliseconds",
                option="timestamp_column",
                value=timestamp,
            )

        metadata = {name: name for name in _KAFKA_METADATA if kafka and name in names}
        taken = {key, timestamp, *metadata.values()}
        if kafka:
            taken.add("timestampType")
        if value_columns:
            for name in value_columns:
                pick("value_columns", name, None)
            values = tuple(value_columns)
        else:
            values = tuple(n for n in names if n not in taken)
        if not values:
            raise OptionError(
                "the DataFrame has no value column left once the key, timestamp and metadata "
                f"columns are taken (columns: {', '.join(names)}); set 'value_columns'",
                option="value_columns",
            )

        if value_format == "json":
            value_json = True
        elif value_format == "columns":
            value_json = False
        else:
            value_json = kafka and values == ("value",)
        if value_json and (len(values) != 1 or not _is_text(schema.field(values[0]).type)):
            raise OptionError(
                "value_format 'json' needs exactly one string or binary value column, got "
                f"{', '.join(f'{n} ({schema.field(n).type})' for n in values)}",
                option="value_format",
                value=value_format,
            )
        return cls(
            key=key,
            timestamp=timestamp,
            values=values,
            value_json=value_json,
            topic=metadata.get("topic"),
            partition=metadata.get("partition"),
            offset=metadata.get("offset"),
            headers=metadata.get("headers"),
        )

    # ------------------------------------------------------------------ per-batch views

    def key_array(self, table: pa.Table) -> pa.Array:
        """The key column (or nulls), as stored."""
        if self.key is None:
            return pa.nulls(table.num_rows)
        return table.column(self.key).combine_chunks()

    def timestamp_ms(self, table: pa.Table) -> pa.Array:
        """The timestamp as int64 milliseconds since the epoch (nulls where absent)."""
        if self.timestamp is None:
            return pa.nulls(table.num_rows, pa.int64())
        column = table.column(self.timestamp).combine_chunks()
        if pa.types.is_timestamp(column.type):
            if column.type.unit in ("us", "ns"):  # floor, also before 1970
                column = pc.floor_temporal(column, unit="millisecond")
            millis = pc.cast(column, pa.timestamp("ms", column.type.tz), safe=False)
            return pc.cast(millis, pa.int64())
        return pc.cast(column, pa.int64())

    def value_table(self, table: pa.Table) -> pa.Table:
        """The value columns; a JSON value column is parsed into columns."""
        if not self.value_json:
            return table.select(list(self.values))
        return parse_json_objects(table.column(self.values[0]).combine_chunks(), self.values[0])


def _is_text(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _empty_rows(n: int) -> pa.Table:
    """A table of ``n`` rows and no columns (values of rows that carry none)."""
    return pa.table({"_": pa.nulls(n)}).drop_columns(["_"])


def _has_timestamp(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_timestamp(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_timestamp(t.value_type)
    return False


def parse_json_objects(column: pa.Array, name: str) -> pa.Table:
    """Parse a column of JSON objects (text or bytes) into a table.

    A null row (a Kafka tombstone) or the JSON text ``null`` is a row without values.
    Fast path: pyarrow's JSON reader over the joined lines, taken only when it cannot
    misalign rows (no empty or multi-line row) and inferred no timestamp (it would turn
    date-like strings into timestamps). Otherwise the exact per-row parser runs, which
    names the offending row.
    """
    if column.null_count == len(column):
        return _empty_rows(len(column))
    lines = pc.fill_null(as_binary(column), b"null")
    risky = pc.any(pc.match_substring_regex(lines, r"(^\s*$)|\n|(^\s*null\s*$)")).as_py()
    if not risky:
        try:
            parsed = pa_json.read_json(pa.BufferReader(join_lines(lines)))
            if parsed.num_rows == len(column) and not any(
                _has_timestamp(f.type) for f in parsed.schema
            ):
                return parsed
        except pa.ArrowInvalid:
            pass
    rows: list[dict[str, Any]] = []
    for index, raw in enumerate(column.to_pylist()):
        if raw is None:
            rows.append({})
            continue
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise RecordError(
                f"row {index}: column {name!r} is not valid JSON ({exc}); "
                "set value_format=columns to write it unparsed",
                column=name,
                row=index,
            ) from None
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise RecordError(
                f"row {index}: column {name!r} holds a JSON {type(value).__name__}, expected "
                "an object; set value_format=columns to write it unparsed",
                column=name,
                row=index,
            )
        rows.append(value)
    if not any(rows):
        return _empty_rows(len(rows))
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise RecordError(
            f"column {name!r}: the JSON values do not share one type per field ({exc}); "
            "make the producer consistent or set value_format=columns",
            column=name,
        ) from None
