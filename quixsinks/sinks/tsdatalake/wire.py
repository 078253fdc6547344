"""The tsdatalake layout: Hive partitioning of a micro-batch (``<col>=<value>/...`` paths,
vectorised in Arrow), and its Iceberg equivalent for catalog registration.

``year``/``month``/``day``/``hour`` come from the timestamp column in UTC, zero-padded
(``year=2026/month=03/day=07/hour=05``); any other hive column is a value column taken as
it is (identity), as text. A null becomes ``__None__`` (Quix's name), so no row is ever
dropped for its partition value. Values are percent-encoded where a path would break
(``/``, ``=``, ``%``, control characters...), the encoding Hive readers (pyarrow's
``partitioning="hive"``, Spark, DuckDB) decode; a value that is literally ``__None__`` is
written ``%5F_None__``, so it reads back as itself, not as a null. ``..`` and ``.`` stay as
they are: a segment is ``<col>=<value>``, never a bare dot name. A segment longer than 255
bytes once encoded (what a local file system takes as one name) is a RecordError naming
the column and the value: :func:`unfit_rows` finds every such row, so the sink refuses
them one by one before it writes (:meth:`Layout.split` raises for the first one left).

With ``catalog_url`` the table's Iceberg partition spec is equivalent to the hive columns
(:func:`spec_fields`): the time columns become one time transform of the timestamp column
(``hour(ts)`` for year/month/day/hour, ``day(ts)`` for year/month/day, and so on) when that
column is a timestamp; with an integer epoch (Iceberg's time transforms take timestamps
only) or a time chain with a gap (day without month), each time column is an identity
partition of a string column instead. Any other hive column is an identity partition of
its column; a file's partition tuple is read from its Hive path (:func:`partition_values`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.errors import RecordError
from quixsinks.core.tables.partitioning import PartitionField

from .options import TIME_COLUMNS, TSDataLakeOptions

__all__ = [
    "MAX_SEGMENT_BYTES",
    "NULL_PARTITION",
    "Layout",
    "decode_segment",
    "describe_fields",
    "encode_value",
    "expand",
    "hive_equivalent",
    "partition_fields",
    "partition_values",
    "partitionable",
    "spec_fields",
    "unfit_rows",
]

NULL_PARTITION = "__None__"
#: the longest directory name local file systems (ext4, APFS, NTFS) take, in bytes
MAX_SEGMENT_BYTES = 255
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)
_SAFE = "-_.~ +,;@!$&()'"
#: identity partition values are written as text from these types only
_PARTITIONABLE = (
    pa.types.is_integer,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_boolean,
    pa.types.is_date,
    pa.types.is_dictionary,
)


@dataclass(frozen=True)
class Layout:
    """The hive columns of a table and how the time columns are derived."""

    hive_columns: tuple[str, ...]
    timestamp_column: str | None
    timestamp_unit: str = "ms"

    def split(self, table: pa.Table) -> Iterator[tuple[str, pa.Table]]:
        """Yield ``(partition path, rows)`` per partition, the hive identity columns dropped.

        Vectorised: every hive column becomes an integer code per row (a time bucket, or
        the index into the column's distinct values), the codes are combined into one
        partition code per row, the rows are ordered by it once, and the path is built
        in Python only once per partition. The path is empty for an unpartitioned layout.
        """
        if not self.hive_columns:
            if table.num_rows:
                yield "", table
            return
        if table.num_rows == 0:
            return
        identity = [
            c for c in self.hive_columns if c not in TIME_COLUMNS and c in table.column_names
        ]
        data = table.drop_columns(identity) if identity else table
        parts = [self._part(table, name) for name in self._part_names()]
        codes = parts[0].codes
        for part in parts[1:]:  # combine two at a time, re-encoded to stay < rows
            combined = pc.add(pc.multiply(codes.cast(pa.int64()), part.size), part.codes)
            codes = pc.dictionary_encode(combined).indices
        encoded = pc.dictionary_encode(codes)
        if len(encoded.dictionary) == 1:
            yield self._path(parts, 0), data
            return
        order = pc.sort_indices(encoded.indices)
        ordered_codes = pc.take(encoded.indices, order)
        ordered = data.take(order)
        runs = pc.run_end_encode(ordered_codes)
        # distinct codes can share a path (hive columns "day" only: the 1st of each month)
        slices: dict[str, list[pa.Table]] = {}
        start = 0
        for end in runs.run_ends.to_pylist():
            path = self._path(parts, order[start].as_py())
            slices.setdefault(path, []).append(ordered.slice(start, end - start))
            start = end
        for path, tables in slices.items():
            yield path, tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    # ------------------------------------------------------------------ internals

    def _part_names(self) -> list[str]:
        """One part per identity column, plus one for all the time columns together."""
        names: list[str] = []
        for name in self.hive_columns:
            if name in TIME_COLUMNS:
                if "<time>" not in names:
                    names.append("<time>")
            else:
                names.append(name)
        return names

    def _part(self, table: pa.Table, name: str) -> _Part:
        if name == "<time>":
            return _time_part(table, self)
        return _identity_part(table, name)

    def _path(self, parts: list[_Part], row: int) -> str:
        text: dict[str, str] = {}
        for part in parts:
            text.update(part.segments(row))
        return "/".join(f"{name}={text[name]}" for name in self.hive_columns)


@dataclass
class _Part:
    """Integer codes per row (``0 <= code < size``) and how a row's code reads as text."""

    codes: pa.Array
    size: int
    segments: Callable[[int], dict[str, str]]


def _floor_div(values: pa.Array, by: int) -> pa.Array:
    """Integer division rounding down (Arrow's rounds toward zero: times before 1970)."""
    quotient = pc.divide(values, by)
    below = pc.less(pc.subtract(values, pc.multiply(quotient, by)), 0)
    return pc.if_else(below, pc.subtract(quotient, 1), quotient)


def _time_part(table: pa.Table, layout: Layout) -> _Part:
    stamps, per_second = _epoch_integers(table, layout)
    hourly = "hour" in layout.hive_columns
    bucket_units = per_second * (3600 if hourly else 86400)
    encoded = pc.dictionary_encode(_floor_div(stamps, bucket_units))
    values = encoded.dictionary.to_pylist()
    null_code = len(values)
    codes = pc.fill_null(encoded.indices, null_code)  # null times: one more code
    names = [c for c in layout.hive_columns if c in TIME_COLUMNS]
    step = 3600 if hourly else 86400

    def segments(row: int) -> dict[str, str]:
        code = codes[row].as_py()
        if code == null_code:
            return dict.fromkeys(names, NULL_PARTITION)
        when = _EPOCH + dt.timedelta(seconds=values[code] * step)
        fields = {
            "year": f"{when.year:04d}",
            "month": f"{when.month:02d}",
            "day": f"{when.day:02d}",
            "hour": f"{when.hour:02d}",
        }
        return {n: fields[n] for n in names}

    return _Part(codes, null_code + 1, segments)


def _epoch_integers(table: pa.Table, layout: Layout) -> tuple[pa.Array, int]:
    """The timestamp column as int64 epoch values, and how many of them make a second."""
    name = layout.timestamp_column
    if name is not None and name not in table.column_names:
        # JSON values without the field in any row of the batch: null times, as for a row
        # without it in a batch where others have it (a DataFrame column is checked first)
        return pa.nulls(table.num_rows, pa.int64()), _PER_SECOND[layout.timestamp_unit]
    if name is None:
        raise RecordError(
            f"tsdatalake: hive columns {', '.join(layout.hive_columns)} need the timestamp "
            f"column {name!r}, which this batch does not have (columns: "
            f"{', '.join(table.column_names)}); set 'timestamp_column'",
            column=name,
        )
    column = table.column(name).combine_chunks()
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.int64()), _PER_SECOND[column.type.unit]
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64()), _PER_SECOND[layout.timestamp_unit]
    if pa.types.is_date(column.type):
        return column.cast(pa.timestamp("s")).cast(pa.int64()), 1
    raise RecordError(
        f"tsdatalake: timestamp column {name!r} has type {column.type}; expected a "
        "timestamp or an integer epoch (see timestamp_unit)",
        column=name,
    )


def _identity_part(table: pa.Table, name: str) -> _Part:
    if name not in table.column_names:  # a JSON value without the field: all null
        zeros = pa.repeat(pa.scalar(0, pa.int32()), table.num_rows)
        return _Part(zeros, 1, lambda _row: {name: NULL_PARTITION})
    column = table.column(name).combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if not any(check(column.type) for check in _PARTITIONABLE):
        raise RecordError(
            f"tsdatalake: hive column {name!r} has type {column.type}; partition by an "
            "integer, string, boolean or date column",
            column=name,
        )
    encoded = pc.dictionary_encode(column)
    size = len(encoded.dictionary)
    codes = pc.fill_null(encoded.indices, size)  # nulls: one more code
    text = [encode_value(v) for v in encoded.dictionary.cast(pa.string()).to_pylist()]
    for code, error in _unfit(name, encoded, text):
        row = int(pc.index(codes, code).as_py())
        raise RecordError(f"{error} (found in row {row})", column=name, row=row)

    def segments(row: int) -> dict[str, str]:
        code = codes[row].as_py()
        return {name: NULL_PARTITION if code == size else text[code]}

    return _Part(codes, size + 1, segments)


def partitionable(t: pa.DataType) -> bool:
    """Whether values of type ``t`` can be identity partition values."""
    return any(check(t) for check in _PARTITIONABLE)


def _unfit(
    name: str, encoded: pa.DictionaryArray, text: list[str]
) -> list[tuple[int, RecordError]]:
    """(code, error) of each distinct value whose directory name is too long."""
    unfit = []
    for code, value in enumerate(text):
        segment = f"{name}={value}"
        if len(segment.encode()) > MAX_SEGMENT_BYTES:
            raw = encoded.dictionary[code].as_py()
            unfit.append(
                (
                    code,
                    RecordError(
                        f"tsdatalake: hive column {name!r} has the value {str(raw)[:40]!r}..., "
                        f"whose partition directory {segment[:40]!r}... is "
                        f"{len(segment.encode())} bytes once percent-encoded; a file system "
                        f"takes at most {MAX_SEGMENT_BYTES}: partition by a shorter value (e.g. "
                        "a hash or a prefix of it)",
                        column=name,
                    ),
                )
            )
    return unfit


def unfit_rows(table: pa.Table, hive_columns: Sequence[str]) -> list[tuple[int, RecordError]]:
    """The rows whose value of an identity hive column makes a partition directory name
    too long, each with its error (row order): refused by the sink, row by row."""
    refused: dict[int, RecordError] = {}
    for name in hive_columns:
        if name in TIME_COLUMNS or name not in table.column_names:
            continue
        column = table.column(name).combine_chunks()
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        if not any(check(column.type) for check in _PARTITIONABLE):
            continue  # the whole column is refused by split()
        encoded = pc.dictionary_encode(column)
        text = [encode_value(v) for v in encoded.dictionary.cast(pa.string()).to_pylist()]
        for code, error in _unfit(name, encoded, text):
            rows = pc.indices_nonzero(pc.equal(encoded.indices, code))
            for row in rows.to_pylist():
                refused.setdefault(int(row), error)
    return sorted(refused.items())


def encode_value(value: str) -> str:
    """A partition value as a path segment's text: percent-encoded where it would break a
    path (most values need nothing); the literal text ``__None__`` (the null partition's
    name) with its first ``_`` encoded, so that it reads back as itself; the empty text
    as the null partition, as Spark's own partitioned writer does (Spark cannot read a
    ``<col>=`` folder: EMPTY_PARTITION_COLUMN_VALUE)."""
    if value == NULL_PARTITION:
        return "%5F" + value[1:]
    if not value:
        return NULL_PARTITION
    return quote(value, safe=_SAFE)


def decode_segment(text: str) -> str | None:
    """The partition value a reader sees in a segment's text (None for the null
    partition): what Hive readers do, for tests and tools."""
    return None if text == NULL_PARTITION else unquote(text)


# ----------------------------------------------------------------------------- Iceberg


def _time_chain(opts: TSDataLakeOptions) -> str | None:
    """The finest time column when the hive columns hold a prefix of year/month/day/hour,
    side by side and in that order (what one time transform stands for)."""
    hive = list(opts.hive_columns)
    time = [c for c in hive if c in TIME_COLUMNS]
    if not time or time != list(TIME_COLUMNS[: len(time)]):
        return None
    first = hive.index(time[0])
    if hive[first : first + len(time)] != time:
        return None
    return time[-1]


def spec_fields(
    opts: TSDataLakeOptions, timestamp_type: pa.DataType | None
) -> list[PartitionField]:
    """The Iceberg partition fields equivalent to the hive columns, in their order."""
    finest = _time_chain(opts)
    transform = finest is not None and (
        timestamp_type is not None and pa.types.is_timestamp(timestamp_type)
    )
    fields: list[PartitionField] = []
    for column in opts.hive_columns:
        if column in TIME_COLUMNS and transform:
            if column == "year":  # the transform sits where the time columns start
                fields.append(PartitionField(opts.timestamp_column, str(finest)))
            continue
        fields.append(PartitionField(column, "identity"))
    return fields


def partition_fields(spec: Any, schema: Any) -> list[PartitionField]:
    """A table's partition spec as partition fields named by their source columns."""
    return [
        PartitionField(str(schema.find_column_name(f.source_id)), str(f.transform))
        for f in spec.fields
    ]


def hive_equivalent(spec: Any, schema: Any) -> list[str]:
    """The hive columns a table's partition spec stands for (``?`` for what has none)."""
    return expand(partition_fields(spec, schema))


def expand(fields: Iterable[PartitionField]) -> list[str]:
    """The hive columns of partition fields: a time transform stands for its chain."""
    out: list[str] = []
    for field in fields:
        if field.transform == "identity":
            out.append(field.source)
        elif field.transform in TIME_COLUMNS:
            out.extend(TIME_COLUMNS[: TIME_COLUMNS.index(field.transform) + 1])
        else:
            out.append(f"{field.transform}({field.source})?")
    return out


def describe_fields(fields: Sequence[PartitionField]) -> str:
    return ", ".join(
        f.source if f.transform == "identity" else f"{f.transform}({f.source})" for f in fields
    )


def partition_values(key: str, spec: Any, schema: Any) -> list[Any]:
    """A file's partition tuple, from its Hive path (``<table>/<col>=<value>/.../f``)."""
    segments = key.split("/")[1:-1]
    path: dict[str, str | None] = {}
    for segment in segments:
        name, _, text = segment.partition("=")
        path[unquote(name)] = decode_segment(text)  # null before decoding: %5F_None__ is text
    values: list[Any] = []
    for field in spec.fields:
        transform = str(field.transform)
        column = schema.find_field(field.source_id)
        if transform == "identity":
            values.append(_typed(path.get(column.name), column.field_type))
            continue
        values.append(_time_value(transform, path))
    return values


def _typed(text: str | None, field_type: Any) -> Any:
    """A Hive path value as the Iceberg type of its column."""
    if text is None:
        return None
    kind = str(field_type)
    if kind in ("int", "long"):
        return int(text)
    if kind == "boolean":
        return text.lower() == "true"
    if kind == "date":
        return (dt.date.fromisoformat(text) - _EPOCH_DATE).days
    return text


def _time_value(transform: str, path: dict[str, str | None]) -> int | None:
    """The value of a time transform from the year/month/day/hour of a path."""
    if any(path.get(c) is None for c in TIME_COLUMNS[: TIME_COLUMNS.index(transform) + 1]):
        return None
    year = int(str(path["year"]))
    if transform == "year":
        return year - 1970
    month = int(str(path["month"]))
    if transform == "month":
        return (year - 1970) * 12 + month - 1
    days = (dt.date(year, month, int(str(path["day"]))) - _EPOCH_DATE).days
    if transform == "day":
        return days
    return days * 24 + int(str(path["hour"]))
