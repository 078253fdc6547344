"""A task's rows on their way to an append, less the rows BigQuery (or the conversion to its
types) refuses: each refused row goes to ``batch.refuse`` (``on_error``), the rest is
appended. Nothing of a refused row is ever appended to a stream that is committed.

Three row-level refusals, found in this order:

- a value that cannot be converted to its column's type (:func:`converted`: the rows are
  converted in halves, down to the single rows that fail);
- a row larger than one append request may carry (:func:`chunked`);
- rows an append's response names in ``row_errors`` (:func:`refused`; the task then appends
  the other rows to a new stream, the old one is never finalized nor committed).

``data`` (the rows as appended) and ``batch`` keep the same rows in the same order, so a
row index of one is a row index of the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pyarrow as pa

from quixsinks.core.batch import SinkBatch
from quixsinks.core.deadletters import refusals_of, write_isolating
from quixsinks.core.errors import DestinationError, RecordError

from .schema import BQField, Column
from .wire import RowsRefused, batch_table, chunks

__all__ = ["chunked", "converted", "refused", "without_rows"]


def converted(
    batch: SinkBatch, columns: Sequence[Column], target: Sequence[BQField]
) -> tuple[SinkBatch, pa.Table]:
    """The batch's rows as the table's column types (:func:`.wire.batch_table`), less the
    rows whose values cannot be converted (refused)."""
    pieces: list[tuple[SinkBatch, pa.Table]] = write_isolating(
        batch,
        lambda piece: (piece, batch_table(piece, columns, target)),
        refusals_of(batch),
    )
    if len(pieces) == 1 and pieces[0][0].num_rows == batch.num_rows:
        return pieces[0]
    kept = [piece for piece, _ in pieces]
    if not kept:
        empty = batch.slice(0, 0)
        return empty, batch_table(empty, columns, target)
    merged = dataclasses.replace(
        batch,
        table=pa.concat_tables([p.table for p in kept]),
        _values=None,  # JSON values are typed per piece: parsed again, as one batch
    )
    return merged, pa.concat_tables([data for _, data in pieces])


def without_rows(batch: SinkBatch, data: pa.Table, rows: set[int]) -> tuple[SinkBatch, pa.Table]:
    """``batch`` and ``data`` less ``rows`` (indexes into both)."""
    keep = pa.array([i for i in range(batch.num_rows) if i not in rows], pa.int64())
    return batch.without(rows), data.take(keep)


def chunked(
    batch: SinkBatch, data: pa.Table, max_bytes: int
) -> tuple[SinkBatch, pa.Table, list[pa.RecordBatch]]:
    """``data`` cut into append requests (:func:`.wire.chunks`), less the rows too large
    for one request (refused): the batch and data left, and the requests."""
    while True:
        try:
            return batch, data, list(chunks(data, max_bytes))
        except RecordError as exc:
            if exc.row is None or not 0 <= exc.row < batch.num_rows:
                raise
            batch.refuse(exc.row, exc)
            batch, data = without_rows(batch, data, {exc.row})


def refused(batch: SinkBatch, data: pa.Table, error: RowsRefused) -> tuple[SinkBatch, pa.Table]:
    """Refuse the rows an append's ``row_errors`` named; the batch and data left."""
    rows = {row for row, _ in error.refused if 0 <= row < batch.num_rows}
    if not rows:  # indexes outside what was appended: not a refusal of these rows
        raise DestinationError(f"{error} (row indexes outside the append)") from error
    for row, message in sorted(dict(error.refused).items()):
        if row in rows:
            batch.refuse(row, RecordError(f"bigquery: BigQuery refused the row: {message}"))
    return without_rows(batch, data, rows)
