"""File formats: JSON Lines, Parquet and CSV, serialised from Arrow without per-row Python.

A :class:`Format` turns a :class:`~quixsinks.core.batch.SinkBatch` into the bytes of
a file (or of a piece appended to one). The record layout follows Quix Streams:

=========  ============================================================================
format     layout of one record
=========  ============================================================================
JSON       ``{"_timestamp": <ms>, "_key": <key>, "_value": {<value columns>}}`` per line
Parquet    columns ``_timestamp`` (int64 ms), ``_key`` + one column per value column
CSV        columns ``key, value, timestamp, topic, partition, offset`` (value as JSON)
=========  ============================================================================

Keys are written as themselves: text keys as strings; binary keys decoded as UTF-8 in
JSON and CSV, kept binary in Parquet (Quix wrote the Python repr of non-bytes keys; we do
not); in CSV, a struct, map or list key is its JSON text. Values are written the same way
at every depth of nesting (see :func:`json_column`): decimals as JSON numbers with their
exact digits, non-finite floats as ``null``, timestamps ISO 8601 (``Z`` for instants),
binary base64; a JSON value (a Kafka ``value``) is written as the producer wrote it.

``quix_compat`` (every format) writes Quix Streams' record shapes instead, see
:func:`quix_json_dumps`, :func:`quix_key_texts` and the formats' docstrings.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import gzip
import io
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, ClassVar, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from .arrow import as_binary, concat_rows, join_lines, serialize_each
from .batch import SinkBatch
from .errors import InvalidFormatError, RecordError, format_allowed
from .records import finite, strict_json_texts

__all__ = [
    "CSVFormat",
    "Format",
    "JSONFormat",
    "ParquetFormat",
    "json_column",
    "json_objects",
    "json_pieces",
    "non_utf8_rows",
    "quix_csv_dumps",
    "quix_json_dumps",
    "quix_key_texts",
    "resolve_format",
    "value_json_texts",
]

ParquetCompression = Literal["snappy", "none", "gzip", "brotli", "lz4", "zstd"]
PARQUET_COMPRESSIONS: tuple[str, ...] = ("snappy", "none", "gzip", "brotli", "lz4", "zstd")
CSV_DIALECTS: tuple[str, ...] = ("excel", "excel-tab", "unix")


class Format(ABC):
    """How records become file content.

    Attributes:
        file_extension: appended to every file name, dot included.
        appendable: pieces can be appended to an existing file and stay one valid file.
    """

    file_extension: str
    appendable: bool

    #: rows serialised at a time by :meth:`write_to`, bounding the memory it needs
    chunk_rows: ClassVar[int] = 65_536

    @abstractmethod
    def encode(self, batch: SinkBatch) -> bytes | pa.Buffer:
        """The content of ``batch`` (no header, no compression)."""

    def serialize(self, batch: SinkBatch) -> bytes:
        """The bytes of ``batch`` as they go into a file (without any header)."""
        out = io.BytesIO()
        self.write_to(batch, out)
        return out.getvalue()

    def write_to(self, batch: SinkBatch, out: BinaryIO) -> None:
        """Stream ``batch`` into ``out`` in chunks of :attr:`chunk_rows` rows."""
        for chunk in batch.iter_chunks(self.chunk_rows):
            out.write(self.encode(chunk))

    def header(self) -> bytes:
        """Bytes that start a new file (CSV's header line); empty for most formats."""
        return b""


# ----------------------------------------------------------------------------- JSON


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _dumps_row(value: Any) -> str:
    """One value as JSON text, the way the vectorised encoder would write it."""
    try:
        return json.dumps(value, default=_json_default, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere inside
        return json.dumps(finite(value), default=_json_default, ensure_ascii=False)


_CONTROL = r"[\x00-\x07\x0b\x0e-\x1f]"
_ESCAPES = (
    ("\\", "\\\\"),
    ('"', '\\"'),
    ("\n", "\\n"),
    ("\r", "\\r"),
    ("\t", "\\t"),
    ("\b", "\\b"),
    ("\f", "\\f"),
)

# A JSON text piece: a literal or an array of text, one value per row, never null.
Piece = Any


def _needs_escape(column: pa.Array) -> bool:
    """Whether a utf8 (int32 offsets) column holds a quote, a backslash or a control
    character. Bytes under null slots count too: a false alarm only takes the exact path.

    A byte scan (two memchr and one minimum) instead of a regex, many times faster; most
    text needs no escaping.
    """
    if not len(column):
        return False
    offsets = pa.Array.from_buffers(
        pa.int32(), len(column) + 1, [None, column.buffers()[1]], offset=column.offset
    )
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    if end == start:
        return False
    data = column.buffers()[2].slice(start, end - start)
    text = data.to_pybytes()
    if b'"' in text or b"\\" in text:
        return True
    return bool(pc.min(pa.Array.from_buffers(pa.uint8(), end - start, [None, data])).as_py() < 0x20)


def _escaped(column: pa.Array) -> pa.Array | None:
    """A utf8 column escaped for a JSON string body, or None if a row needs per-row dumps.

    The common case, text with nothing to escape, costs one byte scan.
    """
    if not _needs_escape(column):
        return column
    if pc.any(pc.match_substring_regex(column, _CONTROL)).as_py():
        return None
    for raw, replacement in _ESCAPES:
        column = pc.replace_substring(column, raw, replacement)
    return column


def json_pieces(column: pa.Array) -> list[Piece]:
    """Pieces whose row-wise concatenation is each value of ``column`` as JSON text.

    A string column without nulls gives ``['"', escaped, '"']`` so that callers build
    whole lines in one join instead of copying the text once per nesting level.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)) and (
        column.null_count == 0
    ):
        escaped = _escaped(pc.cast(column, pa.string()))
        if escaped is not None:
            return ['"', escaped, '"']
    return [json_column(column)]


def _json_strings(column: pa.Array) -> pa.Array:
    """JSON string literals for a utf8 column (nulls stay null)."""
    escaped = _escaped(column)
    if escaped is None:
        return pa.array(
            [None if v is None else _dumps_row(v) for v in column.to_pylist()], pa.string()
        )
    return pc.binary_join_element_wise('"', escaped, '"', "")


def json_column(column: pa.Array) -> pa.Array:
    """Each value of ``column`` as JSON text, ``null`` for nulls; vectorised, nested types too.

    Every value is written the same way at any depth: integers and decimals as numbers
    with their exact digits, floats as their shortest text (NaN and infinities as
    ``null``), timestamps as ISO 8601 strings (``Z`` for an instant), dates as ISO
    strings, binary as base64 strings, structs and maps as objects (map keys as the
    JSON text of the key, in a string when it is not one), lists as arrays.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return pc.fill_null(_json_text(column), "null")


def _decimal_text(column: pa.Array) -> pa.Array:
    """Decimals as plain digits (``-0.000000000000000001``), never exponent notation.

    Older pyarrow (15, for one) casts small decimals to strings such as ``-1.E-18``: not
    JSON. Those few values are formatted by Python's decimal module instead.
    """
    text = pc.cast(column, pa.string())
    exponent = pc.fill_null(pc.match_substring(text, "E"), False)
    if not pc.any(exponent).as_py():
        return text
    fixed = [None if v is None else format(v, "f") for v in pc.filter(column, exponent).to_pylist()]
    return pc.replace_with_mask(text, exponent, pa.array(fixed, pa.string()))


def _json_text(column: pa.Array) -> pa.Array:
    """JSON text per value; null where the value is null."""
    t = column.type
    n = len(column)
    if pa.types.is_null(t):
        return pa.nulls(n, pa.string())
    if pa.types.is_dictionary(t):
        return _json_text(column.dictionary_decode())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _json_strings(pc.cast(column, pa.string()))
    if pa.types.is_decimal(t):
        return _decimal_text(column)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return pc.cast(column, pa.string())
    if pa.types.is_floating(t):
        numbers = pc.is_finite(column)
        return pc.if_else(numbers, pc.cast(column, pa.string()), pa.scalar(None, pa.string()))
    if pa.types.is_timestamp(t):
        if t.tz:
            column = pc.cast(column, pa.timestamp(t.unit, "UTC"))
        text = pc.strftime(column, "%Y-%m-%dT%H:%M:%S")
        suffix = "Z" if t.tz else ""
        return pc.binary_join_element_wise('"', text, suffix + '"', "")
    if pa.types.is_date(t):
        return pc.binary_join_element_wise('"', pc.cast(column, pa.string()), '"', "")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        encoded = [
            None if v is None else '"' + base64.b64encode(v).decode("ascii") + '"'
            for v in column.to_pylist()
        ]
        return pa.array(encoded, pa.string())
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            text = pa.array(["{}"] * n, pa.string())
        else:
            pieces: list[Piece] = []
            for index, child in enumerate(column.flatten()):
                name = json.dumps(t.field(index).name, ensure_ascii=False)
                pieces += [("{" if index == 0 else ",") + name + ":", json_column(child)]
            text = concat_rows([*pieces, "}"], n)
        return pc.if_else(pc.is_valid(column), text, pa.scalar(None, pa.string()))
    if pa.types.is_map(t):
        entries = column.cast(pa.list_(pa.struct([t.key_field, t.item_field]))).flatten()
        keys = _json_text(entries.field(0))
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            keys = _json_strings(keys)  # an object key is a string: the key's JSON text
        items = json_column(entries.field(1))
        return _join_lists(column, pc.binary_join_element_wise(keys, items, ":"), "{", "}")
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _join_lists(column, json_column(column.flatten()), "[", "]")
    return pa.array([None if v is None else _dumps_row(v) for v in column.to_pylist()], pa.string())


def _join_lists(column: pa.Array, texts: pa.Array, opener: str, closer: str) -> pa.Array:
    """``opener`` + each list's element texts joined by commas + ``closer``; null for null."""
    if pa.types.is_fixed_size_list(column.type):
        size = column.type.list_size
        offsets = pa.array(range(0, (len(column) + 1) * size, size), pa.int32())
    else:
        offsets = column.offsets
        if len(offsets):
            offsets = pc.subtract(offsets, offsets[0])
        offsets = pc.cast(offsets, pa.int32())
    lists = pa.ListArray.from_arrays(offsets, pc.cast(texts, pa.string()))
    joined = pc.binary_join(lists, ",")
    text = pc.binary_join_element_wise(opener, joined, closer, "")
    return pc.if_else(pc.is_valid(column), text, pa.scalar(None, pa.string()))


def json_key_pieces(keys: pa.Array) -> list[Piece]:
    """Keys as JSON: binary keys decoded as UTF-8 (invalid bytes replaced), else as values."""
    if pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type):
        return json_pieces(decode_utf8(keys))
    return json_pieces(keys)


def csv_keys(keys: pa.Array) -> pa.Array:
    """Keys as CSV text: binary decoded as UTF-8, strings as they are, numbers as their text,
    times as ISO 8601, structs, maps and lists as JSON text; null stays null."""
    t = keys.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return decode_utf8(keys)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.cast(keys, pa.string())
    if pa.types.is_dictionary(t):
        return csv_keys(keys.dictionary_decode())
    if pa.types.is_null(t):
        return pa.nulls(len(keys), pa.string())
    if pa.types.is_nested(t):
        return pc.if_else(pc.is_valid(keys), json_column(keys), pa.scalar(None, pa.string()))
    if pa.types.is_temporal(t):  # ISO 8601, as in the value
        return pc.utf8_slice_codeunits(_json_text(keys), 1, -1)
    return pc.cast(keys, pa.string())


def decode_utf8(column: pa.Array) -> pa.Array:
    """Binary to string; invalid UTF-8 is decoded with replacement characters."""
    try:
        return pc.cast(column, pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if v is None else v.decode("utf-8", "replace") for v in column.to_pylist()],
            pa.string(),
        )


def decode_utf8_strict(column: pa.Array, what: str) -> pa.Array:
    """Binary to string; RecordError naming ``what`` and the row of the first value that
    is not UTF-8 (for names and keys, where a replacement character could make two
    different values one)."""
    try:
        return pc.cast(column, pa.string())
    except pa.ArrowInvalid:
        for row, value in enumerate(column.to_pylist()):
            if value is None:
                continue
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                raise RecordError(
                    f"{what} holds bytes that are not UTF-8 text in row {row} ({value[:40]!r}); "
                    "it must be text: decode or encode it (e.g. hex) in Spark",
                    row=row,
                ) from None
        raise


def non_utf8_rows(keys: pa.Array) -> list[int]:
    """The rows of a binary ``keys`` column whose bytes are not UTF-8 text (none for any
    other type): the keys Quix's ``bytes.decode()`` fails on."""
    if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
        return []
    try:
        pc.cast(keys, pa.string())
        return []
    except pa.ArrowInvalid:
        pass
    rows = []
    for row, value in enumerate(keys.to_pylist()):
        if value is None:
            continue
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            rows.append(row)
    return rows


def quix_key_texts(keys: pa.Array) -> pa.Array:
    """Keys the way Quix's CSVSink writes them with its default ``key_serializer=str``:
    Python's ``str()`` of each key as Spark gives it (``b'sensor-1'`` for a binary key,
    ``None`` for a null key)."""
    return pa.array([str(key) for key in keys.to_pylist()], pa.string())


_QUIX_JSON = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=lambda v: _json_default(v)
)


def quix_csv_dumps(value: Any) -> str:
    """A value as Quix's CSVSink writes it: ``json.dumps`` with its defaults (``", "``,
    ``": "``, ``ensure_ascii``); values JSON has no type for as in :func:`_json_default`."""
    return json.dumps(value, default=_json_default)


def quix_json_dumps(value: Any) -> str:
    """JSON text as Quix's FileSink writes a line (its ``jsonlines`` writer, ``compact``):
    ``json.dumps`` with ``ensure_ascii=False`` and no spaces; values JSON has no type for
    (column values only: dates, decimals, binary) as in :func:`_json_default`."""
    return _QUIX_JSON.encode(value)


def json_object_pieces(table: pa.Table, prefix: str = "") -> list[Piece]:
    """Pieces of one JSON object per row of ``table``, its columns as members."""
    if table.num_columns == 0:
        return [prefix + "{}"]
    pieces: list[Piece] = []
    for index, name in enumerate(table.column_names):
        opener = "{" if index == 0 else ","
        pieces.append(opener + json.dumps(name, ensure_ascii=False) + ":")
        pieces.extend(json_pieces(table.column(name)))
    pieces.append("}")
    return [prefix, *pieces]  # concat_rows fuses the neighbouring literals


def json_objects(table: pa.Table) -> pa.Array:
    """One JSON object per row of ``table``, its columns as members, built in C."""
    return concat_rows(json_object_pieces(table), table.num_rows)


def value_json_texts(batch: SinkBatch, *, one_line: bool = False) -> pa.Array:
    """Each row's value as JSON text (binary, never null): what a sink that writes the
    value as JSON writes.

    A JSON value (:attr:`SinkBatch.passthrough`) is the producer's own text, unchanged:
    the same keys in the same order, the same numbers (``-34``, ``1e-9``), the same
    escapes, and ``null`` for a tombstone. It was validated when the batch was parsed
    (a row that is not a JSON object never reaches a sink), and is never re-encoded, but
    for a row holding ``NaN`` or an infinity, which strict JSON readers refuse: that row
    is written compactly with ``null`` there (:func:`~quixsinks.core.records.strict_json_texts`).
    ``one_line``: carriage returns and line feeds become spaces (in valid JSON they can
    only be whitespace between tokens), for formats of one value per line.

    Value columns are encoded by :func:`json_objects`.
    """
    if not batch.passthrough:
        values = batch.values()
        if not values.num_columns:
            return pa.array([b"{}"] * batch.num_rows, pa.binary())
        return pc.cast(json_objects(values), pa.binary())
    text = strict_json_texts(as_binary(batch.column(batch.records.values[0])))
    if text.null_count:
        text = pc.fill_null(text, b"null")
    if one_line:
        text = pc.replace_substring(pc.replace_substring(text, b"\r", b" "), b"\n", b" ")
    return text


@dataclass(frozen=True)
class JSONFormat(Format):
    """JSON Lines: one ``{"_timestamp", "_key", "_value"}`` object per line.

    Args:
        file_extension: default ``.jsonl`` (``.gz`` is appended when compressed).
        compress: gzip each written piece (concatenated gzip members stay one valid file).
        dumps: a callable ``dict -> str`` replacing the built-in vectorised encoder
            (per-row Python: slower).
        quix_compat: each line as Quix's FileSink writes it (compact; the key and each
            message's own object by :func:`quix_json_dumps`): ``1e-09``, ``"ü"`` where
            the producer wrote ``1e-9``, ``"\\u00fc"``, the last of repeated keys;
            per-row Python. Binary keys must be UTF-8 text (the ``file`` sink refuses
            the rows whose keys are not, as Quix fails on them).
    """

    file_extension: str = ".jsonl"
    compress: bool = False
    dumps: Callable[[Any], str] | None = field(default=None, compare=False)
    appendable: bool = True
    quix_compat: bool = False

    def __post_init__(self) -> None:
        if self.compress and not self.file_extension.endswith(".gz"):
            object.__setattr__(self, "file_extension", self.file_extension + ".gz")

    def write_to(self, batch: SinkBatch, out: BinaryIO) -> None:
        if not self.compress:
            super().write_to(batch, out)
            return
        with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0) as zipped:
            super().write_to(batch, zipped)  # type: ignore[arg-type]

    def encode(self, batch: SinkBatch) -> bytes | pa.Buffer:
        if self.dumps is not None:
            lines = self._custom_lines(batch)
        elif self.quix_compat:
            lines = self._quix_lines(batch)
        else:
            pieces = [
                '{"_timestamp":',
                *json_pieces(batch.timestamps_ms()),
                ',"_key":',
                *json_key_pieces(batch.keys()),
                ',"_value":',
                *(
                    [value_json_texts(batch, one_line=True)]
                    if batch.passthrough
                    else json_object_pieces(batch.values())
                ),
                "}\n",
            ]
            lines = concat_rows(pieces, batch.num_rows)
        return join_lines(lines, b"")

    def _quix_lines(self, batch: SinkBatch) -> pa.Array:
        """Quix's lines: the key and a Kafka JSON value (each message's own object) by
        :func:`quix_json_dumps`; value columns (no Quix counterpart) as the built-in
        encoder writes them (decimals exact numbers, timestamps ISO 8601...)."""
        keys = batch.keys()
        if pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type):
            keys = decode_utf8(keys)
        key_texts = serialize_each(
            quix_json_dumps, keys.to_pylist(), sink="file", option="quix_compat"
        )
        if batch.passthrough:
            values = serialize_each(
                quix_json_dumps, batch.messages(), sink="file", option="quix_compat"
            )
        else:
            values = value_json_texts(batch)
        pieces = [
            '{"_timestamp":',
            *json_pieces(batch.timestamps_ms()),
            ',"_key":',
            key_texts,
            ',"_value":',
            values,
            "}\n",
        ]
        return concat_rows(pieces, batch.num_rows)

    def _custom_lines(self, batch: SinkBatch) -> pa.Array:
        assert self.dumps is not None
        out: list[str] = []
        for index, item in enumerate(batch):
            key = item.key.decode("utf-8", "replace") if isinstance(item.key, bytes) else item.key
            record = {"_timestamp": item.timestamp, "_key": key, "_value": item.value}
            try:
                out.append(self.dumps(record) + "\n")
            except Exception as exc:
                raise RecordError(f"row {index}: custom dumps failed: {exc}", row=index) from exc
        return pa.array(out, pa.string())


# ----------------------------------------------------------------------------- Parquet


@dataclass(frozen=True)
class ParquetFormat(Format):
    """Parquet: columns ``_timestamp`` (int64 ms), ``_key`` and the value columns.

    Args:
        file_extension: default ``.parquet``.
        compression: snappy (default), none, gzip, brotli, lz4 or zstd.
        conform: a callable ``table -> table`` applied before writing (the ``file`` sink
            keeps one type per column across a directory's files with it).
        quix_compat: ``_key`` as a string column, binary keys decoded as UTF-8, as Quix's
            FileSink writes it (by default a binary key stays binary: its bytes exactly).
    """

    file_extension: str = ".parquet"
    compression: str = "snappy"
    appendable: bool = False
    conform: Callable[[pa.Table], pa.Table] | None = field(default=None, compare=False)
    quix_compat: bool = False

    def __post_init__(self) -> None:
        if self.compression not in PARQUET_COMPRESSIONS:
            raise InvalidFormatError(
                f"unknown parquet compression {self.compression!r}; "
                f"expected {format_allowed(PARQUET_COMPRESSIONS)}",
                option="compression",
                value=self.compression,
                allowed=PARQUET_COMPRESSIONS,
            )

    def table(self, batch: SinkBatch) -> pa.Table:
        values = batch.values()
        keys = batch.keys()
        if self.quix_compat and (
            pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)
        ):
            keys = decode_utf8(keys)
        columns = {"_timestamp": batch.timestamps_ms(), "_key": keys}
        for name in values.column_names:
            if name in columns:
                raise RecordError(f"value column {name!r} clashes with a Quix column", column=name)
            columns[name] = values.column(name)
        table = pa.table(columns)
        return self.conform(table) if self.conform is not None else table

    def encode(self, batch: SinkBatch) -> bytes | pa.Buffer:
        out = pa.BufferOutputStream()
        pq.write_table(self.table(batch), out, compression=self.compression)
        return out.getvalue()

    def write_to(self, batch: SinkBatch, out: BinaryIO) -> None:
        pq.write_table(self.table(batch), out, compression=self.compression)


# ----------------------------------------------------------------------------- CSV


@dataclass(frozen=True)
class CSVFormat(Format):
    """CSV with Quix CSVSink's columns ``key, value, timestamp, topic, partition, offset``.

    Args:
        dialect: ``excel`` (``,`` and CRLF, the default), ``excel-tab`` or ``unix``
            (LF, every value quoted).
        key_serializer: ``key -> str`` replacing the default (UTF-8 text of the key).
        value_serializer: ``message -> str`` replacing the default (the value's JSON text);
            called with each message's own object (:meth:`SinkBatch.messages`).
        quix_compat: Quix CSVSink's bytes: keys by its default ``key_serializer=str``
            (:func:`quix_key_texts`), a Kafka JSON value by its default ``json.dumps`` of
            each message (value columns, which Quix has no counterpart of, as by default),
            rows by Python's csv writer (quotes only where needed). Per-row Python.
    """

    dialect: str = "excel"
    key_serializer: Callable[[Any], str] | None = field(default=None, compare=False)
    value_serializer: Callable[[Any], str] | None = field(default=None, compare=False)
    file_extension: str = ".csv"
    appendable: bool = True
    quix_compat: bool = False
    #: the sink named in a serializer's error
    sink_name: str = field(default="csvfile", compare=False)

    COLUMNS = ("key", "value", "timestamp", "topic", "partition", "offset")

    def __post_init__(self) -> None:
        if self.dialect not in CSV_DIALECTS:
            raise InvalidFormatError(
                f"unknown CSV dialect {self.dialect!r}; expected {format_allowed(CSV_DIALECTS)}",
                option="dialect",
                value=self.dialect,
                allowed=CSV_DIALECTS,
            )

    def _python_dialect(self) -> type[csv.Dialect]:
        return {"excel": csv.excel, "excel-tab": csv.excel_tab, "unix": csv.unix_dialect}[
            self.dialect
        ]

    def header(self) -> bytes:
        buffer = io.StringIO()
        csv.writer(buffer, dialect=self._python_dialect()).writerow(self.COLUMNS)
        return buffer.getvalue().encode("utf-8")

    def table(self, batch: SinkBatch) -> pa.Table:
        records = batch.records
        n = batch.num_rows
        if self.key_serializer is not None:
            keys = self._custom_keys(batch)
        elif self.quix_compat:
            keys = quix_key_texts(batch.keys())
        else:
            keys = csv_keys(batch.keys())
        if self.value_serializer is not None:
            values = self._custom_values(batch, self.value_serializer, "value_serializer")
        elif self.quix_compat and batch.passthrough:
            values = self._custom_values(batch, quix_csv_dumps, "quix_compat")
        else:
            values = decode_utf8(value_json_texts(batch))

        def meta(name: str | None, kind: pa.DataType) -> pa.Array:
            return batch.column(name) if name else pa.nulls(n, kind)

        return pa.table(
            {
                "key": keys,
                "value": values,
                "timestamp": batch.timestamps_ms(),
                "topic": meta(records.topic, pa.string()),
                "partition": meta(records.partition, pa.int32()),
                "offset": meta(records.offset, pa.int64()),
            }
        )

    def _custom_keys(self, batch: SinkBatch) -> pa.Array:
        assert self.key_serializer is not None
        keys: list[str | None] = []
        for index, key in enumerate(batch.keys().to_pylist()):
            try:
                keys.append(self.key_serializer(key))
            except Exception as exc:
                raise RecordError(f"row {index}: key serializer failed: {exc}", row=index) from exc
        return pa.array(keys, pa.string())

    def _custom_values(
        self, batch: SinkBatch, serializer: Callable[[Any], str], option: str
    ) -> pa.Array:
        texts = serialize_each(serializer, batch.messages(), sink=self.sink_name, option=option)
        return decode_utf8(texts)

    def encode(self, batch: SinkBatch) -> bytes | pa.Buffer:
        if batch.num_rows == 0:
            return b""
        if self.quix_compat:  # Python's csv writer, as Quix: quotes only where needed
            return python_csv_bytes(self.table(batch), self._python_dialect())
        return csv_bytes(self.table(batch), self._python_dialect())


#: pyarrow >= 26 writes any line terminator; older versions end every line with "\n"
_CSV_WRITER_EOL = hasattr(pa_csv.WriteOptions(), "eol")


def csv_bytes(table: pa.Table, dialect: type[csv.Dialect]) -> bytes | pa.Buffer:
    """``table`` as CSV rows (no header) in ``dialect``, by pyarrow's writer.

    Before pyarrow 26 the writer has no line-terminator option: for a dialect that does
    not end lines with "\n" (``excel``: "\r\n") the "\n"s are replaced, which is exact
    unless a value holds a newline; then the batch goes through Python's csv writer.
    """
    options: dict[str, Any] = {
        "include_header": False,
        "delimiter": dialect.delimiter,
        "quoting_style": "all_valid" if dialect.quoting == csv.QUOTE_ALL else "needed",
    }
    if _CSV_WRITER_EOL:
        options["eol"] = dialect.lineterminator
    out = pa.BufferOutputStream()
    pa_csv.write_csv(table, out, write_options=pa_csv.WriteOptions(**options))
    data = out.getvalue()
    if _CSV_WRITER_EOL or dialect.lineterminator == "\n":
        return data
    newline_inside = any(
        pc.any(pc.match_substring(column, "\n")).as_py()
        for column in table.columns
        if pa.types.is_string(column.type)
    )
    if not newline_inside:
        return data.to_pybytes().replace(b"\n", dialect.lineterminator.encode())
    return python_csv_bytes(table, dialect)


def python_csv_bytes(table: pa.Table, dialect: type[csv.Dialect]) -> bytes:
    """``table`` as CSV rows (no header) by Python's csv writer, a null an empty field."""
    buffer = io.StringIO()
    csv.writer(buffer, dialect=dialect).writerows(
        ["" if v is None else v for v in row.values()] for row in table.to_pylist()
    )
    return buffer.getvalue().encode("utf-8")


# ----------------------------------------------------------------------------- resolve

FORMAT_NAMES: tuple[str, ...] = ("json", "parquet", "csv")


def resolve_format(name: str | Format, **kwargs: Any) -> Format:
    """A :class:`Format` by name (``json``, ``parquet``, ``csv``) or passed through.

    Raises:
        InvalidFormatError: ``name`` is not a known format.
    """
    if isinstance(name, Format):
        return name
    factories: dict[str, Callable[..., Format]] = {
        "json": JSONFormat,
        "parquet": ParquetFormat,
        "csv": CSVFormat,
    }
    factory = factories.get(str(name).lower())
    if factory is None:
        raise InvalidFormatError(
            f"unknown format {name!r}; expected {format_allowed(FORMAT_NAMES)}",
            option="format",
            value=name,
            allowed=FORMAT_NAMES,
        )
    return factory(**kwargs)
