"""Per-row checks found vectorised, refused row by row: :class:`RowChecks`.

A sink that checks its rows against a destination's rules in Arrow (a mask per rule)
collects the masks here, then :meth:`RowChecks.refuse` hands every offending row to
``batch.refuse`` (so ``on_error`` decides: fail naming the first, skip, or dead-letter)
and returns the batch without them. Nothing is sent before the rows are refused, so a
sink that uses it never has to undo a half-written request.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from .batch import SinkBatch
from .errors import RecordError

__all__ = ["RowChecks", "without_rows"]


def without_rows(batch: SinkBatch, drop: pa.Array) -> SinkBatch:
    """``batch`` less the rows where ``drop`` is true (same task, counters and context)."""
    return batch.filter(pc.invert(pc.fill_null(drop, False)))


class RowChecks:
    """The rows of one batch that break a rule, each with the reason of the first rule it
    breaks. ``why(row)`` builds a reason only for a row that is refused."""

    def __init__(self, batch: SinkBatch) -> None:
        self.batch = batch
        self._checks: list[tuple[pa.Array, Callable[[int], str], str | None]] = []

    def add(self, mask: pa.Array, why: Callable[[int], str], column: str | None = None) -> None:
        """Rows where ``mask`` is true break a rule (null counts as false)."""
        mask = pc.fill_null(mask, False)
        if pc.any(mask).as_py():
            self._checks.append((mask, why, column))

    def __bool__(self) -> bool:
        return bool(self._checks)

    @property
    def mask(self) -> pa.Array | None:
        """True for every row that breaks a rule; None when none does."""
        if not self._checks:
            return None
        mask = self._checks[0][0]
        for other, _, _ in self._checks[1:]:
            mask = pc.or_(mask, other)
        return mask

    def refuse(self) -> SinkBatch:
        """Refuse each offending row in row order (``batch.refuse``: under ``on_error=fail``
        the first raises a RecordError naming it) and return the batch without them."""
        mask = self.mask
        if mask is None:
            return self.batch
        rows = pc.indices_nonzero(mask).to_pylist()
        for row in rows:
            for check, why, column in self._checks:
                if check[row].as_py():
                    self.batch.refuse(row, RecordError(why(row), column=column, row=row))
                    break
        return without_rows(self.batch, mask)
