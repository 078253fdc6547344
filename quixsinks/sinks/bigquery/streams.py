"""PENDING write streams of the Storage Write API: a task appends to one and finalizes it;
the driver commits the winners' streams together (BatchCommitWriteStreams)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from quixsinks.core.errors import CommitError, QuixSinksError

from .client import clients, translate, write_retry
from .options import BigQueryOptions, split_table_id
from .wire import append_requests, check_append

__all__ = ["StagedStream", "append", "commit_streams"]


@dataclass
class StagedStream:
    """One finalized PENDING stream: its name, the table it writes, the attempt token its
    rows carry, its rows and the columns it wrote."""

    stream: str
    table: str
    token: str
    rows: int
    columns: tuple[str, ...]


def _parent(table_id: str) -> str:
    project, dataset, table = split_table_id(table_id)
    return f"projects/{project}/datasets/{dataset}/tables/{table}"


def append(
    options: BigQueryOptions, table_id: str, schema: pa.Schema, records: Sequence[pa.RecordBatch]
) -> str:
    """Append ``records`` (see :func:`.wire.chunks`) to a new PENDING stream on ``table_id``
    and finalize it: the stream's name. :class:`.wire.RowsRefused` names the rows BigQuery
    refused (the stream is then left unfinalized: never committed, never visible)."""
    from google.cloud.bigquery_storage_v1 import types

    where = f"bigquery table {table_id}"
    offsets = [0]
    for record in records:
        offsets.append(offsets[-1] + record.num_rows)
    retry = write_retry(options)
    try:
        write = clients(options).write
        stream = write.create_write_stream(
            parent=_parent(table_id),
            write_stream=types.WriteStream(type_=types.WriteStream.Type.PENDING),
            timeout=options.ddl_timeout,
            retry=retry,
        )
        responses = write.append_rows(
            append_requests(stream.name, schema, records),
            timeout=options.insert_timeout * max(1, len(records)),
            retry=retry,
        )
        for i, response in enumerate(responses):
            check_append(response, where, offsets[min(i, len(records) - 1)])
        write.finalize_write_stream(name=stream.name, timeout=options.ddl_timeout, retry=retry)
    except QuixSinksError:
        raise
    except Exception as exc:
        raise translate(exc, where) from exc
    return str(stream.name)


def commit_streams(
    options: BigQueryOptions, table_id: str, streams: Sequence[StagedStream]
) -> None:
    """BatchCommitWriteStreams of the streams on ``table_id``; a stream committed before (a
    retried commit) is fine."""
    names = [s.stream for s in streams if s.table == table_id]
    if not names:
        return
    from google.cloud.bigquery_storage_v1 import types

    where = f"bigquery table {table_id}"
    try:
        write = clients(options).write
        retry = write_retry(options)
        response = write.batch_commit_write_streams(
            request=types.BatchCommitWriteStreamsRequest(
                parent=_parent(table_id), write_streams=names
            ),
            timeout=options.ddl_timeout,
            retry=retry,
        )
        for error in response.stream_errors:
            stream = write.get_write_stream(
                name=error.entity, timeout=options.ddl_timeout, retry=retry
            )
            if not stream.commit_time:
                raise CommitError(
                    f"{where}: BigQuery did not commit the write stream {error.entity}: "
                    f"{response.stream_errors[0].error_message}; the micro-batch will be "
                    "replayed when the query restarts from its checkpoint"
                )
    except QuixSinksError:
        raise
    except Exception as exc:
        raise translate(exc, where) from exc
