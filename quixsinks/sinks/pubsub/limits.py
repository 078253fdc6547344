"""Pub/Sub's limits on attributes and ordering keys, checked before a message is published.

Pub/Sub refuses a whole publish request (INVALID_ARGUMENT) when one of its messages
breaks a limit, after the task's earlier requests went out; so every message of a
SinkBatch is checked first, and the first offender is named by its row and attribute:

- at most 100 attributes per message (the sink's dedupe attribute included);
- an attribute name: 1 to 256 bytes (UTF-8), not starting with ``goog``;
- an attribute value: at most 1024 bytes;
- an ordering key: at most 1024 bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_true
from quixsinks.core.errors import RecordError

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_NAME_BYTES",
    "MAX_ORDERING_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "check_attribute_arrays",
    "check_attribute_rows",
    "check_ordering_keys",
    "name_problem",
]

MAX_ATTRIBUTES = 100
MAX_NAME_BYTES = 256
MAX_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024


def name_problem(name: str) -> str | None:
    """Why Pub/Sub refuses ``name`` as an attribute name, or None."""
    size = len(name.encode("utf-8"))
    if size == 0:
        return "an attribute name cannot be empty"
    if size > MAX_NAME_BYTES:
        return (
            f"the attribute name {name[:40]!r}... is {size} bytes; Pub/Sub takes at most "
            f"{MAX_NAME_BYTES}"
        )
    if name.startswith("goog"):
        return f"the attribute name {name!r} starts with 'goog', which Pub/Sub reserves"
    return None


def _value_error(name: str, value: str, row: int) -> RecordError:
    size = len(value.encode("utf-8"))
    return RecordError(
        f"pubsub: attribute {name!r} of row {row} is {size} bytes ({value[:40]!r}...); "
        f"Pub/Sub takes at most {MAX_VALUE_BYTES} bytes per attribute value: shorten it, or "
        "send it in the message data",
        column=name,
        row=row,
    )


def check_attribute_arrays(
    arrays: Mapping[str, pa.Array], extra: Sequence[int] | None, row0: int
) -> None:
    """RecordError for the first value of the column-built attributes (``arrays``: name ->
    text per row, null: not set) over the value limit, or for a message with more than
    :data:`MAX_ATTRIBUTES` attributes counting ``extra`` (per row, the attributes added
    from headers or a map column) and the dedupe attribute."""
    counts: pa.Array | None = None
    for name, texts in arrays.items():
        problem = name_problem(name)
        if problem:
            raise RecordError(f"pubsub: {problem}", column=name, row=row0)
        row = first_true(pc.greater(pc.binary_length(texts), MAX_VALUE_BYTES))
        if row is not None:
            raise _value_error(name, texts[row].as_py(), row0 + row)
        present = pc.cast(pc.is_valid(texts), pa.int32())
        counts = present if counts is None else pc.add(counts, present)
    if counts is None:
        return
    if extra is not None:
        counts = pc.add(counts, pa.array(extra, pa.int32()))
    row = first_true(pc.greater(counts, MAX_ATTRIBUTES - 1))
    if row is not None:
        raise RecordError(
            f"pubsub: row {row0 + row} has {counts[row].as_py() + 1} attributes (the dedupe "
            f"attribute included); Pub/Sub takes at most {MAX_ATTRIBUTES} per message",
            row=row0 + row,
        )


def check_attribute_rows(rows: Sequence[Mapping[str, str]], row0: int) -> None:
    """RecordError for the first attribute (from headers or a map column) whose name or
    value Pub/Sub would refuse, or a message with too many."""
    for i, attributes in enumerate(rows):
        if len(attributes) > MAX_ATTRIBUTES - 1:
            raise RecordError(
                f"pubsub: row {row0 + i} has {len(attributes) + 1} attributes (the dedupe "
                f"attribute included); Pub/Sub takes at most {MAX_ATTRIBUTES} per message",
                row=row0 + i,
            )
        for name, value in attributes.items():
            problem = name_problem(name)
            if problem:
                raise RecordError(f"pubsub: row {row0 + i}: {problem}", column=name, row=row0 + i)
            if len(value) > MAX_VALUE_BYTES // 4 and len(value.encode("utf-8")) > MAX_VALUE_BYTES:
                raise _value_error(name, value, row0 + i)


def check_ordering_keys(keys: pa.Array, name: str, row0: int) -> None:
    """RecordError for the first ordering key over :data:`MAX_ORDERING_KEY_BYTES`."""
    row = first_true(pc.greater(pc.binary_length(keys), MAX_ORDERING_KEY_BYTES))
    if row is not None:
        value = keys[row].as_py()
        raise RecordError(
            f"pubsub: the ordering key of row {row0 + row} (column {name!r}) is "
            f"{len(value.encode('utf-8'))} bytes ({value[:40]!r}...); Pub/Sub takes at most "
            f"{MAX_ORDERING_KEY_BYTES}",
            column=name,
            row=row0 + row,
        )
