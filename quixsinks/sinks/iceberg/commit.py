"""One fenced snapshot per micro-batch: the commit loop the Iceberg sinks share.

:func:`append_once` loads the table, reads the batch's ledger entry from the main branch's
snapshot summaries (:mod:`.ledger`), and commits the data files as one append (or a
delete-all plus append, to overwrite) whose summary records the batch. pyiceberg's own
retry is bypassed: it would re-commit without re-checking our entry, so two committers of
one batch would both land. On a conflict, or when the catalog's answer was lost, the table
is reloaded, the ledger read again, and the commit tried again.

Used by the ``iceberg`` sink (data files written by pyiceberg) and by ``tsdatalake``'s
catalog registration (Hive-path Parquet files registered as they are).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from quixsinks.core.errors import CommitError, QuixSinksError, timed_out
from quixsinks.core.ledger import Ledger, log_already_committed
from quixsinks.core.sink import CommitContext

from .catalog import is_timeout
from .ledger import SnapshotLedgerStore, summary_properties

__all__ = ["AppendOutcome", "append_once"]

logger = logging.getLogger("quixsinks.sinks.iceberg")


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


def append_once(
    context: CommitContext,
    files: Sequence[Any],
    *,
    load_table: Callable[[], Any],
    ledger: Callable[[SnapshotLedgerStore], Ledger],
    table_name: str,
    max_attempts: int,
    overwrite: bool = False,
    scrub: Callable[[str], str] = str,
    forget_client: Callable[[], None] = lambda: None,
    sink: str = "iceberg",
    timeout_seconds: float | None = None,
) -> AppendOutcome:
    """Commit ``files`` (pyiceberg ``DataFile`` entries) as one snapshot of this batch,
    unless the table's ledger already holds the batch.

    Args:
        load_table: loads the table afresh (raises a QuixSinksError when it cannot).
        ledger: the fenced ledger over a loaded table's summaries (``options.ledger``).
        scrub: takes secrets out of an error's text before it is logged or raised.
        forget_client: drops a cached catalog client after a transport error.
        sink: the sink's name, first word of every log line and error.
        timeout_seconds: ``catalog_timeout_seconds``, named when the last attempt timed out.

    Raises:
        LedgerFenceError: another streaming query owns the sink id.
        CommitError: the batch was not committed after ``max_attempts`` tries.
    """
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.table.update import AssertTableUUID

    last: BaseException | None = None
    for attempt in range(max_attempts):
        table = load_table()
        store = SnapshotLedgerStore(table)
        if ledger(store).committed(context.sink_id, context.batch_id, context.query_id):
            log_already_committed(context.sink_id, context.batch_id, f"{sink}: {table_name}")
            return AppendOutcome(table, already_committed=True)
        props = summary_properties(
            context.sink_id, context.batch_id, context.query_id, store.takeover_of
        )
        tx = table.transaction()
        if overwrite:
            tx.delete(AlwaysTrue(), snapshot_properties=props)
        if files:
            updater = tx.update_snapshot(snapshot_properties=props)
            merge = table.metadata.properties.get("commit.manifest-merge.enabled") == "true"
            with updater.merge_append() if merge else updater.fast_append() as append:
                for data_file in files:
                    append.append_data_file(data_file)
        requirements = (*tx._requirements, AssertTableUUID(uuid=table.metadata.table_uuid))
        try:
            response = table.catalog.commit_table(table, requirements, tx._updates)
        except (CommitFailedException, CommitStateUnknownException) as exc:
            last = exc
            logger.warning(
                "%s: commit of batch %d to %s: %s (attempt %d of %d); reloading the table "
                "and checking whether the batch landed",
                sink,
                context.batch_id,
                table_name,
                type(exc).__name__,
                attempt + 1,
                max_attempts,
            )
            time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0))
            continue
        except QuixSinksError:
            raise
        except Exception as exc:  # an error of the catalog's transport: outcome unknown
            last = exc
            forget_client()
            logger.warning(
                "%s: commit of batch %d to %s failed with %s (attempt %d of %d)",
                sink,
                context.batch_id,
                table_name,
                scrub(f"{type(exc).__name__}: {exc}"),
                attempt + 1,
                max_attempts,
            )
            time.sleep(min(2.0, 0.05 * 2**attempt))
            continue
        table.metadata = response.metadata
        table.metadata_location = response.metadata_location
        return AppendOutcome(table, already_committed=False)
    reason = scrub(f"{type(last).__name__}: {last}")
    if timeout_seconds is not None and is_timeout(last):
        reason = f"{timed_out(timeout_seconds, 'catalog_timeout_seconds')}: {reason}"
    raise CommitError(
        f"{sink}: batch {context.batch_id} was not committed to {table_name} after "
        f"{max_attempts} attempts (commit_max_attempts): {reason}"
    )
