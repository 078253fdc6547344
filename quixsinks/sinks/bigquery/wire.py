"""Arrow to the Storage Write API: a SinkBatch as the table's columns, cut into AppendRows
requests below ``max_request_bytes``, and the answers checked. Pure functions: no client.

The values' types come from :mod:`.schema` (``convert``); here they are put in the table's
column order, tagged for the staging table (exactly-once mode) and serialized as Arrow IPC.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from quixsinks.core.batch import SinkBatch
from quixsinks.core.errors import DestinationError, RecordError

from .schema import STAGED_AT_COLUMN, TOKEN_COLUMN, BQField, Column, arrow_schema, convert

__all__ = [
    "RowsRefused",
    "append_requests",
    "batch_table",
    "check_append",
    "chunks",
    "tagged",
    "with_all_columns",
]

#: google.rpc.Code ALREADY_EXISTS: the rows at this offset were appended before (a
#: resent request after a lost answer): they are there once
_ALREADY_EXISTS = 6


def batch_table(batch: SinkBatch, columns: Sequence[Column], target: Sequence[BQField]) -> pa.Table:
    """The batch's planned columns as Arrow arrays of the table's column types."""
    by_name = {f.name.lower(): f for f in target}
    values = batch.values()
    arrays: dict[str, pa.Array] = {}
    for col in columns:
        field = by_name[col.name.lower()]
        if col.source == "timestamp":
            raw: pa.Array = batch.timestamps_ms().cast(pa.timestamp("ms", "UTC"))
        elif col.source == "key":
            raw = batch.keys()
        else:
            raw = values.column(col.name).combine_chunks()
        arrays[field.name] = convert(raw, field)
    return pa.table(arrays)


def tagged(data: pa.Table, token: str) -> pa.Table:
    """``data`` with the staging table's columns: the attempt's token and the time."""
    n = data.num_rows
    now = pa.scalar(dt.datetime.now(dt.UTC), pa.timestamp("us", "UTC"))
    data = data.append_column(TOKEN_COLUMN, pa.array([token] * n, pa.string()))
    return data.append_column(STAGED_AT_COLUMN, pa.array([now] * n))


def with_all_columns(data: pa.Table, fields: Sequence[BQField]) -> pa.Table:
    """``data`` with the table's columns in the table's order (nulls for columns this batch
    does not have)."""
    schema = arrow_schema(fields)
    by_name = {n.lower(): n for n in data.column_names}
    arrays = []
    for f in schema:
        name = by_name.get(f.name.lower())
        arrays.append(data.column(name) if name is not None else pa.nulls(data.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def chunks(data: pa.Table, max_bytes: int) -> Iterator[pa.RecordBatch]:
    """Record batches whose IPC form stays below ``max_bytes``; a single row above it is a
    RecordError (BigQuery's request limit is 10 MB)."""
    if data.num_rows == 0:
        return
    per_row = max(1, data.nbytes // max(1, data.num_rows))
    step = max(1, int(max_bytes * 0.8) // per_row)
    start = 0
    while start < data.num_rows:
        length = min(step, data.num_rows - start)
        batch = data.slice(start, length).combine_chunks().to_batches()
        record = batch[0] if batch else pa.record_batch([], schema=data.schema)
        size = record.serialize().size
        if size > max_bytes:
            if length == 1:
                raise RecordError(
                    f"bigquery: row {start} of this batch is {size} bytes as Arrow, more than "
                    f"one append request may carry ({max_bytes} bytes; BigQuery's limit is "
                    "10 MB); split or shorten the row",
                    row=start,
                )
            step = max(1, length // 2)
            continue
        yield record
        start += length


def append_requests(
    name: str, schema: pa.Schema, records: Sequence[pa.RecordBatch]
) -> Iterator[Any]:
    """AppendRowsRequests of ``records`` to the stream ``name``, with explicit offsets (the
    writer schema in the first)."""
    from google.cloud.bigquery_storage_v1 import types

    offset = 0
    for i, record in enumerate(records):
        arrow = types.AppendRowsRequest.ArrowData()
        if i == 0:
            arrow.writer_schema = types.ArrowSchema(
                serialized_schema=schema.serialize().to_pybytes()
            )
        arrow.rows = types.ArrowRecordBatch(
            serialized_record_batch=record.serialize().to_pybytes(), row_count=record.num_rows
        )
        request = types.AppendRowsRequest(write_stream=name, offset=offset)
        request.arrow_rows = arrow
        offset += record.num_rows
        yield request


class RowsRefused(RecordError):
    """An append BigQuery refused for some of its rows (the response's ``row_errors``).

    Attributes:
        refused: (row, message) per refused row; ``row`` indexes the appended table (the
            request's offset added to the response's row index).
    """

    def __init__(self, message: str, refused: Sequence[tuple[int, str]]) -> None:
        super().__init__(message, row=refused[0][0] if refused else None)
        self.refused = list(refused)
        self._kwargs["refused"] = self.refused  # pickled with it


def check_append(response: Any, where: str, offset: int = 0) -> None:
    """:class:`RowsRefused` naming every row an append refused (``row_errors``; ``offset``:
    the request's first row), DestinationError for a refusal of the whole request."""
    pb = getattr(response, "_pb", response)
    if pb.row_errors:
        refused = [(offset + int(e.index), str(e.message)) for e in pb.row_errors]
        row, message = refused[0]
        more = f" (and {len(refused) - 1} more rows)" if len(refused) > 1 else ""
        raise RowsRefused(
            f"{where}: BigQuery refused row {row} of an append: {message}{more}", refused
        )
    if pb.HasField("error") and pb.error.code not in (0, _ALREADY_EXISTS):
        raise DestinationError(
            f"{where}: append refused (code {pb.error.code}): {pb.error.message}", location=where
        )
