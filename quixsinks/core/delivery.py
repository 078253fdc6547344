"""Per-record delivery for message sinks (Kinesis, Pub/Sub...): dedupe ids and resends.

Message services accept a batch of records and may refuse some of them (throttling)
while accepting the rest. :func:`deliver` sends items in chunks, resends only the
refused ones, in their original order, with the backoff of the sink's
:class:`~quixsinks.core.backpressure.RetryPolicy`, and raises :class:`DeliveryError`
once the policy's deadline has passed with items still undelivered.

:class:`DedupeIds` gives every record an id that is the same when a micro-batch is
replayed after a failure (under the conditions its docstring states), so that a consumer
(or the service, where it supports it) can drop the duplicates that an at-least-once
resend produces, and that is never shared by two records of a task, so that dropping by
id never drops a real record. Its state does not grow with the number of rows.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .backpressure import RetryPolicy, RetryStats
from .batch import SinkBatch
from .errors import DeliveryError, RetryableError

__all__ = ["Coordinates", "DedupeIds", "DeliveryError", "deliver", "kafka_coordinates"]

logger = logging.getLogger("quixsinks.delivery")
T = TypeVar("T")

#: A Kafka record's (topic, partition, offset); None parts (or None): not a Kafka record.
Coordinates = tuple[Any, Any, Any]

#: distinct payloads remembered for one run of rows with the same Kafka coordinates (one
#: record exploded into several rows); the rows past it get position ids
MAX_RUN_PAYLOADS = 1024


def _fields(*parts: str | int) -> bytes:
    """Length-prefixed fields: no two different sequences encode alike."""
    out = []
    for part in parts:
        data = str(part).encode()
        out.append(len(data).to_bytes(4, "big") + data)
    return b"".join(out)


class DedupeIds:
    """Deterministic per-record ids of one task: (sink id, batch id, scope), bounded state.

    Every id is a BLAKE2b hash that covers the record's payload, so a record whose payload
    differs on a replay gets another id (a duplicate a consumer cannot recognise, never a
    record dropped in place of another). There are two kinds:

    * **Kafka ids**, for a row given with Kafka coordinates (topic, partition, offset):
      a hash of the sink id, the batch id, the coordinates, the payload and ``n``, the
      count of identical payloads before it among the consecutive rows with the same
      coordinates (one Kafka record exploded into several rows). Neither the scope nor
      the row's position enter: the id is the same when a replay partitions or orders
      the rows differently. A row gets a Kafka id only when its offset is past every
      offset of its topic partition seen before in this task, or when it continues the
      previous row's run of coordinates; any other row (input out of offset order,
      coordinates met before) gets a position id, so that no two rows of the task share
      an id.
    * **Position ids**, for every other row: a hash of the sink id, the batch id, the
      scope (e.g. the Spark partition id), the row's ordinal in the scope (counted over
      every :meth:`ids` call on this instance) and the payload. The same when the replay
      gives the scope the same rows in the same order.

    The state is the next ordinal, the last offset of each Kafka topic partition seen and
    the payload digests of the current run of coordinates (at most
    :data:`MAX_RUN_PAYLOADS`): it does not grow with the number of rows.
    """

    def __init__(self, sink_id: str, batch_id: int, scope: str | int, *, digest_size: int = 16):
        if not 4 <= digest_size <= 64:
            raise ValueError(f"digest_size must be in 4..64, got {digest_size}")
        self._position = hashlib.blake2b(
            _fields("position", sink_id, batch_id, scope), digest_size=digest_size
        )
        self._kafka = hashlib.blake2b(_fields("kafka", sink_id, batch_id), digest_size=digest_size)
        self._ordinal = 0
        self._last_offsets: dict[tuple[Any, Any], int] = {}
        self._partition_fields: dict[tuple[Any, Any], bytes] = {}  # encoded once per partition
        self._run: Coordinates | None = None
        self._run_payloads: dict[bytes, int] = {}

    def copy(self) -> DedupeIds:
        """An independent copy of the state: a sink that may give up an :meth:`ids` call
        (its rows turned out unpublishable) goes on from the copy made before it."""
        twin = copy.copy(self)
        twin._last_offsets = dict(self._last_offsets)
        twin._partition_fields = dict(self._partition_fields)
        twin._run_payloads = dict(self._run_payloads)
        return twin

    def ids(
        self, payloads: Sequence[bytes], coordinates: Sequence[Coordinates | None] | None = None
    ) -> list[str]:
        """One hex id (``2 * digest_size`` characters) per payload, in order.

        ``coordinates``: per payload, its Kafka record's (topic, partition, offset), or
        None (see :func:`kafka_coordinates`); without it every id is a position id.
        """
        if coordinates is not None and len(coordinates) != len(payloads):
            raise ValueError(f"{len(payloads)} payloads but {len(coordinates)} coordinates")
        out: list[str] = []
        ordinal = self._ordinal
        position = self._position
        for i, payload in enumerate(payloads):
            kafka = None
            if coordinates is not None:
                where = coordinates[i]
                if where is not None and None not in where:
                    kafka = self._kafka_id(where, payload)
                else:
                    self._run = None  # a run is consecutive rows only
            if kafka is None:
                h = position.copy()
                h.update((ordinal + i).to_bytes(8, "big"))
                h.update(payload)
                out.append(h.hexdigest())
            else:
                out.append(kafka)
        self._ordinal = ordinal + len(payloads)
        return out

    def _kafka_id(self, where: Coordinates, payload: bytes) -> str | None:
        """The Kafka id of the row, or None where only a position id is safe."""
        topic, partition, offset = where
        offset = int(offset)
        digest = hashlib.blake2b(payload, digest_size=16).digest()
        if where == self._run:  # the next row of the same Kafka record
            n = self._run_payloads.get(digest)
            if n is None:
                if len(self._run_payloads) >= MAX_RUN_PAYLOADS:
                    return None
                n = 0
            self._run_payloads[digest] = n + 1
        else:
            last = self._last_offsets.get((topic, partition))
            if last is not None and offset <= last:  # met before, or out of order
                self._run = None
                return None
            self._last_offsets[(topic, partition)] = offset
            self._run = where
            self._run_payloads = {digest: 1}
            n = 0
        fields = self._partition_fields.get((topic, partition))
        if fields is None:
            fields = self._partition_fields[(topic, partition)] = _fields(topic, partition)
        h = self._kafka.copy()
        h.update(fields + offset.to_bytes(8, "big", signed=True) + n.to_bytes(8, "big"))
        h.update(digest)
        return h.hexdigest()


def kafka_coordinates(batch: SinkBatch) -> list[Coordinates | None] | None:
    """Each row's (topic, partition, offset) when the DataFrame has Spark's Kafka columns
    (the record schema recognises them), else None."""
    records = batch.records
    if records.topic is None or records.partition is None or records.offset is None:
        return None
    return list(
        zip(
            batch.column(records.topic).to_pylist(),
            batch.column(records.partition).to_pylist(),
            batch.column(records.offset).to_pylist(),
            strict=True,
        )
    )


def deliver(
    items: Sequence[T],
    send: Callable[[Sequence[T]], Sequence[int]],
    policy: RetryPolicy,
    *,
    what: str,
    chunk_size: int = 500,
    max_inflight: int = 1,
    stats: RetryStats | None = None,
    size_of: Callable[[T], int] | None = None,
    max_chunk_size: int | None = None,
) -> int:
    """Send ``items`` through ``send`` until all are accepted; returns how many were sent.

    ``send(chunk)`` gets at most ``chunk_size`` items and returns the indices (into the
    chunk) of the items refused retryably; it raises :class:`RetryableError` when the
    whole call failed retryably (every item of the chunk is then resent) and any other
    exception for a permanent failure (propagated at once). After each round the
    refused items are resent, in their original order, after the policy's backoff
    (the largest ``retry_after`` a whole-call error gave, if any). A round that
    delivered nothing counts as an attempt against ``policy.max_attempts``; a round
    that made progress does not. Once the next pause would pass ``policy.deadline``
    :class:`DeliveryError` is raised, saying how many items were not delivered and why.

    With ``size_of`` and ``max_chunk_size`` a chunk is also cut before its items' total
    size would pass ``max_chunk_size`` (an item larger than that goes alone: check item
    sizes before calling).

    ``max_inflight`` > 1 sends up to that many chunks at once from a thread pool;
    items of different chunks may then arrive out of order.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if max_inflight < 1:
        raise ValueError(f"max_inflight must be >= 1, got {max_inflight}")

    def run(chunk: list[int]) -> tuple[list[int], RetryableError | None]:
        try:
            refused = send([items[i] for i in chunk])
        except RetryableError as failure:
            return chunk, failure
        return [chunk[j] for j in sorted(set(refused))], None

    pending = list(range(len(items)))
    start = policy.clock()
    attempt = 1
    pool = ThreadPoolExecutor(max_inflight) if max_inflight > 1 else None
    try:
        while pending:
            chunks = _chunks(pending, items, chunk_size, size_of, max_chunk_size)

            results = list(pool.map(run, chunks)) if pool else [run(c) for c in chunks]
            failed: list[int] = []
            errors: list[RetryableError] = []
            for refused, error in results:
                failed.extend(refused)
                if error is not None:
                    errors.append(error)
            if not failed:
                break
            progressed = len(failed) < len(pending)
            pending = failed
            reason = (
                errors[-1].message
                if errors
                else f"{len(failed)} item(s) refused retryably by the destination"
            )
            if not progressed:
                attempt += 1
            retry_after = max(
                (e.retry_after for e in errors if e.retry_after is not None), default=None
            )
            pause = policy.backoff(1 if progressed else attempt - 1, retry_after)
            elapsed = policy.clock() - start
            if attempt > policy.max_attempts or elapsed + pause > policy.deadline:
                raise DeliveryError(
                    f"{what}: {len(pending)} of {len(items)} item(s) not delivered after "
                    f"{elapsed:.1f} s: {reason} (raise retry_max_attempts or "
                    "retry_deadline_seconds to wait longer)",
                    undelivered=len(pending),
                    total=len(items),
                    reason=reason,
                )
            logger.warning(
                "%s: %d of %d item(s) to resend (%s); retrying in %.2f s",
                what,
                len(pending),
                len(items),
                reason,
                pause,
            )
            policy.sleep(pause)
            if stats is not None:
                stats.retries += 1
                stats.waited_seconds += pause
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return len(items)


def _chunks(
    pending: list[int],
    items: Sequence[T],
    count: int,
    size_of: Callable[[T], int] | None,
    limit: int | None,
) -> list[list[int]]:
    if size_of is None or limit is None:
        return [pending[i : i + count] for i in range(0, len(pending), count)]
    out: list[list[int]] = []
    current: list[int] = []
    total = 0
    for index in pending:
        size = size_of(items[index])
        if current and (len(current) >= count or total + size > limit):
            out.append(current)
            current, total = [], 0
        current.append(index)
        total += size
    if current:
        out.append(current)
    return out
