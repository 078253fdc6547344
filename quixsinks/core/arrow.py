"""Small Arrow helpers shared by the record model and the formats."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .errors import RecordError

__all__ = [
    "as_binary",
    "concat_rows",
    "first_null",
    "first_true",
    "floor_time",
    "join_lines",
    "nearest_float",
    "returned_bytes",
    "serialize_each",
    "uint16_be",
    "varints",
]

#: a literal (the same bytes or text in every row) or an array of one value per row
RowPiece = Any

#: from this many pieces on (after fusing literals), rows are concatenated by one ``take``
#: of every piece's values in row order: one copy per value, where the element-wise join
#: kernel pays more per argument and row (measured: half the time for 3 to 6 pieces,
#: 0.7x for a Redis MSET's 15)
TAKE_MIN_PIECES = 3


#: timestamp units, coarsest first, and their names in ``floor_temporal``
TIME_UNITS = ("s", "ms", "us", "ns")
_TEMPORAL = {"s": "second", "ms": "millisecond", "us": "microsecond", "ns": "nanosecond"}


def floor_time(column: pa.Array, unit: str) -> pa.Array:
    """A timestamp column floored to whole ``unit`` (``s``, ``ms``, ``us``, ``ns``; also
    before 1970) and cast to that unit, its zone kept.

    Floored on the UTC instants: pyarrow's ``floor_temporal`` on a zoned column works in
    local time and raises "Local time is ambiguous" for every time in a daylight-saving
    fall-back hour (Spark hands Python the session's zone), and whole seconds or finer
    need no calendar."""
    t = column.type
    naive = column.cast(pa.timestamp(t.unit)) if t.tz is not None else column
    if TIME_UNITS.index(t.unit) > TIME_UNITS.index(unit):
        naive = pc.floor_temporal(naive, unit=_TEMPORAL[unit])
    floored = pc.cast(naive, pa.timestamp(unit), safe=False)
    return floored.cast(pa.timestamp(unit, t.tz)) if t.tz is not None else floored


def nearest_float(column: pa.Array) -> pa.Array:
    """A decimal column as float64, each value the double nearest to it (through its text:
    pyarrow's decimal-to-float cast is off by one unit in the last place for about one
    value in eight of decimal(10,2)); any other column as it is."""
    if not pa.types.is_decimal(column.type):
        return column
    return pc.cast(pc.cast(column, pa.string()), pa.float64())


def as_binary(array: pa.Array) -> pa.Array:
    """A string or binary array as ``binary`` (zero-copy for string)."""
    if pa.types.is_binary(array.type):
        return array
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        return pc.cast(pc.cast(array, pa.large_binary()), pa.binary())
    return pc.cast(array, pa.binary())


def join_lines(array: pa.Array, terminator: bytes = b"\n") -> pa.Buffer:
    """Concatenate every value followed by ``terminator`` into one buffer, in C.

    With an empty terminator the values' data buffer is sliced, without a copy.

    Null values must have been filled before; an empty array gives an empty buffer.
    """
    if len(array) == 0:
        return pa.py_buffer(b"")
    if array.null_count:
        raise ValueError("join_lines: fill nulls first")
    lines = as_binary(array)
    if terminator:
        lines = pc.binary_join_element_wise(lines, terminator, b"")
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    _, offsets_buffer, data = lines.buffers()
    offsets = pa.Array.from_buffers(
        pa.int32(), len(lines) + 1, [None, offsets_buffer], offset=lines.offset
    )
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return data.slice(start, end - start)


def first_true(mask: pa.Array | pa.ChunkedArray) -> int | None:
    """The index of the first true value of a boolean array (nulls are not true), or None."""
    if not pc.any(mask).as_py():
        return None
    return int(pc.index(mask, True).as_py())


def first_null(array: pa.Array | pa.ChunkedArray) -> int | None:
    """The index of the first null of an array, or None."""
    return first_true(pc.is_null(array)) if array.null_count else None


def concat_rows(
    pieces: Sequence[RowPiece], rows: int, out_type: pa.DataType | None = None
) -> pa.Array:
    """Row-wise concatenation of ``pieces``: arrays of ``rows`` values and literals
    (``bytes`` or ``str``, the same in every row). A row is null where a piece is null.

    The result is ``out_type`` (default: binary for bytes literals or binary arrays, else
    string). Neighbouring literals are fused first. Many pieces without nulls are joined
    by one ``take`` when numpy is installed, else by the element-wise join kernel; both
    give the same values.
    """
    merged: list[RowPiece] = []
    for piece in pieces:
        if isinstance(piece, pa.ChunkedArray):
            piece = piece.combine_chunks()
        literal = isinstance(piece, (bytes, str))
        if literal and not piece:
            continue
        if literal and merged and isinstance(merged[-1], type(piece)):
            merged[-1] = merged[-1] + piece
        else:
            merged.append(piece)
    arrays = [p for p in merged if isinstance(p, pa.Array)]
    if out_type is None:
        binary = any(
            isinstance(p, bytes)
            or (
                isinstance(p, (pa.Array, pa.ChunkedArray))
                and (pa.types.is_binary(p.type) or pa.types.is_large_binary(p.type))
            )
            for p in pieces
        )
        out_type = pa.binary() if binary else pa.string()
    text = pa.types.is_string(out_type)
    if not arrays:
        joined = b"".join(_literals(merged))
        return pa.repeat(pa.scalar(joined.decode() if text else joined, out_type), rows)
    if rows and len(merged) >= TAKE_MIN_PIECES and not any(a.null_count for a in arrays):
        taken = _concat_by_take(merged, rows, out_type)
        if taken is not None:
            return taken
    # the join kernel takes one type: text stays text (no UTF-8 check), the rest binary
    args = [_join_argument(p, out_type) for p in merged]
    return pc.binary_join_element_wise(*args, pa.scalar("" if text else b"", out_type))


def _join_argument(piece: RowPiece, out_type: pa.DataType) -> Any:
    text = pa.types.is_string(out_type)
    if isinstance(piece, pa.Array):
        return pc.cast(piece, pa.string()) if text else as_binary(piece)
    if isinstance(piece, bytes):
        return pa.scalar(piece.decode() if text else piece, out_type)
    return pa.scalar(piece if text else piece.encode(), out_type)


def _concat_by_take(merged: list[RowPiece], rows: int, out_type: pa.DataType) -> pa.Array | None:
    """The rows of ``merged`` (no nulls) by one ``take`` in row order; None without numpy."""
    try:
        import numpy as np
    except ImportError:  # an optional speed-up: the core needs only pyarrow
        return None
    arrays = [as_binary(p) for p in merged if isinstance(p, pa.Array)]
    values = pa.concat_arrays([*arrays, pa.array(_literals(merged), pa.binary())])
    width = len(merged)
    order = np.empty((rows, width), np.int64)
    row = np.arange(rows, dtype=np.int64)
    base, literal = 0, len(arrays) * rows
    for column, piece in enumerate(merged):
        if isinstance(piece, pa.Array):
            np.add(row, base, out=order[:, column])
            base += rows
        else:
            order[:, column] = literal
            literal += 1
    taken = values.take(pa.array(order.reshape(-1)))
    _, offsets, data = taken.buffers()
    starts = np.frombuffer(offsets, np.int32, count=rows * width + 1, offset=4 * taken.offset)
    return pa.Array.from_buffers(
        out_type, rows, [None, pa.py_buffer(np.ascontiguousarray(starts[::width])), data]
    )


def _literals(pieces: list[RowPiece]) -> list[bytes]:
    return [p.encode() if isinstance(p, str) else p for p in pieces if not isinstance(p, pa.Array)]


def varints(lengths: pa.Array) -> pa.Array:
    """Each non-negative integer as a base-128 varint (binary), vectorised: low 7 bits
    first, the high bit set on every byte but the last. The encoding of protobuf's
    varints and of MQTT's variable byte integers alike. Needs numpy."""
    import numpy as np  # the extras of the sinks that call this bring it

    x = np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.uint64)
    n = np.ones(len(x), np.int32)
    for k in range(1, 5):
        n += (x >= np.uint64(1 << (7 * k))).astype(np.int32)
    offsets = np.zeros(len(x) + 1, np.int32)
    np.cumsum(n, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), np.uint8)
    starts = offsets[:-1]
    for k in range(5):
        mask = n > k
        if not mask.any():
            break
        byte = (x[mask] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (n[mask] > k + 1).astype(np.uint64) << np.uint64(7)
        out[starts[mask] + k] = (byte | more).astype(np.uint8)
    return pa.Array.from_buffers(
        pa.binary(), len(x), [None, pa.py_buffer(offsets), pa.py_buffer(out)]
    )


def uint16_be(values: pa.Array) -> pa.Array:
    """Each integer in 0..65535 as two bytes, big-endian (binary), vectorised. Needs numpy."""
    import numpy as np

    x = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.uint16)
    out = x.astype(">u2").tobytes()
    offsets = np.arange(0, 2 * len(x) + 1, 2, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(), len(x), [None, pa.py_buffer(offsets), pa.py_buffer(out)]
    )


def serialize_each(
    fn: Callable[[Any], Any],
    values: Sequence[Any],
    *,
    sink: str,
    option: str,
    first_row: int = 0,
    nulls: bool = False,
) -> pa.Array:
    """``fn`` (a user's ``value_serializer``) called on each value, as a binary array (see
    :func:`returned_bytes`). Give it :meth:`SinkBatch.messages` so that it sees what a
    Quix app's serializer sees: ``json:dumps`` then writes Quix's bytes exactly. An
    exception is a RecordError naming the option and the row (a row-level refusal)."""
    out: list[Any] = []
    for i, value in enumerate(values):
        try:
            out.append(fn(value))
        except Exception as exc:
            raise RecordError(
                f"{sink}: {option!r} failed on row {first_row + i}: {type(exc).__name__}: {exc}",
                row=first_row + i,
            ) from exc
    return returned_bytes(out, sink=sink, option=option, first_row=first_row, nulls=nulls)


def returned_bytes(
    values: Sequence[Any], *, sink: str, option: str, first_row: int = 0, nulls: bool = False
) -> pa.Array:
    """What a user's callable (``value_serializer``, ``key_serializer``...) returned for each
    row, as a binary array: str is UTF-8 encoded, bytes kept, None kept where ``nulls``;
    anything else is a RecordError naming the option, the type and the row."""
    out: list[bytes | None] = []
    for i, value in enumerate(values):
        if isinstance(value, bytes) or (value is None and nulls):
            out.append(value)
        elif isinstance(value, str):
            out.append(value.encode())
        else:
            raise RecordError(
                f"{sink}: {option!r} returned {type(value).__name__} for row {first_row + i}; "
                "it must return str or bytes",
                row=first_row + i,
            )
    return pa.array(out, pa.binary())
