"""BigQuery schemas from Spark's (Arrow) schemas, and Arrow arrays ready for AppendRows.

Type mapping (Spark -> Arrow -> BigQuery):

=====================================  ===================================================
Spark                                  BigQuery
=====================================  ===================================================
byte, short, int, long                 INT64 (Quix's sink made them FLOAT64)
float, double                          FLOAT64
decimal(p, s), s <= 9 and p - s <= 29  NUMERIC
other decimal(p, s)                    BIGNUMERIC
boolean                                BOOL
string                                 STRING
binary                                 BYTES
date                                   DATE
timestamp                              TIMESTAMP
timestamp_ntz                          DATETIME
array<T>                               T, mode REPEATED (null elements: RecordError)
struct<...>                            RECORD
map<K, V>                              RECORD REPEATED with fields ``key`` and ``value``
=====================================  ===================================================

A column of an existing table keeps its type when the value fits it (ints into FLOAT64 or
NUMERIC, NUMERIC into BIGNUMERIC, anything into JSON as JSON text, bytes into STRING as
their UTF-8 text, ...); a value that
does not fit (a date before 0001-01-01, a decimal with digits past NUMERIC's scale of 9,
a null in a REQUIRED column) is a :class:`RecordError` naming the column and the row.
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_null, first_true, floor_time, nearest_float
from quixsinks.core.errors import OptionError, RecordError

from .options import STAGING_SUFFIX

__all__ = [
    "LEDGER_TABLE",
    "STAGED_AT_COLUMN",
    "TOKEN_COLUMN",
    "BQField",
    "Column",
    "arrow_type",
    "bq_field",
    "column_plan",
    "conflict",
    "convert",
    "quote",
    "staging_table_name",
]

LEDGER_TABLE = "_quixsinks_ledger"
TOKEN_COLUMN = "_qs_token"
STAGED_AT_COLUMN = "_qs_staged_at"
METADATA_TIMESTAMP = "timestamp"
METADATA_KEY = "__key"

#: BigQuery's DATE / DATETIME / TIMESTAMP range: 0001-01-01 .. 9999-12-31 (days since 1970)
_MIN_DAY, _MAX_DAY = -719162, 2932896
#: 0001-01-01T00:00:00 and 10000-01-01T00:00:00 in seconds since 1970 (integer arithmetic:
#: a float loses the last microseconds of 9999-12-31)
_MIN_SECOND, _END_SECOND = _MIN_DAY * 86_400, (_MAX_DAY + 1) * 86_400
_ALIASES = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL", "STRUCT": "RECORD"}
_RESERVED_PREFIXES = ("_table_", "_file_", "_partition", "_row_timestamp", "__root__")


@dataclass(frozen=True)
class BQField:
    """One BigQuery column (``type`` in canonical spelling, ``mode`` NULLABLE/REQUIRED/
    REPEATED, ``fields`` for RECORD)."""

    name: str
    type: str
    mode: str = "NULLABLE"
    fields: tuple[BQField, ...] = ()

    @classmethod
    def canonical(
        cls, name: str, type_: str, mode: str | None, fields: Sequence[BQField] = ()
    ) -> BQField:
        t = type_.upper()
        return cls(name, _ALIASES.get(t, t), (mode or "NULLABLE").upper(), tuple(fields))

    def describe(self) -> str:
        inner = f"<{', '.join(f.describe() for f in self.fields)}>" if self.fields else ""
        mode = "" if self.mode == "NULLABLE" else f" {self.mode}"
        return f"{self.name} {self.type}{inner}{mode}"


@dataclass(frozen=True)
class Column:
    """A target column and where its values come from (``value``, ``key``, ``timestamp``)."""

    field: BQField
    source: Literal["value", "key", "timestamp"] = "value"

    @property
    def name(self) -> str:
        return self.field.name


def staging_table_name(table: str) -> str:
    """The staging table of ``table`` (exactly-once mode)."""
    return f"{table}{STAGING_SUFFIX}"


def quote(name: str) -> str:
    """A BigQuery identifier in backticks."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def check_column_name(name: str) -> None:
    """OptionError for a column name BigQuery refuses."""
    problem = None
    if not name or len(name) > 300:
        problem = "must be 1 to 300 characters long"
    elif name.lower().startswith(_RESERVED_PREFIXES):
        problem = "starts with a prefix BigQuery reserves (_TABLE_, _FILE_, _PARTITION...)"
    elif any(c in name for c in "`\n\r\t\\\x00") or not name.isprintable():
        problem = "holds a backtick, backslash or control character"
    if problem:
        raise OptionError(
            f"bigquery: column name {name!r} {problem}; rename the column in Spark",
            option="value_columns",
            value=name,
        )


def bq_field(name: str, t: pa.DataType, *, in_array: bool = False) -> BQField:
    """The BigQuery column for an Arrow (Spark) type; OptionError for one BigQuery lacks."""
    check_column_name(name)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        if in_array:
            raise OptionError(
                f"bigquery: column {name!r} is an array of arrays ({t}), which BigQuery "
                "cannot store; wrap the inner array in a struct",
                option="value_columns",
                value=name,
            )
        if pa.types.is_map(t):
            entry = (bq_field("key", t.key_type), bq_field("value", t.item_type))
            return BQField(name, "RECORD", "REPEATED", entry)
        item = bq_field(name, t.value_type, in_array=True)
        return BQField(name, item.type, "REPEATED", item.fields)
    if pa.types.is_struct(t):
        children = tuple(bq_field(t.field(i).name, t.field(i).type) for i in range(t.num_fields))
        if not children:
            raise OptionError(
                f"bigquery: column {name!r} is a struct without fields",
                option="value_columns",
                value=name,
            )
        return BQField(name, "RECORD", "NULLABLE", children)
    if pa.types.is_integer(t):
        return BQField(name, "INT64")
    if pa.types.is_floating(t):
        return BQField(name, "FLOAT64")
    if pa.types.is_decimal(t):
        numeric = t.scale <= 9 and t.precision - t.scale <= 29
        return BQField(name, "NUMERIC" if numeric else "BIGNUMERIC")
    if pa.types.is_boolean(t):
        return BQField(name, "BOOL")
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
        return BQField(name, "STRING")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return BQField(name, "BYTES")
    if pa.types.is_date(t):
        return BQField(name, "DATE")
    if pa.types.is_timestamp(t):
        return BQField(name, "TIMESTAMP" if t.tz else "DATETIME")
    if pa.types.is_dictionary(t):
        return bq_field(name, t.value_type, in_array=in_array)
    raise OptionError(
        f"bigquery: column {name!r} has type {t}, which the sink cannot map to BigQuery; "
        "cast it in Spark",
        option="value_columns",
        value=name,
    )


def column_plan(
    values: pa.Schema,
    key_type: pa.DataType | None,
    *,
    has_timestamp: bool,
    include_metadata: bool,
    json_columns: Sequence[str] = (),
) -> list[Column]:
    """The target columns: Quix's metadata columns first (when in use), then the values
    (those named in ``json_columns`` as JSON)."""
    columns: list[Column] = []
    if include_metadata:
        if has_timestamp:
            columns.append(Column(BQField(METADATA_TIMESTAMP, "TIMESTAMP"), "timestamp"))
        if key_type is not None and not pa.types.is_null(key_type):
            key = bq_field(METADATA_KEY, key_type)
            if key.mode == "REPEATED" or key.type == "RECORD":
                key = BQField(METADATA_KEY, "STRING")
            columns.append(Column(key, "key"))
    taken = {c.name.lower() for c in columns}
    for f in values:
        if pa.types.is_null(f.type):
            continue  # no value in any row: its type is not known yet
        if f.name.lower() in taken:
            raise OptionError(
                f"bigquery: value column {f.name!r} clashes with another column of the same "
                "name (BigQuery names are case-insensitive; `timestamp` and `__key` are the "
                "metadata columns: rename it or set include_metadata=false)",
                option="include_metadata",
                value=f.name,
            )
        taken.add(f.name.lower())
        if f.name in json_columns:
            check_column_name(f.name)
            columns.append(Column(BQField(f.name, "JSON")))
        else:
            columns.append(Column(bq_field(f.name, f.type)))
    return columns


# ---------------------------------------------------------------------- existing tables

_WIDER = {
    ("INT64", "FLOAT64"),
    ("INT64", "NUMERIC"),
    ("INT64", "BIGNUMERIC"),
    ("NUMERIC", "BIGNUMERIC"),
    ("BIGNUMERIC", "NUMERIC"),  # value by value: RecordError past NUMERIC's range
    ("FLOAT64", "NUMERIC"),
    ("FLOAT64", "BIGNUMERIC"),
}


def conflict(wanted: BQField, existing: BQField) -> str | None:
    """Why rows planned as ``wanted`` cannot go into the ``existing`` column, or None."""
    if existing.type == "JSON" and existing.mode != "REPEATED":
        return None  # any value, arrays too, as its JSON text (Quix's lists and dicts)
    if existing.mode == "REPEATED" and wanted.mode != "REPEATED":
        return f"the table's column is REPEATED, the rows' is {wanted.mode}"
    if wanted.mode == "REPEATED" and existing.mode != "REPEATED":
        return f"the rows hold arrays, the table's column is {existing.mode}"
    if wanted.type == existing.type:
        if wanted.type != "RECORD":
            return None
        fields = {f.name.lower(): f for f in existing.fields}
        for child in wanted.fields:
            there = fields.get(child.name.lower())
            if there is None:
                return f"the table's RECORD lacks the field {child.name!r}"
            problem = conflict(child, there)
            if problem:
                return f"field {child.name!r}: {problem}"
        return None
    if (wanted.type, existing.type) in _WIDER:
        return None
    if existing.type == "STRING" and wanted.type in ("INT64", "FLOAT64", "NUMERIC", "BOOL"):
        return None
    if existing.type == "STRING" and wanted.type == "BYTES":
        return None  # decoded as UTF-8 (Quix's text __key); bytes that are not: a RecordError
    return f"the rows hold {wanted.type}, the table's column is {existing.type}"


# ---------------------------------------------------------------------- Arrow for AppendRows

_SCALAR_ARROW: dict[str, pa.DataType] = {
    "INT64": pa.int64(),
    "FLOAT64": pa.float64(),
    "NUMERIC": pa.decimal128(38, 9),
    "BIGNUMERIC": pa.decimal256(76, 38),
    "BOOL": pa.bool_(),
    "STRING": pa.string(),
    "JSON": pa.string(),
    "BYTES": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", "UTC"),
    "DATETIME": pa.timestamp("us"),
    "TIME": pa.time64("us"),
}


def arrow_type(f: BQField) -> pa.DataType:
    """The Arrow type the Storage Write API takes for a BigQuery column."""
    if f.type == "RECORD":
        inner: pa.DataType = pa.struct([pa.field(c.name, arrow_type(c)) for c in f.fields])
    else:
        try:
            inner = _SCALAR_ARROW[f.type]
        except KeyError:
            raise OptionError(
                f"bigquery: the table's column {f.name!r} has type {f.type}, which the sink "
                "does not write",
                option="table_name",
            ) from None
    return pa.list_(inner) if f.mode == "REPEATED" else inner


def arrow_schema(fields: Sequence[BQField]) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f)) for f in fields])


def _bad(name: str, row: int, what: str) -> RecordError:
    return RecordError(f"bigquery: column {name!r}, row {row}: {what}", column=name, row=row)


def convert(array: pa.Array, target: BQField, *, path: str | None = None) -> pa.Array:
    """``array`` as the Arrow type of ``target``; RecordError for a value it cannot hold."""
    name = path or target.name
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if target.mode == "REQUIRED":
        row = first_null(array)
        if row is not None:
            raise _bad(name, row, "null, and the table's column is REQUIRED")
    if target.mode == "REPEATED":
        return _convert_list(array, target, name)
    if target.type == "JSON":
        return _json_text(array)
    if target.type == "RECORD":
        if not pa.types.is_struct(array.type):
            raise _bad(name, 0, f"a {array.type} value for a RECORD column")
        children = []
        by_name = {array.type.field(i).name.lower(): i for i in range(array.type.num_fields)}
        for child in target.fields:
            index = by_name.get(child.name.lower())
            if index is None:
                children.append(pa.nulls(len(array), arrow_type(child)))
            else:
                flat = array.field(index)
                children.append(convert(flat, child, path=f"{name}.{child.name}"))
        return pa.StructArray.from_arrays(
            children,
            fields=[pa.field(c.name, arrow_type(c)) for c in target.fields],
            mask=array.is_null(),
        )
    wanted = _SCALAR_ARROW[target.type]
    if target.type in ("DATE", "TIMESTAMP", "DATETIME"):
        _check_time_range(array, name)
    if target.type == "STRING" and not (
        pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
    ):
        if pa.types.is_null(array.type):
            return pa.nulls(len(array), pa.string())
        if pa.types.is_nested(array.type):
            return _json_text(array)  # e.g. a struct key in the STRING column __key
        if _is_binary(array.type):
            return _utf8(array, name)
        return pc.cast(array, pa.string())
    if target.type in ("TIMESTAMP", "DATETIME") and pa.types.is_timestamp(array.type):
        array = floor_time(array, "us")
        if target.type == "TIMESTAMP" and array.type.tz is None:
            return pc.assume_timezone(array, "UTC").cast(wanted)
        if target.type == "DATETIME" and array.type.tz is not None:
            return array.cast(pa.int64()).cast(wanted)  # the UTC wall clock
    if pa.types.is_floating(array.type) and pa.types.is_decimal(wanted):
        return _floats_as_decimals(array, wanted, name, target.type)
    try:
        return pc.cast(array, wanted, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        row = _first_unfit(array, wanted)
        raise _bad(
            name, row, f"the value does not fit the column's type {target.type} ({exc})"
        ) from None


def _floats_as_decimals(array: pa.Array, wanted: pa.DataType, name: str, kind: str) -> pa.Array:
    """Floats for a NUMERIC or BIGNUMERIC column: each the column's decimal nearest to it,
    when that decimal reads back as the same float (19.99 does: its NUMERIC is 19.99);
    a RecordError naming the first row whose float it would change (1e-10 would become 0
    in NUMERIC's 9 places), which a cast alone rounds without a word."""
    try:
        decimals = pc.cast(array, wanted, safe=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        unfit = _first_unfit(array, wanted)
        raise _bad(name, unfit, f"the value does not fit {kind} ({exc})") from None
    same = pc.equal(nearest_float(decimals), array)
    changed = pc.and_(pc.invert(pc.fill_null(same, True)), pc.is_valid(array))
    row = first_true(changed)
    if row is not None:
        raise _bad(
            name,
            row,
            f"the float {array[row].as_py()!r} has no {kind} value that reads back as it "
            f"(the nearest is {decimals[row].as_py()}); cast the column to a decimal in "
            "Spark, or write to a FLOAT64 column",
        )
    return decimals


def _is_binary(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
    )


def _utf8(array: pa.Array, name: str) -> pa.Array:
    """Bytes for a STRING column (a Kafka key into the text ``__key`` of a table Quix's sink
    made with a string key): their UTF-8 text; RecordError naming the first row that is not."""
    if pa.types.is_fixed_size_binary(array.type):
        array = pc.cast(array, pa.binary())
    try:
        return pc.cast(array, pa.string(), safe=True)
    except pa.ArrowInvalid:
        row = next(i for i, v in enumerate(array.to_pylist()) if v is not None and not _decodes(v))
        raise _bad(
            name,
            row,
            "bytes that are not UTF-8 text, and the table's column is STRING; select the "
            "column as text yourself (e.g. hex(key) or base64(key)), or write to a BYTES column",
        ) from None


def _decodes(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _first_unfit(array: pa.Array, wanted: pa.DataType) -> int:
    for i in range(len(array)):
        try:
            pc.cast(array.slice(i, 1), wanted, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return i
    return 0


def _check_time_range(array: pa.Array, name: str) -> None:
    t = array.type
    if pa.types.is_date32(t):
        raw, low, high = pc.cast(array, pa.int32()), _MIN_DAY, _MAX_DAY + 1
    elif pa.types.is_date64(t):
        raw, low, high = pc.cast(array, pa.int64()), _MIN_SECOND * 1000, _END_SECOND * 1000
    elif pa.types.is_timestamp(t):
        if t.unit == "ns":
            return  # 64-bit nanoseconds span 1677..2262: always in range
        per_second = {"s": 1, "ms": 1000, "us": 1_000_000}[t.unit]
        raw = pc.cast(array, pa.int64())
        low, high = _MIN_SECOND * per_second, _END_SECOND * per_second
    else:
        return
    out = pc.or_(pc.less(raw, low), pc.greater_equal(raw, high))
    row = first_true(out)
    if row is not None:
        raise _bad(
            name,
            row,
            "outside BigQuery's range 0001-01-01 .. 9999-12-31; filter or fix the row",
        )


def _convert_list(array: pa.Array, target: BQField, name: str) -> pa.Array:
    item = BQField(target.name, target.type, "NULLABLE", target.fields)
    if pa.types.is_map(array.type):
        entries = pa.StructArray.from_arrays([array.keys, array.items], names=["key", "value"])
        offsets, values = array.offsets, entries
    elif pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        offsets, values = array.offsets, array.values
    elif pa.types.is_null(array.type):
        return pa.nulls(len(array), arrow_type(target))
    else:
        raise _bad(name, 0, f"a {array.type} value for a REPEATED column")
    offsets = pc.cast(offsets, pa.int32())
    if array.offset or len(offsets) != len(array) + 1:
        offsets = offsets.slice(0, len(array) + 1)
    start = offsets[0].as_py()
    end = offsets[-1].as_py()
    values = values.slice(start, end - start)
    offsets = pc.subtract(offsets, start)
    row = first_null(values)
    if row is not None:
        owner = int(pc.sum(pc.less_equal(offsets.slice(1), row)).as_py() or 0)
        raise _bad(name, owner, "an array holding a null element, which BigQuery cannot store")
    converted = convert(values, item, path=f"{name}[]")
    return pa.ListArray.from_arrays(
        offsets, converted, type=arrow_type(target), mask=array.is_null()
    )


def _json_text(array: pa.Array) -> pa.Array:
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return pc.cast(array, pa.string())
    t = array.type
    texts: list[Any] = [
        None if v is None else json.dumps(_jsonable(v, t), default=str, separators=(",", ":"))
        for v in array.to_pylist()
    ]
    return pa.array(texts, pa.string())


def _jsonable(value: Any, t: pa.DataType) -> Any:
    """A Python value of Arrow type ``t`` as JSON data: maps become objects."""
    if value is None:
        return None
    if pa.types.is_map(t):
        return {str(k): _jsonable(v, t.item_type) for k, v in value}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_jsonable(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {f.name: _jsonable(value[f.name], f.type) for f in t}
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return float(value)  # BigQuery JSON keeps numbers as FLOAT64 (or INT64)
    return value
