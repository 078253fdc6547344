"""Arrow to PostgreSQL, without a server: which rows go to which table, and the bytes of
one ``COPY ... FROM STDIN`` (PostgreSQL's binary format, or CSV).

Binary COPY is encoded from Arrow by ``pgpq`` (no Python per row) and is about twice as
fast end to end as CSV (docs/benchmarks.md). A binary COPY field is read by the
receiving column's own binary reader, so every column is first cast to the Arrow type
whose encoding is exactly the column's type:

==============================  ==========================================
PostgreSQL column               Arrow sent (from a compatible source)
==============================  ==========================================
smallint / integer / bigint     int16 / int32 / int64
real / double precision         float32 / float64
numeric                         decimal128 (from decimals and integers)
boolean                         bool
text, varchar(n), char(n)       string (the column's length limit applies)
json / jsonb                    string (JSON text) / jsonb
bytea                           binary
date                            date32
timestamp[tz]                   timestamp (microseconds)
==============================  ==========================================

Any other pair (a float into ``numeric``, a date into a timestamp column, text into
``uuid``, ``citext`` or an enum, a decimal wider than 38 digits...) sends the whole
COPY as CSV instead, as does an encoder failure or a missing ``pgpq``: the server then
converts the text as usual. The fallback is counted in the receipt
(``copy_csv_fallbacks``) and never fails a task by itself.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from quixsinks.core.batch import SinkBatch
from quixsinks.core.errors import RecordError

from .schema import (
    DELETE_COLUMN,
    JSON_NUL,
    ROW_COLUMN,
    Column,
    check_no_nul,
    column_arrays,
    has_nul,
    identifier_problem,
    is_json_source,
    json_text,
    sql_text,
    unchecked_json_text,
)

__all__ = ["CopyData", "copy_data", "delete_flags", "discard", "nul_rows", "route"]

logger = logging.getLogger("quixsinks.sinks.postgresql")
_CSV = pa_csv.WriteOptions(include_header=False, quoting_style="needed")
_FIXED: dict[str, pa.DataType] = {
    "smallint": pa.int16(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "real": pa.float32(),
    "double precision": pa.float64(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "bytea": pa.binary(),
}
_TEXT = ("text", "character varying", "character", "json")


def route(
    batch: SinkBatch, column_name: str, refuse: Callable[[int, BaseException], None]
) -> list[tuple[str, pa.Array]]:
    """(table name, row indices) for each table the text column ``column_name`` names. A
    row whose table name is null, not UTF-8, or a name PostgreSQL cannot keep as given
    goes to ``refuse`` (``batch.refuse``: as on_error says) and is left out."""
    names = batch.column(column_name)
    if pa.types.is_binary(names.type) or pa.types.is_large_binary(names.type):
        try:
            names = pc.cast(names, pa.string())
        except pa.ArrowInvalid:
            texts: list[str | None] = []
            for row, raw in enumerate(names.to_pylist()):
                try:
                    texts.append(None if raw is None else raw.decode("utf-8"))
                except UnicodeDecodeError:
                    refuse(row, _name_error(column_name, "holds bytes that are not UTF-8"))
                    texts.append(None)
            names = pa.array(texts, pa.string())
    else:
        names = pc.cast(names, pa.string())
    for row in pc.indices_nonzero(pc.is_null(batch.column(column_name))).to_pylist():
        refuse(row, _name_error(column_name, "is null: every row must name its table"))
    out = []
    for name in pc.unique(pc.drop_null(names)).to_pylist():
        rows = pc.indices_nonzero(pc.fill_null(pc.equal(names, name), False))
        problem = identifier_problem(name)
        if problem:
            for row in rows.to_pylist():
                what = f"names a table PostgreSQL cannot keep as given in row {row}: {problem}"
                refuse(row, _name_error(column_name, what))
            continue
        out.append((name, rows))
    return out


def _name_error(column_name: str, what: str) -> RecordError:
    return RecordError(
        f"postgresql: 'table_name_column' {column_name!r} {what}", column=column_name
    )


def discard(
    batch: SinkBatch,
    columns: list[Column],
    kept: list[Column],
    rows: pa.Array | None,
    *,
    whole_rows: bool,
) -> pa.Array | None:
    """The rows to write when the table lacks some ``columns``: all of them when only the
    values are discarded (those columns are not written), only the rows without a value
    in any of them for ``whole_rows`` (schema_contract discard_row). Counted in the batch."""
    names = {c.name for c in kept}
    dropped = [c for c in columns if c.name not in names]
    batch.count("discarded_columns", len(dropped))
    if not whole_rows:
        return rows
    arrays = column_arrays(batch, dropped)
    mask = None
    for array in arrays.values():
        empty = pc.is_null(array)
        mask = empty if mask is None else pc.and_(mask, empty)
    assert mask is not None
    keep = pc.indices_nonzero(mask) if rows is None else rows.filter(mask.take(rows))
    total = batch.num_rows if rows is None else len(rows)
    batch.count("skipped_discard_row", total - len(keep))
    return keep if len(keep) < total else rows


def nul_rows(
    batch: SinkBatch, columns: Sequence[Column], rows: pa.Array, key_text_format: str = "utf8"
) -> dict[int, str]:
    """The rows (of ``rows``, indices into the batch's table) whose value in one of
    ``columns`` holds a NUL character, which PostgreSQL text, json and jsonb refuse (in a
    JSON column: its escape too), each with the first such column. Run only once the
    encoder has met one."""
    found: dict[int, str] = {}
    for name, array in column_arrays(batch, columns, rows, key_text_format).items():
        pg = next(c.pg_type for c in columns if c.name == name).split("(")[0]
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        t = array.type
        if pg in ("json", "jsonb") or is_json_source(t) or pa.types.is_null(t):
            strict = pg in ("json", "jsonb")
            hit = has_nul(unchecked_json_text(array), JSON_NUL if strict else None)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            hit = has_nul(array)
        else:
            continue
        for row in rows.filter(pc.fill_null(hit, False)).to_pylist():
            found.setdefault(int(row), name)
    return dict(sorted(found.items()))


def delete_flags(batch: SinkBatch, column_name: str) -> pa.Array:
    """Per row: whether it deletes its key (the column true, or 'd'/'delete' in any case)."""
    column = batch.column(column_name)
    if pa.types.is_boolean(column.type):
        flags = column
    else:
        text = pc.utf8_lower(pc.cast(column, pa.string()))
        flags = pc.is_in(text, pa.array(["d", "delete"]))
    return pc.fill_null(flags, False)


class CopyData:
    """One COPY's payload: ``fmt`` (``"binary"`` or ``"csv"``), the column names, bytes."""

    def __init__(self, fmt: str, columns: list[str], payload: bytes) -> None:
        self.fmt = fmt
        self.columns = columns
        self.payload = payload

    def stream(self) -> io.BytesIO:
        return io.BytesIO(self.payload)


def copy_data(
    batch: SinkBatch,
    columns: Sequence[Column],
    rows: pa.Array | None = None,
    first_row: int | None = None,
    *,
    delete: pa.Array | None = None,
    binary: bool = True,
    key_text_format: str = "utf8",
) -> CopyData:
    """The COPY payload filling ``columns`` (and ROW_COLUMN from ``first_row``) with the
    batch's rows (those at ``rows``, when given), and DELETE_COLUMN from ``delete``
    (one flag per row of the batch); binary where every column allows it. A binary key
    into a text column is its text (``key_text_format``)."""
    arrays = column_arrays(batch, columns, rows, key_text_format)
    if first_row is not None:
        n = batch.num_rows if rows is None else len(rows)
        arrays[ROW_COLUMN] = pa.array(range(first_row, first_row + n), pa.int64())
    if delete is not None:
        arrays[DELETE_COLUMN] = delete if rows is None else delete.take(rows)
    types = {c.name: c.pg_type for c in columns}
    types.setdefault(ROW_COLUMN, "bigint")
    types.setdefault(DELETE_COLUMN, "boolean")
    if binary:
        encoded = _binary(arrays, types)
        if encoded is not None:
            return CopyData("binary", list(arrays), encoded)
        batch.count("copy_csv_fallbacks")
    text = {name: sql_text(array, types[name], name) for name, array in arrays.items()}
    out = pa.BufferOutputStream()
    pa_csv.write_csv(pa.table(text), out, write_options=_CSV)
    return CopyData("csv", list(arrays), out.getvalue().to_pybytes())


def _binary(arrays: dict[str, pa.Array], types: dict[str, str]) -> bytes | None:
    try:
        from pgpq import ArrowToPostgresBinaryEncoder, encoders, schema
    except ImportError:
        logger.debug("pgpq is not installed: COPY as CSV")
        return None
    cast: dict[str, pa.Array] = {}
    builders: dict[str, Any] = {}
    for name, array in arrays.items():
        out = _binary_array(array, types[name], name)
        if out is None:
            logger.debug("column %r (%s, %s): COPY as CSV", name, array.type, types[name])
            return None
        cast[name] = out
        if types[name].split("(")[0] == "jsonb":
            builders[name] = encoders.StringEncoderBuilder.new_with_output(
                pa.field(name, pa.string()), schema.Jsonb()
            )
    table = pa.table(cast)
    try:
        for name in table.column_names:
            if name not in builders:
                builders[name] = ArrowToPostgresBinaryEncoder.infer_encoder(
                    table.schema.field(name)
                )
        encoder = ArrowToPostgresBinaryEncoder.new_with_encoders(table.schema, builders)
        parts = [encoder.write_header()]
        parts.extend(encoder.write_batch(b) for b in table.to_batches())
        parts.append(encoder.finish())
    except Exception as exc:  # pgpq raises plain exceptions; CSV can still say what is wrong
        logger.debug("binary COPY encoding failed (%s): COPY as CSV", exc)
        return None
    return b"".join(parts)


def _binary_array(array: pa.Array, pg: str, name: str) -> pa.Array | None:
    """``array`` as the Arrow type whose binary encoding is exactly ``pg``; None if none."""
    t = array.type
    if pa.types.is_dictionary(t):
        return _binary_array(array.dictionary_decode(), pg, name)
    base = pg.split("(")[0]
    if base in ("jsonb", "json") or is_json_source(t) or pa.types.is_null(t):
        if base not in ("jsonb", "json", "text"):
            return None
        return json_text(array, name, strict=base != "text")
    fixed = _FIXED.get(base)
    if fixed is not None:
        return _cast(array, fixed, base, t)
    if base in _TEXT:
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return None
        check_no_nul(array, name)
        return pc.cast(array, pa.string())
    if base.startswith("timestamp"):
        if not pa.types.is_timestamp(t):
            return None
        return pc.cast(array, pa.timestamp("us", t.tz))
    if base == "numeric":
        if pa.types.is_decimal(t) and not pa.types.is_decimal256(t):  # 32, 64 and 128 bits
            return pc.cast(array, pa.decimal128(38, t.scale)) if t.precision <= 38 else None
        if pa.types.is_integer(t):
            return pc.cast(array, pa.decimal128(38, 0))
    return None


_SOURCES: dict[str, Callable[[pa.DataType], bool]] = {
    "smallint": pa.types.is_integer,
    "integer": pa.types.is_integer,
    "bigint": pa.types.is_integer,
    "real": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "double precision": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "boolean": pa.types.is_boolean,
    "date": pa.types.is_date,
    "bytea": lambda t: (
        pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
    ),
}


def _cast(array: pa.Array, to: pa.DataType, base: str, t: pa.DataType) -> pa.Array | None:
    if not _SOURCES[base](t):
        return None
    try:
        return pc.cast(array, to)  # safe: the column took these values losslessly (compatible)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
