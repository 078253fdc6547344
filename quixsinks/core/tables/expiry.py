"""Snapshot expiry of the table layer (iceberg's ``keep_snapshots`` and
``expire_snapshots_older_than``, tsdatalake's ``catalog_keep_snapshots``).

Expiry keeps commit time flat (pyiceberg copies the whole history at every commit) but
the history is also the ledger (:mod:`.ledger`): a streaming query restarted from its
checkpoint replays its last micro-batch, and only the snapshot that recorded it tells
the sink the batch is in the table already. So:

* on the main branch's ancestry (newest first), the snapshots the options keep are the
  newest ``keep_snapshots`` and those younger than ``expire_snapshots_older_than``; every
  snapshot newer than the oldest of them is kept too, so that what is expired is always
  the oldest part of the history (a takeover marker, ``quixsinks.takeover-of``, is never
  expired while older entries of the query it dropped are kept);
* the newest ledger entry of every streaming sink id whose snapshot is expired (the
  entry a restart of that query needs to recognise its last batch, and which names the
  query that owns the sink id for fencing) is carried into a table property in the same
  commit (:func:`carried_properties`; read back by :class:`.ledger.SnapshotLedgerStore`);
  a carried entry is removed once the sink id has a newer entry on the kept branch.
  Batch writes (no query id) are never replayed and need no entry;
* snapshots a branch or tag names are never expired; snapshots off the main branch that
  nothing names are expired by the same age rule. A named snapshot older than an expired
  one is cut off the main branch's ancestry all the same, so its entries are carried too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from quixsinks.core.ledger import LedgerEntry

from .catalog import TableCatalog
from .ledger import BATCH_ID, CARRIED_PREFIX, QUERY_ID, SINK_ID, carried_entry, carried_value

__all__ = ["BULK_MAX", "carried_properties", "expire_old_snapshots", "snapshots_to_expire"]

#: snapshots are expired in bulk, once the expirable ones outnumber the kept ones or
#: this many (one extra commit per that many micro-batches)
BULK_MAX = 100


def _props(snapshot: Any) -> dict[str, str]:
    summary = snapshot.summary
    return {} if summary is None else dict(summary.additional_properties)


def carried_properties(metadata: Any, expired: set[int]) -> tuple[dict[str, str], list[str]]:
    """The table properties to set and to remove so that expiring ``expired`` keeps the
    newest ledger entry of every streaming sink id (see the module docstring).

    An entry is carried when its snapshot leaves the main branch's ancestry, which the
    ledger walks: when it is expired, and also when it is older than an expired snapshot
    although a tag or another branch keeps it (the walk stops at the first missing
    parent)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = metadata.current_snapshot()
    ancestry = [] if current is None else list(ancestors_of(current, metadata))
    first_gone = next((i for i, s in enumerate(ancestry) if s.snapshot_id in expired), None)
    off_branch = set(expired)
    if first_gone is not None:
        off_branch.update(s.snapshot_id for s in ancestry[first_gone:])
    properties = dict(metadata.properties)
    newest: dict[str, tuple[int, LedgerEntry]] = {}
    for snapshot in ancestry:  # newest first: a sink id's first snapshot is its newest entry
        props = _props(snapshot)
        sink_id, query_id = props.get(SINK_ID), props.get(QUERY_ID)
        batch_text = props.get(BATCH_ID, "")
        if sink_id is None or not query_id or not batch_text.isdigit() or sink_id in newest:
            continue
        newest[sink_id] = (snapshot.snapshot_id, LedgerEntry(sink_id, int(batch_text), query_id))
    to_set: dict[str, str] = {}
    to_remove: list[str] = []
    for sink_id, (snapshot_id, entry) in newest.items():
        key = CARRIED_PREFIX + sink_id
        if snapshot_id in off_branch:
            if carried_entry(properties, sink_id) != entry:
                to_set[key] = carried_value(entry)
        elif key in properties:
            to_remove.append(key)  # the kept branch holds a newer entry
    return to_set, to_remove


def snapshots_to_expire(
    metadata: Any, keep: int | None, cutoff_ms: int | None, *, bulk: bool = True
) -> list[int]:
    """The ids of the snapshots to expire now (empty: nothing, or not enough yet when
    ``bulk``); ``cutoff_ms``: snapshots older than this may go (None: no age rule)."""
    from pyiceberg.table.snapshots import ancestors_of

    if keep is None and cutoff_ms is None:
        return []
    current = metadata.current_snapshot()
    if current is None:
        return []
    ancestry = list(ancestors_of(current, metadata))
    kept_until = 1  # the current snapshot always stays
    for index, snapshot in enumerate(ancestry):
        if (keep is not None and index < keep) or (
            cutoff_ms is not None and snapshot.timestamp_ms >= cutoff_ms
        ):
            kept_until = max(kept_until, index + 1)
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    expire = [s.snapshot_id for s in ancestry[kept_until:] if s.snapshot_id not in protected]
    on_branch = {s.snapshot_id for s in ancestry}
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id in on_branch or snapshot.snapshot_id in protected:
            continue
        if cutoff_ms is None or snapshot.timestamp_ms < cutoff_ms:
            expire.append(snapshot.snapshot_id)
    if bulk and len(expire) <= min(len(metadata.snapshots) - len(expire), BULK_MAX):
        return []
    return expire


def expire_old_snapshots(
    table: Any,
    load_table: Callable[[], Any],
    catalog: TableCatalog,
    cutoff_ms: int | None,
    *,
    table_name: str,
    log: logging.Logger,
) -> None:
    """Expire what :func:`snapshots_to_expire` names, in one commit that also carries the
    ledger entries a restart needs (:func:`carried_properties`) and is refused if the main
    branch moved meanwhile; ``catalog.keep_snapshots`` and ``cutoff_ms`` say what is kept.
    Best effort, after the data is committed: a failure is logged (secrets scrubbed).

    ``table`` is the table as the batch's commit left it: when its history has nothing to
    expire yet (most micro-batches, expiry goes in bulk) the catalog is not asked again;
    else the table is loaded afresh with ``load_table`` and the expiry decided on that.
    """
    keep, sink = catalog.keep_snapshots, catalog.sink
    try:
        if not snapshots_to_expire(table.metadata, keep, cutoff_ms):
            return
        table = load_table()
        old = snapshots_to_expire(table.metadata, keep, cutoff_ms)
        if old:
            _expire(table, old)
            log.info("%s: expired %d old snapshots of %s", sink, len(old), table_name)
    except Exception as exc:
        log.warning(
            "%s: expiring old snapshots of %s failed (the data is committed): %s",
            sink,
            table_name,
            catalog.scrub(str(exc)),
        )


def _expire(table: Any, old: list[int]) -> None:
    from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    from .pyiceberg_compat import commit_transaction, transaction

    meta = table.metadata
    to_set, to_remove = carried_properties(meta, set(old))
    tx = transaction(table)
    ExpireSnapshots(tx).by_ids(old).commit()
    if to_set:
        tx.set_properties(to_set)
    if to_remove:
        tx.remove_properties(*to_remove)
    commit_transaction(
        table,
        tx,
        AssertTableUUID(uuid=meta.table_uuid),
        AssertRefSnapshotId(ref="main", snapshot_id=meta.current_snapshot_id),  # type: ignore[call-arg]
    )
