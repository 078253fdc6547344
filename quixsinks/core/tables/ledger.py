"""The table layer's fenced ledger: snapshot summaries on the table's main branch.

Each micro-batch commits one snapshot whose summary carries ``quixsinks.sink-id``,
``quixsinks.query-id`` and ``quixsinks.batch-id``: the ledger entry is part of the
commit itself, so it is atomic with the data. :class:`SnapshotLedgerStore` reads the
entries by walking the branch's ancestry (newest first) for core's
:class:`~quixsinks.core.ledger.Ledger`.

A takeover (``takeover_query_id``) cannot delete snapshots: the taking query's commit
carries ``quixsinks.takeover-of`` = the old query id, and entries of that query older
than such a snapshot no longer count. Pruning is left to snapshot expiry
(``keep_snapshots``, ``expire_snapshots_older_than``), which carries the newest entry of
each streaming sink id whose snapshot it expires into a table property,
``quixsinks.ledger.<sink id>`` = ``<batch id>:<query id>``, in the same commit
(:mod:`.expiry`): an entry older than every snapshot of the branch, so that a query
restarted after a long pause still recognises its last batch and still owns its sink id.
"""

from __future__ import annotations

from typing import Any

from quixsinks.core.ledger import LedgerEntry, LedgerStore

__all__ = [
    "BATCH_ID",
    "CARRIED_PREFIX",
    "QUERY_ID",
    "RECORD",
    "SINK_ID",
    "TAKEOVER_OF",
    "SnapshotLedgerStore",
    "carried_entry",
    "carried_value",
    "stored_records",
    "summary_properties",
]

SINK_ID = "quixsinks.sink-id"
QUERY_ID = "quixsinks.query-id"
BATCH_ID = "quixsinks.batch-id"
TAKEOVER_OF = "quixsinks.takeover-of"
#: the batch's commit record (JSON, :class:`~quixsinks.core.commits.CommitRecord`), where
#: the sink stores one
RECORD = "quixsinks.record"
#: table property prefix of the entries carried over from expired snapshots
CARRIED_PREFIX = "quixsinks.ledger."


def carried_entry(properties: dict[str, str], sink_id: str) -> LedgerEntry | None:
    """The entry of ``sink_id`` carried in the table's properties, or None."""
    text = properties.get(CARRIED_PREFIX + sink_id)
    if text is None:
        return None
    batch_text, _, query_id = text.partition(":")
    if not batch_text.isdigit() or not query_id:
        return None
    return LedgerEntry(sink_id, int(batch_text), query_id)


def carried_value(entry: LedgerEntry) -> str:
    return f"{entry.batch_id}:{entry.query_id}"


def summary_properties(
    sink_id: str,
    batch_id: int,
    query_id: str,
    takeover_of: str | None = None,
    record: str | None = None,
) -> dict[str, str]:
    """The snapshot summary properties that record one micro-batch (and its commit
    record's JSON, when given)."""
    props = {SINK_ID: sink_id, QUERY_ID: query_id, BATCH_ID: str(batch_id)}
    if takeover_of is not None:
        props[TAKEOVER_OF] = takeover_of
    if record is not None:
        props[RECORD] = record
    return props


def stored_records(table: Any, sink_id: str | None = None) -> list[str]:
    """The commit records (JSON) in the summaries of the main branch's snapshots, oldest
    first; of ``sink_id`` only when given. Snapshots committed without one are skipped;
    an expired snapshot takes its record with it."""
    from pyiceberg.table.snapshots import ancestors_of

    metadata = table.metadata
    found = []
    for snapshot in ancestors_of(metadata.current_snapshot(), metadata):
        props = _summary(snapshot)
        if RECORD not in props or (sink_id is not None and props.get(SINK_ID) != sink_id):
            continue
        found.append(props[RECORD])
    found.reverse()
    return found


def _summary(snapshot: Any) -> dict[str, str]:
    summary = snapshot.summary
    if summary is None:
        return {}
    return dict(summary.additional_properties)


class SnapshotLedgerStore(LedgerStore):
    """The ledger entries in one loaded table's main-branch ancestry (read-only, except
    that a takeover is remembered here and written by the next commit's summary)."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.takeover_of: str | None = None
        self._entries: dict[str, list[LedgerEntry]] = {}

    def entries(self, sink_id: str) -> list[LedgerEntry]:
        """The live entries of ``sink_id``, newest first."""
        if sink_id not in self._entries:
            from pyiceberg.table.snapshots import ancestors_of

            found: list[LedgerEntry] = []
            dropped: set[str] = set()
            metadata = self.table.metadata
            for snapshot in ancestors_of(metadata.current_snapshot(), metadata):
                props = _summary(snapshot)
                if props.get(SINK_ID) != sink_id:
                    continue
                query_id = props.get(QUERY_ID, "")
                batch_text = props.get(BATCH_ID, "")
                if query_id not in dropped and batch_text.isdigit():
                    found.append(LedgerEntry(sink_id, int(batch_text), query_id))
                if TAKEOVER_OF in props:
                    dropped.add(props[TAKEOVER_OF])
            carried = carried_entry(dict(metadata.properties), sink_id)
            if carried is not None and carried.query_id not in dropped and carried not in found:
                found.append(carried)  # older than every snapshot of the branch
            self._entries[sink_id] = found
        return self._entries[sink_id]

    def owners(self, sink_id: str) -> set[str]:
        return {e.query_id for e in self.entries(sink_id) if e.query_id != self.takeover_of}

    def get(self, sink_id: str, batch_id: int) -> LedgerEntry | None:
        for entry in self.entries(sink_id):
            if entry.batch_id == batch_id and entry.query_id != self.takeover_of:
                return entry
        return None

    def drop_query(self, sink_id: str, query_id: str) -> None:
        self.takeover_of = query_id
