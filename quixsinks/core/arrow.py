"""Small Arrow helpers shared by the record model and the formats."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["as_binary", "first_null", "first_true", "join_lines"]


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
