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

from .arrow import as_binary, floor_time, join_lines
from .errors import OptionError, RecordError

__all__ = [
    "AUTO",
    "KAFKA_COLUMNS",
    "NONE",
    "RecordSchema",
    "ValueFormat",
    "finite",
    "strict_json_texts",
]

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
            return pc.cast(floor_time(column, "ms"), pa.int64())
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


# ----------------------------------------------------------------------------- JSON values
#
# How JSON values are typed (docs/index.md, "The record model"): a batch's value columns
# are the union of the keys of all its rows, in order of first appearance, at every level
# of nesting. A row without a key has null there. A key's type is the one type of its
# non-null values: boolean, int64, float64, string, struct (an object: the union of its
# keys) or list (of the union of its elements' types). Integers and floats in one key
# widen to float64 (exact up to 2**53); NaN, Infinity and -Infinity (as Python's json
# module writes them) are float64 too. Strings stay strings: nothing is inferred from
# their content (pyarrow's reader would turn date-like strings into timestamps). Two
# other types in one key, or an integer outside 64 bits, are a RecordError.

#: integers from 2**63 up are read by pyarrow as float64 without a word: a float64 this
#: large sends the batch to the exact parser, which refuses such integers
_BIG = float(2**63)
#: a null element of a JSON array: pyarrow's reader (26.0) misplaces the values of an
#: array whose first elements are null (``[null, 1, null, 2]`` reads as ``[1, null, 2,
#: null]``), so such batches take the exact parser (found by tests/unit/test_properties.py)
_NULL_IN_ARRAY = r"[\[,]\s*null"


def parse_json_objects(column: pa.Array, name: str) -> pa.Table:
    """Parse a column of JSON objects (text or bytes) into a table; see the notes above.

    A null row (a Kafka tombstone) or the JSON text ``null`` is a row without values.
    Fast path: pyarrow's JSON reader over the joined lines, which unifies keys and
    types over the whole input; when it inferred a timestamp anywhere, the input is read
    again with that schema, timestamps replaced by strings. Rows it cannot take (a row of
    several lines, anything but an object, huge numbers) and type conflicts go to the
    exact per-row parser, which names the offending row and key.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count == len(column):
        return _empty_rows(len(column))
    lines = as_binary(column)
    lines = pc.fill_null(pc.if_else(pc.equal(lines, b"null"), b"{}", lines), b"{}")
    if pc.all(pc.starts_with(lines, b"{")).as_py():
        data = join_lines(lines)
        # one line per row, or the reader would see several rows in one (and a bare
        # `null` line crashes it): count the line ends in one pass over the bytes
        text = data.to_pybytes()
        if text.count(b"\n") == len(lines) and b"\r" not in text:
            parsed = _read_json(data, None)
            if parsed is not None and parsed.num_rows == len(lines):
                if any(_has_timestamp(f.type) for f in parsed.schema):
                    schema = pa.schema(
                        [f.with_type(_strings_for_timestamps(f.type)) for f in parsed.schema]
                    )
                    parsed = _read_json(data, schema)
                if (
                    parsed is not None
                    and parsed.num_rows == len(lines)
                    and not any(_has_huge_float(c) for c in parsed.columns)
                    and not (
                        any(_has_list(f.type) for f in parsed.schema)
                        and pc.any(pc.match_substring_regex(lines, _NULL_IN_ARRAY)).as_py()
                    )
                ):
                    return parsed
    return _parse_rows(column.to_pylist(), name)


def _has_huge_float(array: pa.Array | pa.ChunkedArray) -> bool:
    t = array.type
    if pa.types.is_floating(t):
        return bool(pc.any(pc.greater_equal(pc.abs(array), _BIG)).as_py())
    if isinstance(array, pa.ChunkedArray):
        return any(_has_huge_float(chunk) for chunk in array.chunks)
    if pa.types.is_struct(t):
        return any(_has_huge_float(array.field(i)) for i in range(t.num_fields))
    if pa.types.is_list(t):
        return _has_huge_float(array.flatten())
    return False


def _read_json(data: pa.Buffer, schema: pa.Schema | None) -> pa.Table | None:
    """pyarrow's JSON reader over one object per line; None where it refuses the input.

    Never give it a line that is not an object: a bare ``null`` crashes the process.
    """
    parse = (
        pa_json.ParseOptions()
        if schema is None
        else pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
    )
    try:
        table = pa_json.read_json(pa.BufferReader(data), parse_options=parse)
    except pa.ArrowInvalid:
        return None
    return table.combine_chunks() if table.num_columns else _empty_rows(table.num_rows)


def _has_timestamp(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_timestamp(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t):
        return _has_timestamp(t.value_type)
    return False


def _has_list(t: pa.DataType) -> bool:
    if pa.types.is_list(t):
        return True
    return pa.types.is_struct(t) and any(_has_list(f.type) for f in t)


def _strings_for_timestamps(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_strings_for_timestamps(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_strings_for_timestamps(t.value_type)))
    return t


_INT64 = (-(2**63), 2**63 - 1)


class _Node:
    """The type of one key (or list element) so far, and the row that first gave it."""

    __slots__ = ("children", "item", "kind", "row")

    def __init__(self) -> None:
        self.kind = "null"
        self.row = -1
        self.children: dict[str, _Node] = {}
        self.item: _Node | None = None

    def add(self, value: Any, row: int, path: str, column: str) -> None:
        if value is None:
            return
        kind = _kind(value)
        if kind == "integer" and not _INT64[0] <= value <= _INT64[1]:
            raise RecordError(
                f"row {row}: column {column!r}, key {path!r} holds the integer {value}, which "
                "does not fit in 64 bits; send it as a string (or set value_format=columns)",
                column=column,
                row=row,
            )
        if self.kind == "null":
            self.kind, self.row = kind, row
        elif {self.kind, kind} == {"integer", "float"}:
            self.kind = "float"  # documented widening: int and float in one key -> float64
        elif self.kind != kind:
            raise RecordError(
                f"row {row}: column {column!r}, key {path!r} holds {_article(kind)}, but row "
                f"{self.row} has {_article(self.kind)} there; one key must keep one type within "
                "a batch: make the producer consistent, or set value_format=columns to write "
                "the JSON text unparsed",
                column=column,
                row=row,
            )
        if kind == "object":
            for key, item in value.items():
                child = self.children.get(key)
                if child is None:
                    child = self.children[key] = _Node()
                child.add(item, row, f"{path}.{key}", column)
        elif kind == "array":
            if self.item is None:
                self.item = _Node()
            for item in value:
                self.item.add(item, row, f"{path}[]", column)

    def arrow_type(self) -> pa.DataType:
        if self.kind == "object":
            return pa.struct([(k, v.arrow_type()) for k, v in self.children.items()])
        if self.kind == "array":
            return pa.list_(self.item.arrow_type() if self.item else pa.null())
        return _ARROW[self.kind]


_ARROW = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "integer": pa.int64(),
    "float": pa.float64(),
    "string": pa.string(),
}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array"


def _article(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _finite_float(text: str) -> float:
    value = float(text)
    if value - value != 0:
        raise ValueError(f"the number {text} does not fit in a double")
    return value


def _load_object(raw: Any, index: int, name: str) -> dict[str, Any]:
    """Row ``index``'s JSON object (``{}`` for a tombstone or ``null``), or a RecordError
    naming the row: text that is not JSON, a number no double holds, anything but an
    object."""
    if raw is None:
        return {}
    try:
        value = json.loads(raw, parse_float=_finite_float)
    except ValueError as exc:
        raise RecordError(
            f"row {index}: column {name!r} is not valid JSON ({exc}); "
            "set value_format=columns to write it unparsed",
            column=name,
            row=index,
        ) from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecordError(
            f"row {index}: column {name!r} holds a JSON {type(value).__name__}, expected "
            "an object; set value_format=columns to write it unparsed",
            column=name,
            row=index,
        )
    return value


def json_object_errors(column: pa.Array, name: str) -> dict[int, RecordError]:
    """The rows of a JSON value column that are not a JSON object (or null), with the
    error naming each: the check of a batch whose values are written as their text, where
    a key holding an integer in one message and a string in another is no error."""
    errors: dict[int, RecordError] = {}
    for index, raw in enumerate(column.to_pylist()):
        try:
            _load_object(raw, index, name)
        except RecordError as exc:
            errors[index] = exc
    return errors


def _parse_rows(raw_rows: list[Any], name: str) -> pa.Table:
    """The exact parser: ``json.loads`` per row, the union of keys and types, one table."""
    rows: list[dict[str, Any]] = []
    root = _Node()
    root.kind = "object"
    for index, raw in enumerate(raw_rows):
        value = _load_object(raw, index, name)
        for key, item in value.items():
            child = root.children.get(key)
            if child is None:
                child = root.children[key] = _Node()
            child.add(item, index, key, name)
        rows.append(value)
    if not root.children:
        return _empty_rows(len(rows))
    schema = pa.schema([(key, node.arrow_type()) for key, node in root.children.items()])
    return pa.Table.from_pylist(rows, schema=schema)


# ----------------------------------------------------------------------------- JSON text out

#: a NaN or an infinity where a value starts (a false alarm inside a string is checked)
_CONSTANT = r"[:\[,]\s*-?(?:NaN|Infinity)"


def strict_json_texts(texts: pa.Array) -> pa.Array:
    """``texts`` (binary JSON values that parsed) as strict JSON: in a row holding ``NaN``,
    ``Infinity`` or ``-Infinity`` (Python's json module writes them, the JSON standard has
    no such tokens) each of them becomes ``null``, as the encoder writes a non-finite
    float; every other byte is kept (numbers keep their digits, repeated keys stay)."""
    marked = pc.fill_null(pc.match_substring_regex(texts, _CONSTANT), False)
    if not pc.any(marked).as_py():
        return texts
    used: list[str] = []

    def constant(name: str) -> float:
        used.append(name)
        return float(name)

    fixed: list[bytes] = []
    for row in pc.indices_nonzero(marked).to_pylist():
        raw = texts[row].as_py()
        used.clear()
        json.loads(raw, parse_constant=constant)
        fixed.append(_nulled_constants(raw) if used else raw)
    return pc.replace_with_mask(texts, marked, pa.array(fixed, texts.type))


_CONSTANTS = (b"-Infinity", b"Infinity", b"NaN")


def _nulled_constants(raw: bytes) -> bytes:
    """``raw`` (JSON text) with each ``NaN``, ``Infinity`` and ``-Infinity`` outside a
    string replaced by ``null``, every other byte as it was."""
    out = bytearray()
    i, size, in_string = 0, len(raw), False
    while i < size:
        byte = raw[i]
        if in_string:
            if byte == 0x5C:  # a backslash escapes the next byte
                out += raw[i : i + 2]
                i += 2
                continue
            in_string = byte != 0x22
        elif byte == 0x22:
            in_string = True
        else:
            token = next((t for t in _CONSTANTS if raw.startswith(t, i)), None)
            if token is not None:
                out += b"null"
                i += len(token)
                continue
        out.append(byte)
        i += 1
    return bytes(out)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, infinity) replaced by None."""
    if isinstance(value, float):
        return value if value - value == 0 else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
