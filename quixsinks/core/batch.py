"""SinkBatch: the rows of one Spark partition of one micro-batch, backed by Arrow.

A sink's ``write`` receives a :class:`SinkBatch`. Vectorised sinks work on
:attr:`SinkBatch.table` and the column views (:meth:`keys`, :meth:`timestamps_ms`,
:meth:`values`); a sink that needs Python objects iterates the batch and gets one
:class:`SinkItem` per row, like a Quix Streams ``SinkBatch``. Large partitions reach
the sink as several SinkBatches of bounded size (option ``max_batch_bytes``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from .ledger import BATCH_WRITE_QUERY_ID
from .records import RecordSchema

if TYPE_CHECKING:
    from .sink import Task

__all__ = ["SinkBatch", "SinkItem", "WriteContext"]


@dataclass(frozen=True)
class WriteContext:
    """Where a batch comes from.

    Attributes:
        sink_id: stable id of the writing query (the streaming query id, the ``sink_id``
            option, or a fresh id per batch write without the ``batch_id`` option).
        batch_id: the micro-batch id (a batch write: the ``batch_id`` option, or 0).
        partition_id: the Spark partition.
        attempt_id: unique per task attempt (never reused, also across restarts).
        streaming: True in Structured Streaming.
        query_id: the streaming query id (the same across restarts from one checkpoint,
            new with a new checkpoint); a keyed batch write's is
            :data:`~quixsinks.core.ledger.BATCH_WRITE_QUERY_ID`; empty for a batch write
            without the key.
    """

    sink_id: str
    batch_id: int
    partition_id: int = 0
    attempt_id: str = "0"
    streaming: bool = False
    query_id: str = ""

    @property
    def ledgered(self) -> bool:
        """Whether the batch is recorded in the sink's fenced ledger (see :func:`ledgered`)."""
        return ledgered(self.streaming, self.query_id)

    @property
    def name_prefix(self) -> str:
        """A prefix for published names, unique per sink id *and* query.

        The sink id alone is not enough: after a takeover (``takeover_query_id``) a new
        query reuses the sink id with batch ids from 0 again, and must not replace the
        files of the old query's batches.
        """
        return name_prefix(self.sink_id, self.query_id)


def ledgered(streaming: bool, query_id: str) -> bool:
    """Whether a batch is recorded in the sink's fenced ledger: a streaming micro-batch
    (Spark replays it after a failure), or a keyed batch write (``sink_id`` and
    ``batch_id`` set: the job may run it again). A batch write without the key is a new
    write each time: it is never recognised again, so it keeps no ledger entry."""
    return streaming or query_id == BATCH_WRITE_QUERY_ID


def name_prefix(sink_id: str, query_id: str) -> str:
    """See :attr:`WriteContext.name_prefix` (the driver computes it from its CommitContext).

    Keyed batch writes use the bare sink id: they are one writer, whose names never
    collide with a streaming query's (``<sink id>-<query id>``)."""
    if not query_id or query_id in (sink_id, BATCH_WRITE_QUERY_ID):
        return sink_id
    return f"{sink_id}-{query_id[:8]}"


@dataclass(frozen=True)
class SinkItem:
    """One row as a Quix-style record: ``value`` is the message's own object
    (:meth:`SinkBatch.messages`; ``None`` for a tombstone)."""

    key: Any
    value: Any
    timestamp: int | None
    headers: Any = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None


@dataclass
class SinkBatch:
    """One partition's rows of one micro-batch (or a bounded slice of them).

    Attributes:
        table: the rows, as Spark delivered them.
        records: which columns are key, timestamp, value and metadata.
        context: batch id, partition, attempt.
        counters: per-batch counts a sink wants in its receipt (e.g. ``skipped``).
        task: the task attempt writing it (its state, retry policy), when run by Spark.
    """

    table: pa.Table
    records: RecordSchema
    context: WriteContext
    counters: dict[str, int] = field(default_factory=dict)
    _values: pa.Table | None = field(default=None, repr=False)
    task: Task | None = field(default=None, repr=False)

    @property
    def batch_id(self) -> int:
        return self.context.batch_id

    @property
    def partition_id(self) -> int:
        return self.context.partition_id

    @property
    def attempt_id(self) -> str:
        return self.context.attempt_id

    @property
    def num_rows(self) -> int:
        return int(self.table.num_rows)

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    def __len__(self) -> int:
        return self.num_rows

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a counter reported in the task's receipt."""
        self.counters[name] = self.counters.get(name, 0) + n

    # ------------------------------------------------------------ chunking

    def iter_chunks(self, n: int) -> Iterator[SinkBatch]:
        """Yield consecutive slices of ``n`` rows (the last may be shorter); zero-copy."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"chunk size must be a positive integer, got {n!r}")
        for start in range(0, self.num_rows, n):
            yield self._slice(start, min(n, self.num_rows - start))

    def iter_chunks_by_bytes(self, max_bytes: int) -> Iterator[SinkBatch]:
        """Yield consecutive slices of about ``max_bytes`` of Arrow data each (>= 1 row)."""
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive integer, got {max_bytes!r}")
        if self.num_rows == 0:
            return
        per_row = max(1, self.nbytes // self.num_rows)
        yield from self.iter_chunks(max(1, max_bytes // per_row))

    def slice(self, start: int, length: int) -> SinkBatch:
        """``length`` rows from ``start`` (zero-copy), counting into the same task."""
        return self._slice(start, length)

    def filter(self, keep: pa.Array) -> SinkBatch:
        """The rows where ``keep`` is true (null counts as false), counting into the same
        task; parsed values are kept, filtered alike."""
        keep = pc.fill_null(keep, False)
        values = self._values.filter(keep) if self._values is not None else None
        return dataclasses.replace(self, table=self.table.filter(keep), _values=values)

    def without(self, rows: Iterable[int]) -> SinkBatch:
        """The batch less ``rows`` (indexes into ``table``): what a sink writes after it
        refused them."""
        drop = pc.is_in(
            pa.array(range(self.num_rows), pa.int64()), pa.array(list(rows), pa.int64())
        )
        return self.filter(pc.invert(drop))

    def refuse(self, row: int, error: BaseException) -> None:
        """Refuse row ``row`` (an index into ``table``) for ``error``, as the ``on_error``
        option says: raise a RecordError naming the row (``fail``), count it (``skip``),
        or write it to the dead-letter output (``dead_letter``). For a row the
        destination or an encoder refuses for what it holds, never for a server error.
        """
        if self.task is None:
            from .deadletters import Refusals

            Refusals("").refuse(self, row, error)
            return
        self.task.refusals.refuse(self, row, error)

    def _slice(self, start: int, length: int) -> SinkBatch:
        values = self._values.slice(start, length) if self._values is not None else None
        return SinkBatch(
            self.table.slice(start, length),
            self.records,
            self.context,
            self.counters,
            values,
            self.task,
        )

    # ------------------------------------------------------------ column views

    def keys(self) -> pa.Array:
        return self.records.key_array(self.table)

    def timestamps_ms(self) -> pa.Array:
        """int64 epoch milliseconds, null where the row has none."""
        return self.records.timestamp_ms(self.table)

    def values(self) -> pa.Table:
        """The value columns (a JSON value column parsed), computed once per batch."""
        if self._values is None:
            self._values = self.records.value_table(self.table)
        return self._values

    def column(self, name: str) -> pa.Array:
        return self.table.column(name).combine_chunks()

    @property
    def passthrough(self) -> bool:
        """Whether each row's value is a JSON text the producer wrote (a Kafka ``value``,
        or ``value_format=json``): a sink that writes the value as JSON writes that text
        (:func:`~quixsinks.core.formats.value_json_texts`), not one rebuilt from the
        batch-typed columns."""
        return self.records.value_json

    def messages(self) -> list[Any]:
        """Each row's value as its own Python object, the way a Quix app receives it.

        A JSON value is decoded per message by :func:`json.loads`: its own keys in its
        own order, its own number types (``-34`` stays an int where other messages hold
        floats), and ``None`` for a tombstone. Value columns give one dict per row.
        This is what a user's ``value_serializer`` is called with.
        """
        if self.passthrough:
            raw = self.table.column(self.records.values[0]).to_pylist()
            return [None if text is None else json.loads(text) for text in raw]
        values = self.values()
        if not values.num_columns:
            return [{} for _ in range(self.num_rows)]
        return list(values.to_pylist())

    # ------------------------------------------------------------ per-row view

    def __iter__(self) -> Iterator[SinkItem]:
        """Rows as :class:`SinkItem` objects (Python objects: use for non-vectorised sinks);
        each value as :meth:`messages` gives it."""
        keys = self.keys().to_pylist()
        stamps = self.timestamps_ms().to_pylist()
        values = self.messages()
        meta = {
            part: self.column(name).to_pylist() if name else [None] * self.num_rows
            for part, name in (
                ("headers", self.records.headers),
                ("topic", self.records.topic),
                ("partition", self.records.partition),
                ("offset", self.records.offset),
            )
        }
        for i in range(self.num_rows):
            yield SinkItem(
                key=keys[i],
                value=values[i],
                timestamp=stamps[i],
                headers=meta["headers"][i],
                topic=meta["topic"][i],
                partition=meta["partition"][i],
                offset=meta["offset"][i],
            )
