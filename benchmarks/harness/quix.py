"""Feeding a Quix Streams sink the way its Application does: one ``add()`` per record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def add_all(
    sink: Any,
    values: Sequence[Any],
    keys: Sequence[Any],
    timestamps: Sequence[int] | None = None,
    *,
    flush_every: int | None = None,
) -> None:
    """``sink.add()`` every record (topic ``bench``, partition 0, offsets from 0, no
    headers; timestamps 0 unless given), then ``sink.flush()``; with ``flush_every``, a
    flush (a Quix checkpoint) after each that many records too."""
    add = sink.add
    for offset, value in enumerate(values):
        add(
            value=value,
            key=keys[offset],
            timestamp=timestamps[offset] if timestamps is not None else 0,
            headers=[],
            topic="bench",
            partition=0,
            offset=offset,
        )
        if flush_every is not None and offset % flush_every == flush_every - 1:
            sink.flush()
    sink.flush()
