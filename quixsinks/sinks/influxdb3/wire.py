"""InfluxDB line protocol built from Arrow columns, vectorised (no per-row Python).

    measurement[,tag=value...] field=value[,field=value...] timestamp

* measurement: commas and spaces escaped; tag keys, tag values and field keys: commas,
  equals signs and spaces escaped; string field values: quoted, with ``"`` and ``\\``
  escaped. A newline in a measurement, tag or field key is a RecordError (the protocol
  has no escape for it). So is a backslash in those that a parser could read as an
  escape: one at the end, or before another backslash, a comma, an equals sign or a
  space (InfluxDB 1.x and 2.x/3 parsers disagree on ``\\\\``, and 1.x cannot carry a
  trailing backslash at all); a measurement starting with ``#`` (a comment line) too.
* tags sorted by key; a null or empty tag value leaves the tag out of that line.
* fields: integers ``12i`` (unsigned ``12u``), floats, ``true``/``false``, strings;
  a null field is left out; a row with no field at all has no line (the sink refuses it).
* NaN and infinity cannot be written: a RecordError, or, with ``invalid_floats=drop``,
  the field is left out of that line.
* decimals are written as floats (rounded to the nearest double), or, with
  ``decimal_fields=string``, as string fields with their exact digits.
* the timestamp is an integer in the chosen precision; a time that InfluxDB cannot
  store (outside 1677-09-21 .. 2262-04-11, 64-bit nanoseconds) is a RecordError in every
  precision, never a silent overflow.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_null, first_true, floor_time, nearest_float
from quixsinks.core.errors import OptionError, RecordError

__all__ = [
    "LineProtocol",
    "LinesRefused",
    "Precision",
    "escape",
    "field_pieces",
    "gzip_body",
    "timestamps",
]

Precision = Literal["ns", "us", "ms", "s"]
#: digits of a current epoch time per precision (Quix validates integer times so)
DIGITS = {"s": 10, "ms": 13, "us": 16, "ns": 19}


class LinesRefused(RecordError):
    """The server refused some lines of one request and named them (a partial write).

    Attributes:
        lines: each refused line's number (1-based, within the request body) to the
            server's reason.
    """

    def __init__(self, message: str, *, lines: dict[int, str]) -> None:
        super().__init__(message)
        self.lines = dict(lines)
        self._kwargs["lines"] = self.lines


def escape(column: pa.Array, characters: str) -> pa.Array:
    """Backslash-escape ``characters`` in a string column (one scan when none occurs)."""
    pattern = "([" + "".join("\\" + c if c in "]\\^-" else c for c in characters) + "])"
    if not pc.any(pc.match_substring_regex(column, pattern)).as_py():
        return column
    return pc.replace_substring_regex(column, pattern, r"\\\1")


#: a backslash that a line-protocol parser could take for an escape
AMBIGUOUS_BACKSLASH = r"\\([\\,= ]|$)"


def _check_no_newline(column: pa.Array, what: str, row_offset: int = 0) -> None:
    row = first_true(pc.match_substring(column, "\n"))
    if row is not None:
        raise RecordError(
            f"line protocol cannot carry a newline in a {what} (row {row + row_offset})",
            row=row + row_offset,
        )
    row = first_true(pc.match_substring_regex(column, AMBIGUOUS_BACKSLASH))
    if row is not None:
        raise RecordError(
            f"line protocol cannot carry the {what} {column[row].as_py()!r} (row "
            f"{row + row_offset}) unambiguously: a backslash at its end, or before a "
            "backslash, comma, equals sign or space, would be read as an escape; replace "
            "that backslash (e.g. with '/') before writing",
            row=row + row_offset,
        )


def _as_text(column: pa.Array, name: str = "") -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_nested(column.type):
        row = first_true(pc.is_valid(column))
        if row is None:  # no row has a value: as if the key were absent
            return pa.nulls(len(column), pa.string())
        raise RecordError(
            f"line protocol: {name!r} holds {column.type} values (row {row}), which cannot be "
            "a tag or a measurement; use a column or JSON key of text or numbers",
            column=name or None,
            row=row,
        )
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        # strict: a replacement character could make two tags (two series) one
        from quixsinks.core.formats import decode_utf8_strict

        return decode_utf8_strict(column, f"line protocol: {name!r}")
    return pc.cast(column, pa.string())


def field_kind(t: pa.DataType) -> str:
    """How an Arrow type is written as a field; OptionError for types that cannot be."""
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_unsigned_integer(t):
        return "uint"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        return "string"
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "string"
    return "unsupported"


def field_pieces(
    column: pa.Array,
    *,
    ints_to_floats: bool,
    invalid_floats: Literal["error", "drop"],
    name: str,
    decimals: Literal["float", "string"] = "float",
) -> list[Any]:
    """Pieces (arrays and literals) whose row-wise concatenation is each field value
    (null where the field is left out); kept apart so a line is built in one join."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_null(column.type):  # a JSON key null in every row: left out
        return [pa.nulls(len(column), pa.string())]
    kind = field_kind(column.type)
    if pa.types.is_decimal(column.type) and decimals == "string":
        text = pc.cast(column, pa.string())
        return [pc.binary_join_element_wise('"', text, '"', "")]
    if kind in ("int", "uint") and ints_to_floats:
        kind = "float"
        column = pc.cast(column, pa.float64())
    if kind == "bool":
        return [pc.if_else(column, "true", "false")]
    if kind == "int":
        return [pc.cast(column, pa.string()), "i"]
    if kind == "uint":
        return [pc.cast(column, pa.string()), "u"]
    if kind == "float":
        column = nearest_float(column)
        finite = pc.is_finite(column)
        bad = pc.and_(pc.invert(finite), pc.is_valid(column))
        row = first_true(bad)
        if row is not None:
            if invalid_floats == "error":
                raise RecordError(
                    f"field {name!r} is {column[row].as_py()} in row {row}; line protocol "
                    "has no NaN or infinity (set invalid_floats=drop to leave such fields out)",
                    column=name,
                    row=row,
                )
            column = pc.if_else(finite, column, pa.scalar(None, column.type))
        return [pc.cast(column, pa.string())]
    if kind == "string":
        if pa.types.is_timestamp(column.type) or pa.types.is_date(column.type):
            from quixsinks.core.formats import json_column

            text = json_column(column)
            return [pc.if_else(pc.is_null(column), pa.scalar(None, pa.string()), text)]
        return ['"', escape(_as_text(column), '\\"'), '"']
    row = first_true(pc.is_valid(column))
    if row is None:  # no row has a value: the field is left out
        return [pa.nulls(len(column), pa.string())]
    raise RecordError(
        f"line protocol: {name!r} holds {column.type} values (row {row}), which cannot be a "
        "field; flatten it or serialise it to a string first, or leave it out with fields_keys",
        column=name,
        row=row,
    )


#: nanoseconds per unit, and the 64-bit nanosecond range InfluxDB stores times in
_NANOS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_NS_RANGE = (-(2**63), 2**63 - 1)


def _check_storable(values: pa.Array, unit: str, name: str) -> None:
    """RecordError for a time outside InfluxDB's 64-bit nanosecond range."""
    per = _NANOS[unit]
    low, high = -(-_NS_RANGE[0] // per), _NS_RANGE[1] // per
    outside = pc.or_(pc.less(values, low), pc.greater(values, high))
    row = first_true(outside)
    if row is not None:
        raise RecordError(
            f"time {values[row].as_py()} ({unit}) in column {name!r} (row {row}) is outside "
            "what InfluxDB can store (1677-09-21 to 2262-04-11, 64-bit nanoseconds); "
            "correct or filter such rows before writing",
            column=name,
            row=row,
        )


def timestamps(column: pa.Array, precision: Precision, *, name: str) -> pa.Array:
    """Integer times in ``precision`` from a timestamp column, or an integer column checked
    against the precision's digit count (as Quix does)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    t = column.type
    if pa.types.is_timestamp(t):
        _check_storable(pc.cast(column, pa.int64()), t.unit, name)
        return pc.cast(floor_time(column, precision), pa.int64())
    if pa.types.is_integer(t):
        digits = pc.utf8_length(pc.cast(pc.abs(column), pa.string()))
        row = first_true(pc.and_(pc.not_equal(digits, DIGITS[precision]), pc.is_valid(column)))
        if row is not None:
            raise RecordError(
                f"time {column[row].as_py()} in column {name!r} (row {row}) does not have the "
                f"{DIGITS[precision]} digits of an epoch time in {precision}; "
                "set time_precision to match",
                column=name,
                row=row,
            )
        _check_storable(pc.cast(column, pa.int64()), precision, name)
        return pc.cast(column, pa.int64())
    raise OptionError(
        f"line protocol: time column {name!r} has type {t}; it must be a timestamp or an integer "
        "epoch time",
        option="time_key",
        value=name,
    )


@dataclass(frozen=True)
class LineProtocol:
    """How to turn a batch's columns into lines; built once on the driver."""

    measurement: str | None
    measurement_column: str | None
    tags: tuple[str, ...]
    fields: tuple[str, ...]
    precision: Precision = "ms"
    ints_to_floats: bool = False
    invalid_floats: Literal["error", "drop"] = "error"
    decimals: Literal["float", "string"] = "float"

    def __post_init__(self) -> None:
        check_not_time(self.tags, self.fields)

    def lines(
        self,
        columns: dict[str, pa.Array],
        times: pa.Array,
        rows: int,
    ) -> tuple[pa.Array, list[int]]:
        """The lines (string array, each ending in a newline) of the rows that have a field,
        and the rows that have none (indices, left out of the lines: a point needs a field).
        ``columns`` maps tag and field names to their arrays."""
        if self.measurement_column is not None:
            names = _as_text(columns[self.measurement_column], self.measurement_column)
            row = first_true(pc.fill_null(pc.equal(names, ""), True))
            if row is not None:
                raise RecordError(
                    f"column {self.measurement_column!r} (measurement_column) is null or empty "
                    f"in row {row}; every line needs a measurement",
                    column=self.measurement_column,
                    row=row,
                )
            _check_no_newline(names, "measurement")
            row = first_true(pc.match_substring_regex(names, LINE_START))
            if row is not None:
                raise RecordError(
                    f"the measurement {names[row].as_py()!r} (row {row}) starts with '#' or "
                    "whitespace (a '#' makes its line a comment; InfluxDB drops leading "
                    "whitespace, and a point would land in another measurement); rename it",
                    column=self.measurement_column,
                    row=row,
                )
            pieces: list[object] = [escape(names, ", ")]
        else:
            assert self.measurement is not None
            pieces = [_escape_literal(self.measurement, ", ", starts_line=True)]
        for tag in sorted(self.tags):
            text = _as_text(columns[tag], tag)
            _check_no_newline(text, f"tag value of {tag!r}")
            key = "," + _escape_literal(tag) + "="
            escaped = escape(text, ",= ")
            if text.null_count == 0 and pc.min(pc.utf8_length(text)).as_py() > 0:
                pieces += [key, escaped]  # every row has the tag: no per-row choice
            else:
                present = pc.fill_null(
                    pc.and_kleene(pc.is_valid(text), pc.not_equal(text, "")), False
                )
                joined = pc.binary_join_element_wise(key, escaped, "")
                pieces.append(pc.if_else(present, joined, ""))
        row = first_null(times)
        if row is not None:
            raise RecordError(
                f"row {row} has no time; every point needs one (set timestamp_column or "
                "time_key to a column without nulls)",
                row=row,
            )
        field_parts = [
            field_pieces(
                columns[name],
                ints_to_floats=self.ints_to_floats,
                invalid_floats=self.invalid_floats,
                name=name,
                decimals=self.decimals,
            )
            for name in self.fields
        ]
        time_text = pc.cast(times, pa.string())
        if field_parts and all(
            isinstance(p, str) or p.null_count == 0 for parts in field_parts for p in parts
        ):
            # every row has every field: the whole line in one kernel call
            for index, (name, parts) in enumerate(zip(self.fields, field_parts, strict=True)):
                pieces += [(" " if index == 0 else ",") + _escape_literal(name) + "=", *parts]
            line = pc.binary_join_element_wise(*pieces, " ", time_text, "\n", "")
            return line, []
        texts = [
            parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "")
            for parts in field_parts
        ]
        parts = [
            pc.fill_null(
                pc.binary_join_element_wise("," + _escape_literal(name) + "=", text, ""), ""
            )
            for name, text in zip(self.fields, texts, strict=True)
        ]
        if parts:
            all_fields = pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]
        else:
            all_fields = pa.array([""] * rows, pa.string())
        has_field = pc.greater(pc.utf8_length(all_fields), 0)
        fields_text = pc.utf8_slice_codeunits(all_fields, 1)
        line = pc.binary_join_element_wise(*pieces, " ", fields_text, " ", time_text, "\n", "")
        without = pc.indices_nonzero(pc.invert(has_field)).to_pylist() if rows else []
        if without:
            line = pc.filter(line, has_field)
        return line, without


def _escape_literal(name: str, characters: str = ",= ", *, starts_line: bool = False) -> str:
    """A measurement, tag key or field key name, escaped; OptionError where it cannot be.

    A leading '#' matters only at the start of a line (the measurement): there it makes
    the line a comment.
    """
    if "\n" in name:
        raise OptionError(f"line protocol: the name {name!r} contains a newline", value=name)
    if re.search(AMBIGUOUS_BACKSLASH, name) or (starts_line and re.search(LINE_START, name)):
        raise OptionError(
            f"line protocol: the name {name!r} cannot be written unambiguously in line protocol "
            "(a backslash at its end or before a backslash, comma, equals sign or space"
            + (", or a leading '#' or whitespace" if starts_line else "")
            + "); rename it",
            value=name,
        )
    for character in characters:
        name = name.replace(character, "\\" + character)
    return name


#: what a measurement may not start with: '#' makes the line a comment, and InfluxDB's
#: parsers drop leading whitespace and NUL (a point would land in another measurement)
LINE_START = r"^[#\t\n\v\f\r \x00]"  # the same characters in Python's re and in RE2

#: InfluxDB's timestamp column: a tag or field of this name is dropped silently (1.x) or
#: clashes with the time column (3.x)
TIME_KEY = "time"


def check_not_time(tags: Sequence[str], fields: Sequence[str]) -> None:
    """OptionError for a tag or field named ``time`` (InfluxDB 1.x accepts such a write
    and drops the tag or field silently; in InfluxDB 3 ``time`` is the time column)."""
    for kind, names in (("tag", tags), ("field", fields)):
        if TIME_KEY in names:
            raise OptionError(
                f"line protocol: a {kind} cannot be named 'time' (InfluxDB's time column; InfluxDB "
                f"1.x drops such a {kind} silently): rename the column in Spark, or leave it "
                f"out with {kind}s_keys",
                option=f"{kind}s_keys",
                value=TIME_KEY,
            )


def escape_name(name: str) -> str:
    """A tag or field key escaped for line protocol; OptionError where it cannot be."""
    return _escape_literal(name)


def check_names(tags: Sequence[str], fields: Sequence[str]) -> None:
    check_not_time(tags, fields)
    overlap = sorted(set(tags) & set(fields))
    if overlap:
        raise OptionError(
            f"line protocol: {', '.join(map(repr, overlap))} cannot be both a tag and a field; "
            "remove it from tags_keys or fields_keys",
            option="tags_keys",
            value=",".join(overlap),
        )


def gzip_body(body: bytes) -> bytes:
    """``body`` as a gzip stream at level 1: about 9x faster than level 9 (influxdb3-python's),
    for a slightly larger body."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
    return compressor.compress(body) + compressor.flush()
