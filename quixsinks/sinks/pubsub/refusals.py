"""Rows the Pub/Sub sink refuses (``on_error``), found before their messages go out, and
messages Pub/Sub refuses one by one (INVALID_ARGUMENT for a publish request).

- :func:`encodable_rows`: when building a batch's messages raised a RecordError (a limit
  of :mod:`.wire`), the rows are built again in pieces, the row the error names (or, when
  it names none, halves) taken out, down to every row that cannot be a message; those are
  refused, the others are built once more for publishing, so that nothing of a refused row
  is published and the dedupe ids of the others are what a replay computes.
- :func:`deliver_isolating`: when a publish of several messages is refused for what one
  holds (a RecordError), the messages are published again in halves, down to the single
  messages refused. The others may be published twice (each with its dedupe id): the
  sink is at-least-once. When every message of a round is refused, the refusal is not
  about one message's content and fails the batch instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from quixsinks.core.errors import RecordError

__all__ = ["deliver_isolating", "encodable_rows"]

T = TypeVar("T")


def encodable_rows(
    batch: Any,
    row0: int,
    build: Callable[[Any, int], object],
    refuse: Callable[[int, RecordError], None],
) -> list[int]:
    """The indexes (into ``batch``) of the rows ``build(piece, first_row)`` accepts; every
    other row goes to ``refuse(index, error)``. ``row0`` is the batch's first row number
    (a RecordError's ``row`` counts from it, as :mod:`.wire` does)."""
    good: list[int] = []
    pending: list[tuple[int, int]] = [(0, batch.num_rows)]  # (start, length) in batch
    while pending:
        start, length = pending.pop()
        if length == 0:
            continue
        try:
            build(batch.slice(start, length), row0 + start)
        except RecordError as exc:
            bad = None if exc.row is None else exc.row - row0 - start
            if bad is not None and 0 <= bad < length:
                refuse(start + bad, exc)
                pending.append((start + bad + 1, length - bad - 1))
                pending.append((start, bad))  # popped first: row order is kept
            elif length == 1:
                refuse(start, exc)
            else:
                half = length // 2
                pending.append((start + half, length - half))
                pending.append((start, half))
            continue
        good.extend(range(start, start + length))
    return good


def deliver_isolating(
    items: Sequence[T], deliver: Callable[[Sequence[T]], None]
) -> list[tuple[T, RecordError]]:
    """``deliver(items)``; on a RecordError, deliver the halves again, down to the single
    items refused: those, with their errors (in order). Other errors propagate."""
    refused: list[tuple[T, RecordError]] = []
    pending = [list(items)]
    while pending:
        piece = pending.pop()
        if not piece:
            continue
        try:
            deliver(piece)
        except RecordError as exc:
            if len(piece) == 1:
                refused.append((piece[0], exc))
                continue
            half = len(piece) // 2
            pending.append(piece[half:])
            pending.append(piece[:half])
    return refused
