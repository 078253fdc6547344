"""Per-record delivery for message sinks (Kinesis, Pub/Sub...): dedupe ids and resends.

Message services accept a batch of records and may refuse some of them (throttling)
while accepting the rest. :func:`deliver` sends items in chunks, resends only the
refused ones, in their original order, with the backoff of the sink's
:class:`~quixsinks.core.backpressure.RetryPolicy`, and raises :class:`DeliveryError`
once the policy's deadline has passed with items still undelivered.

:class:`DedupeIds` gives every record an id that is the same when a micro-batch is
replayed after a failure, so that a consumer (or the service, where it supports it)
can drop the duplicates that an at-least-once resend produces.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .backpressure import RetryPolicy, RetryStats
from .errors import DeliveryError, RetryableError

__all__ = ["DedupeIds", "DeliveryError", "deliver"]

logger = logging.getLogger("quixsinks.delivery")
T = TypeVar("T")


class DedupeIds:
    """Deterministic per-record ids within one (sink id, batch id, scope).

    The id of a record is a hash of the sink id, the micro-batch id, the scope (for
    example the Spark partition id), the payload's content hash and the payload's
    occurrence index among identical payloads seen so far in this scope. A replay of
    the same batch that calls :meth:`ids` with the same payloads in the same order
    gets the same ids; identical payloads still get distinct ids.

    The occurrence counts carry over between calls on one instance, so a scope's
    payloads may be passed in several chunks.
    """

    def __init__(self, sink_id: str, batch_id: int, scope: str | int, *, digest_size: int = 16):
        if not 4 <= digest_size <= 64:
            raise ValueError(f"digest_size must be in 4..64, got {digest_size}")
        self._prefix = f"{sink_id}\x00{batch_id}\x00{scope}\x00".encode()
        self._digest_size = digest_size
        self._seen: dict[bytes, int] = {}

    def ids(self, payloads: Sequence[bytes]) -> list[str]:
        """One hex id (``2 * digest_size`` characters) per payload, in order."""
        prefix, size, seen = self._prefix, self._digest_size, self._seen
        out: list[str] = []
        for payload in payloads:
            content = hashlib.blake2b(payload, digest_size=16).digest()
            occurrence = seen.get(content, 0)
            seen[content] = occurrence + 1
            key = prefix + content + occurrence.to_bytes(8, "big")
            out.append(hashlib.blake2b(key, digest_size=size).hexdigest())
        return out


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
