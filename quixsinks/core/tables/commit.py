"""One fenced snapshot per micro-batch: the commit loop of the table layer.

:func:`append_once` loads the table, reads the batch's ledger entry from the main branch's
snapshot summaries (:mod:`.ledger`), and commits the data files as one append (or a
delete-all plus append, to overwrite) whose summary records the batch. pyiceberg's own
retry is bypassed: it would re-commit without re-checking our entry, so two committers of
one batch would both land. On a conflict, or when the catalog's answer was lost, core's
:class:`~quixsinks.core.backpressure.RetryPolicy` runs the attempt again: the table is
reloaded, the ledger read again, and the commit tried again.

A process's next commit to the same table starts from the table its last commit left
instead of loading it (a load parses the whole metadata again, every snapshot included).
That is safe because every commit asserts what it read: the table's UUID, the main
branch's snapshot (pyiceberg's own requirement), the current schema and the default
partition spec. A table that changed since (another writer's snapshot, a takeover, a
schema change) is refused by the catalog, and the commit goes on from a fresh load: a
ledger entry another committer added is then seen before anything is committed. What is
decided without a commit (the batch is in the ledger already; another query owns the
sink id; the data files hold a column the table no longer has) is decided again on a
fresh load, since nothing checks it.

The data files' columns are checked against the table's current schema (their field
ids): a column another writer dropped after the batch was planned fails the commit with
:class:`ColumnsGone` instead of landing values that read as null.

Used by the ``iceberg`` sink (data files written by pyiceberg) and by ``tsdatalake``'s
catalog registration (Hive-path Parquet files registered as they are).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from quixsinks.core.backpressure import RetryPolicy
from quixsinks.core.clients import ClientPool
from quixsinks.core.errors import (
    CommitError,
    LedgerFenceError,
    QuixSinksError,
    RetryableError,
    timed_out,
)
from quixsinks.core.ledger import log_already_committed
from quixsinks.core.sink import CommitContext

from .catalog import TableCatalog, forget_catalog, is_timeout
from .ledger import SnapshotLedgerStore, summary_properties

__all__ = ["AppendOutcome", "ColumnsGone", "TableRaced", "append_once", "retry_races"]

R = TypeVar("R")

#: (catalog, table name) -> the table as this process's last commit left it. The next
#: commit's first attempt starts from it instead of loading the table (the catalog's
#: answer and the whole metadata parsed again, which grows with the history): the commit
#: asserts that the main branch, the schema and the partition spec are still those it
#: read, so a table changed since is refused by the catalog, then loaded and committed
#: again. One per key, lent to one commit at a time.
_COMMITTED: ClientPool[Any] = ClientPool("committed tables", lambda table: None, max_idle=1)


class TableRaced(RetryableError):
    """Another writer changed the table first (its schema, or created it): load it again
    and try again (:func:`retry_races`)."""


def retry_races(attempt: Callable[[], R], *, attempts: int, what: str, backoff: float) -> R:
    """Run ``attempt`` until it does not raise :class:`TableRaced`, at most ``attempts``
    times, through core's RetryPolicy (jittered pauses up to ``backoff`` x 10: racers
    spread); the last TableRaced when every attempt lost."""
    policy = RetryPolicy(
        max_attempts=attempts,
        initial_backoff=backoff,
        max_backoff=backoff * 10,
        deadline=float("inf"),
    )
    return policy.call(attempt, what=what)


class ColumnsGone(CommitError):
    """The batch's data files hold columns the table no longer has: another writer dropped
    them (perhaps adding one of the same name, with a new field id) after the query planned
    the batch. Committed, those values would read as null or not at all."""


def _columns_gone(table: Any, files: Sequence[Any]) -> list[int]:
    """The field ids the data files hold values of that the table's current schema lacks."""
    from pyiceberg.schema import index_by_id

    known = index_by_id(table.metadata.schema())
    written: set[int] = set()
    for data_file in files:
        for stats in (data_file.value_counts, data_file.null_value_counts):
            written.update(stats or {})
    return sorted(written - set(known))


@dataclass(frozen=True)
class AppendOutcome:
    """How :func:`append_once` ended.

    Attributes:
        table: the table as last loaded (after the commit when it landed now).
        already_committed: the ledger held the batch before this commit (a replay, or an
            earlier commit whose answer was lost).
    """

    table: Any
    already_committed: bool


class _Unsettled(RetryableError):
    """A commit attempt that did not land (a conflict) or whose outcome is unknown."""

    def __init__(
        self, message: str, cause: BaseException | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.cause = cause


def append_once(
    context: CommitContext,
    files: Sequence[Any],
    *,
    catalog: TableCatalog,
    load_table: Callable[[], Any],
    table_name: str,
    overwrite: bool = False,
    record: Callable[[], str] | None = None,
) -> AppendOutcome:
    """Commit ``files`` (pyiceberg ``DataFile`` entries) as one snapshot of this batch,
    unless the table's ledger already holds the batch.

    Args:
        catalog: the catalog and its commit rules (attempts, fencing, secrets to scrub).
        load_table: loads the table afresh (raises a QuixSinksError when it cannot).
        record: the batch's commit record (JSON), made just before each commit attempt and
            stored in the snapshot summary (``quixsinks.record``); None: no record.

    Raises:
        LedgerFenceError: another streaming query owns the sink id.
        CommitError: the batch was not committed after ``commit_max_attempts`` tries.
    """
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.table.update import AssertCurrentSchemaId, AssertDefaultSpecId, AssertTableUUID

    from .pyiceberg_compat import commit_transaction, transaction

    sink = catalog.sink
    where = f"{sink}: commit of batch {context.batch_id} to {table_name}"
    key = (catalog.key, table_name)
    kept: list[Any] = [_COMMITTED.take(key, lambda: None)]

    def attempt() -> AppendOutcome:
        table = kept.pop() if kept else None
        if table is None:
            return settle(load_table())
        # the table as this process's last commit left it: the catalog checks a commit made
        # from it, but nothing checks a decision made without committing ("committed
        # already": the main branch may have been rolled back or the table recreated
        # since; a fence error: the ledger may have been reset), so those are made again
        # on the current table; a commit refused because the table changed since is made
        # again from the current table in the same attempt (no other committer raced this
        # one: commit_max_attempts counts those races)
        try:
            outcome = settle(table)
        except (LedgerFenceError, ColumnsGone):
            return settle(load_table())
        except _Unsettled as exc:
            if not isinstance(exc.cause, CommitFailedException):
                raise
            return settle(load_table())
        return settle(load_table()) if outcome.already_committed else outcome

    def settle(table: Any) -> AppendOutcome:
        store = SnapshotLedgerStore(table)
        if catalog.ledger(store).committed(context.sink_id, context.batch_id, context.query_id):
            log_already_committed(context.sink_id, context.batch_id, f"{sink}: {table_name}")
            return AppendOutcome(table, already_committed=True)
        gone = _columns_gone(table, files)
        if gone:
            raise ColumnsGone(
                f"{where}: its data files hold columns the table no longer has (field ids "
                f"{', '.join(map(str, gone))}): another writer changed the table's schema "
                "after the batch was planned, and the values would read as null. Nothing "
                "is committed; restart the query: the batch is planned again against the "
                "current table"
            )
        props = summary_properties(
            context.sink_id,
            context.batch_id,
            context.query_id,
            store.takeover_of,
            record=None if record is None else record(),
        )
        tx = transaction(table)
        if overwrite:
            tx.delete(AlwaysTrue(), snapshot_properties=props)
        if files:
            updater = tx.update_snapshot(snapshot_properties=props)
            merge = table.metadata.properties.get("commit.manifest-merge.enabled") == "true"
            with updater.merge_append() if merge else updater.fast_append() as append:
                for data_file in files:
                    append.append_data_file(data_file)
        metadata = table.metadata
        try:
            commit_transaction(
                table,
                tx,
                AssertTableUUID(uuid=metadata.table_uuid),
                AssertCurrentSchemaId(current_schema_id=metadata.current_schema_id),  # type: ignore[call-arg]
                AssertDefaultSpecId(default_spec_id=metadata.default_spec_id),  # type: ignore[call-arg]
            )
        except (CommitFailedException, CommitStateUnknownException) as exc:
            raise _Unsettled(
                f"{where}: {type(exc).__name__}; reloading the table and checking whether "
                "the batch landed",
                exc,
            ) from exc
        except QuixSinksError:
            raise
        except Exception as exc:  # an error of the catalog's transport: outcome unknown
            forget_catalog(catalog)
            raise _Unsettled(
                f"{where} failed with {catalog.scrub(f'{type(exc).__name__}: {exc}')}", exc
            ) from exc
        return AppendOutcome(table, already_committed=False)

    policy = RetryPolicy(
        max_attempts=catalog.commit_max_attempts,
        initial_backoff=0.1,
        max_backoff=2.0,
        deadline=float("inf"),  # each attempt is bounded by the catalog's timeout
    )
    try:
        outcome = policy.call(attempt, what=where)
        # a shallow copy: the caller goes on with its table (expiry commits through it)
        _COMMITTED.give_back(key, copy.copy(outcome.table), keep=True)
        return outcome
    except _Unsettled as exc:
        # the policy raises a copy of the last attempt's error, chained to it
        last = getattr(exc.__cause__, "cause", None) or getattr(exc, "cause", None)
    reason = catalog.scrub(f"{type(last).__name__}: {last}")
    if is_timeout(last):
        reason = f"{timed_out(catalog.timeout_seconds, catalog.timeout_option)}: {reason}"
    raise CommitError(
        f"{sink}: batch {context.batch_id} was not committed to {table_name} after "
        f"{catalog.commit_max_attempts} attempts (commit_max_attempts): {reason}"
    )
