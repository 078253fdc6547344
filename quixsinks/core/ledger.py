"""The ledger: which micro-batches a sink has committed, fenced by the query that wrote them.

Every exactly-once sink records each committed micro-batch as a :class:`LedgerEntry`
``(sink id, batch id, query id)`` in the destination, next to its data and in the same
atomic step (a transaction, a create-only marker, a locked log line). A replayed batch
finds its entry and is skipped.

**Fencing.** Batch ids restart at 0 with a new checkpoint, so an entry is only proof of
"already committed" when the *same streaming query* wrote it (the query id stays the same
across restarts from one checkpoint). A sink id whose entries were written by another
query is never written to: :meth:`Ledger.fence` raises :class:`LedgerFenceError` before
any data moves, naming both query ids and the two ways out: a new ``sink_id``, or
``takeover_query_id=<the other query id>``, which drops that query's entries and hands
the sink id over. Without fencing a new checkpoint reusing a ``sink_id`` would silently
skip its first batches: data loss.

**Keyed batch writes.** A batch ``df.write`` with the options ``sink_id`` and ``batch_id``
is recorded like a micro-batch: under (sink id, batch id), with the fixed query id
:data:`BATCH_WRITE_QUERY_ID`. Running it again finds its entry and writes nothing, as
Delta's ``txnAppId``/``txnVersion`` do. All keyed batch writes of a sink id are one
writer to the fence: a streaming query and keyed batch writes sharing a sink id are
fenced from each other. A batch write without the key has a fresh sink id per write and
keeps no entry.

A destination provides a :class:`LedgerStore` (what fencing reads: the owners of a sink id,
one batch's entry, and the takeover); :class:`Ledger` holds the rules, so every sink (and a
custom one, see docs/custom-sinks.md) fences the same way, on the driver with
:meth:`Ledger.fence` and on executors with :meth:`Ledger.check`. Most destinations write
their entry inside their own atomic commit (a SQL transaction, a Lua script, a snapshot
summary, a create-only marker); a store that lets :meth:`Ledger.record` write it is a
:class:`RecordingLedgerStore`.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import LedgerFenceError

__all__ = [
    "BATCH_WRITE_QUERY_ID",
    "DEFAULT_KEEP_BATCHES",
    "Ledger",
    "LedgerEntry",
    "LedgerStore",
    "RecordingLedgerStore",
    "beyond_kept",
    "check_sink_id",
    "fence_owners",
    "log_already_committed",
]

logger = logging.getLogger("quixsinks.ledger")

#: Entries kept per sink id: at least as many batches as Spark may replay
#: (``spark.sql.streaming.minBatchesToRetain``, default 100).
DEFAULT_KEEP_BATCHES = 100

#: The query id of every keyed batch write (options ``sink_id`` and ``batch_id``) in the
#: ledger and the fence. Not a streaming query id (those are UUIDs), so a streaming query
#: and keyed batch writes never share one; ``takeover_query_id=batch-write`` hands a sink
#: id from keyed batch writes to a streaming query.
BATCH_WRITE_QUERY_ID = "batch-write"

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def check_sink_id(sink_id: str) -> str:
    """``sink_id`` if it is safe in file names, object keys and table names, else ValueError."""
    if not _SAFE_ID.fullmatch(sink_id) or sink_id in (".", ".."):
        raise ValueError(f"sink id {sink_id!r} may only contain letters, digits, '.', '_' and '-'")
    return sink_id


@dataclass(frozen=True)
class LedgerEntry:
    """One committed micro-batch.

    Attributes:
        sink_id: the writer's stable id.
        batch_id: the micro-batch id.
        query_id: the streaming query that committed it (:data:`BATCH_WRITE_QUERY_ID` for
            a keyed batch write, ``""`` for a batch write without the key).
    """

    sink_id: str
    batch_id: int
    query_id: str


def beyond_kept(batch_ids: Iterable[int], keep: int, recorded: int | None = None) -> set[int]:
    """The batch ids a ledger keeping ``keep`` entries per sink id drops: all but the
    ``keep`` highest and ``recorded``, the one just recorded (see
    :meth:`RecordingLedgerStore.prune`)."""
    newest_first = sorted(set(batch_ids), reverse=True)
    return set(newest_first[keep:]) - {recorded}


def log_already_committed(sink_id: str, batch_id: int, detail: str = "") -> None:
    """The one INFO line of a batch its sink's ledger holds already: a replayed micro-batch,
    or a keyed batch write run again. Nothing of it is written again."""
    logger.info(
        "batch %d of sink id %s is in the ledger already: skipped, nothing written again%s",
        batch_id,
        sink_id,
        f" ({detail})" if detail else "",
    )


def fence_owners(
    sink_id: str,
    query_id: str,
    owners: Iterable[str],
    takeover_query_id: str | None,
) -> str | None:
    """The fencing rule, for stores that check ownership themselves (e.g. in SQL).

    ``owners`` are the query ids that hold entries for ``sink_id``. Returns None when
    ``query_id`` may write, or the query id whose entries must be dropped first (a
    takeover); raises :class:`LedgerFenceError` otherwise.
    """
    others = sorted(set(owners) - {query_id})
    if not others:
        return None
    if takeover_query_id is not None and others == [takeover_query_id]:
        return takeover_query_id
    raise LedgerFenceError(sink_id=sink_id, owner_query_id=others[0], query_id=query_id)


class LedgerStore(ABC):
    """Where a destination keeps its ledger: what fencing and the replay check read. Methods
    run inside the destination's atomic scope (a transaction, a lock) when it has one."""

    @abstractmethod
    def owners(self, sink_id: str) -> set[str]:
        """The query ids that hold entries for ``sink_id``."""

    @abstractmethod
    def get(self, sink_id: str, batch_id: int) -> LedgerEntry | None:
        """The entry of one batch, or None."""

    @abstractmethod
    def drop_query(self, sink_id: str, query_id: str) -> None:
        """Hand ``sink_id`` over from ``query_id`` (a takeover): its entries stop counting."""


class RecordingLedgerStore(LedgerStore):
    """A store whose entries :meth:`Ledger.record` writes (a custom sink's table, the file
    commit's create-only markers): ``record`` is atomic with the data."""

    @abstractmethod
    def record(self, entry: LedgerEntry) -> bool:
        """Add an entry; False if the batch had one already (create-only)."""

    @abstractmethod
    def prune(self, sink_id: str, keep: int, recorded: int) -> None:
        """Delete the entries of ``sink_id`` but the ``keep`` with the highest batch ids and
        ``recorded``, the batch just recorded (a keyed backfill of an old id: its retry
        after a lost answer must find its entry).

        By count, not by distance from the newest batch id: keyed batch writes use sparse
        ids (``20240501``, then ``20240601``), and an entry dropped while its batch may
        still be run again turns that rerun into a duplicate."""


class Ledger:
    """The fenced ledger of one sink over a :class:`LedgerStore`.

    Args:
        store: the destination's store.
        takeover_query_id: the ``takeover_query_id`` option: the query whose entries may be
            dropped so that this query takes the sink id over.
        keep_batches: entries kept per sink id: those with the highest batch ids (the
            others are pruned on record).
    """

    def __init__(
        self,
        store: LedgerStore,
        *,
        takeover_query_id: str | None = None,
        keep_batches: int = DEFAULT_KEEP_BATCHES,
    ) -> None:
        self.store = store
        self.takeover_query_id = takeover_query_id
        self.keep_batches = keep_batches

    def check(self, sink_id: str, query_id: str) -> None:
        """Read-only :meth:`fence` for executors: raise unless ``query_id`` may write (a
        takeover allowed by the options passes; the driver carries it out at commit)."""
        fence_owners(sink_id, query_id, self.store.owners(sink_id), self.takeover_query_id)

    def fence(self, sink_id: str, query_id: str) -> None:
        """Raise LedgerFenceError unless ``query_id`` may write under ``sink_id``; carry out
        an allowed takeover (drop the other query's entries)."""
        dropped = fence_owners(
            sink_id, query_id, self.store.owners(sink_id), self.takeover_query_id
        )
        if dropped is not None:
            logger.warning(
                "sink id %s: taking over from query %s (takeover_query_id): its ledger "
                "entries are dropped, query %s writes from now on",
                sink_id,
                dropped,
                query_id,
            )
            self.store.drop_query(sink_id, dropped)

    def committed(self, sink_id: str, batch_id: int, query_id: str) -> bool:
        """Whether this query committed this batch already (fenced first)."""
        self.fence(sink_id, query_id)
        entry = self.store.get(sink_id, batch_id)
        return entry is not None and entry.query_id == query_id

    def record(self, sink_id: str, batch_id: int, query_id: str) -> bool:
        """Fence, then record the batch; False if it was recorded already. Prunes old entries.
        Needs a :class:`RecordingLedgerStore`."""
        store = self.store
        if not isinstance(store, RecordingLedgerStore):
            raise TypeError(
                f"{type(store).__name__} records its entries in its own commit, not through "
                "Ledger.record (derive the store from RecordingLedgerStore)"
            )
        self.fence(sink_id, query_id)
        recorded = store.record(LedgerEntry(sink_id, batch_id, query_id))
        if recorded:
            store.prune(sink_id, self.keep_batches, batch_id)
        return recorded
