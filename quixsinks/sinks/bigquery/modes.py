"""The BigQuery sink's two write modes behind one interface.

- :class:`ExactlyOnce` (``write_mode=exactly-once``): tasks append to PENDING streams on the
  staging table ``<table>_qs_staging``, rows tagged with the attempt's token; the driver
  fences the ledger, commits the streams, then runs one transaction that moves the winning
  tokens' rows to the target and writes the ledger row; then deletes the batch's staging
  rows (and stale ones).
- :class:`Direct` (``write_mode=direct``): PENDING streams straight on the target,
  committed together by the driver: at-least-once across driver restarts.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import pyarrow as pa

from quixsinks.core.backpressure import RetryStats
from quixsinks.core.batch import WriteContext, name_prefix
from quixsinks.core.errors import DestinationError, QuixSinksError
from quixsinks.core.ledger import Ledger, LedgerEntry, log_already_committed
from quixsinks.core.sink import CommitContext, Task

from .client import run_query
from .ddl import ensure_table
from .ledger import LEDGER_FIELDS, BigQueryLedgerStore, commit_transaction, literal, sql_table
from .options import BigQueryOptions
from .schema import STAGED_AT_COLUMN, TOKEN_COLUMN, BQField, quote, staging_table_name
from .streams import StagedStream, commit_streams
from .wire import tagged

__all__ = ["Direct", "ExactlyOnce", "WriteMode", "write_mode"]

logger = logging.getLogger("quixsinks.sinks.bigquery")

_STAGING_EXTRA = (BQField(TOKEN_COLUMN, "STRING"), BQField(STAGED_AT_COLUMN, "TIMESTAMP"))


class WriteMode(ABC):
    """Where tasks append and how the driver makes a micro-batch visible."""

    def __init__(self, options: BigQueryOptions) -> None:
        self.options = options

    @abstractmethod
    def preflight(self) -> None:
        """Driver, once: the mode's own tables."""

    @abstractmethod
    def check_fence(self, task: Task) -> None:
        """Executor, before any data moves."""

    @abstractmethod
    def ensure(self, target: list[BQField]) -> list[BQField]:
        """The columns of the table tasks append to, given the target's."""

    @abstractmethod
    def stage(self, data: pa.Table, context: WriteContext) -> tuple[str, pa.Table, str]:
        """The table to append to, ``data`` as it is appended there, the attempt's token."""

    @abstractmethod
    def commit(
        self,
        context: CommitContext,
        streams: list[StagedStream],
        *,
        overwrite: bool,
        record: Callable[[], str] | None = None,
    ) -> None:
        """Driver: make the batch's streams visible (``record``: the commit record's JSON,
        made just before a ledger row is written)."""

    @abstractmethod
    def abort(self, context: CommitContext) -> None:
        """Driver: clean up after a failed micro-batch (uncommitted streams never show)."""


class Direct(WriteMode):
    """PENDING streams on the target, committed together; at-least-once."""

    def preflight(self) -> None:
        return None  # no tables of its own

    def check_fence(self, task: Task) -> None:
        return None  # no ledger

    def abort(self, context: CommitContext) -> None:
        return None  # uncommitted PENDING streams are never visible

    def ensure(self, target: list[BQField]) -> list[BQField]:
        return target

    def stage(self, data: pa.Table, context: WriteContext) -> tuple[str, pa.Table, str]:
        return self.options.table_path, data, ""

    def commit(
        self,
        context: CommitContext,
        streams: list[StagedStream],
        *,
        overwrite: bool,
        record: Callable[[], str] | None = None,
    ) -> None:
        commit_streams(self.options, self.options.table_path, streams)


class ExactlyOnce(WriteMode):
    """Staging table, fenced ledger, one transaction per micro-batch; exactly-once."""

    @property
    def staging_id(self) -> str:
        o = self.options
        return f"{o.project_id}.{o.dataset_id}.{staging_table_name(o.table_name)}"

    def ledger(self, *, takeover: bool = True) -> Ledger:
        store = BigQueryLedgerStore(self.options)
        return self.options.ledger(store) if takeover else Ledger(store)

    def preflight(self) -> None:
        ensure_table(
            self.options, BigQueryLedgerStore(self.options).table_id, LEDGER_FIELDS, internal=True
        )

    def check_fence(self, task: Task) -> None:
        ctx = task.context
        task.retry(lambda: self.ledger().check(ctx.sink_id, ctx.query_id), what="bigquery fence")

    def ensure(self, target: list[BQField]) -> list[BQField]:
        return ensure_table(
            self.options, self.staging_id, [*target, *_STAGING_EXTRA], internal=True
        )

    def stage(self, data: pa.Table, context: WriteContext) -> tuple[str, pa.Table, str]:
        token = f"{name_prefix(context.sink_id, context.query_id)}/{context.batch_id}/"
        token += context.attempt_id
        return self.staging_id, tagged(data, token), token

    def commit(
        self,
        context: CommitContext,
        streams: list[StagedStream],
        *,
        overwrite: bool,
        record: Callable[[], str] | None = None,
    ) -> None:
        self.options.retry_policy().call(
            lambda: self._commit_once(context, streams, overwrite, record),
            stats=RetryStats(),
            what=f"bigquery commit of batch {context.batch_id}",
        )

    def _commit_once(
        self,
        context: CommitContext,
        streams: Sequence[StagedStream],
        overwrite: bool,
        record: Callable[[], str] | None,
    ) -> None:
        sink_id, batch_id, query_id = context.sink_id, context.batch_id, context.query_id
        if self.ledger().committed(sink_id, batch_id, query_id):  # fenced first
            log_already_committed(sink_id, batch_id)
            self._clean_after_commit(context)
            return
        commit_streams(self.options, self.staging_id, streams)
        columns: list[str] = []
        for s in streams:
            columns.extend(n for n in s.columns if n not in columns)
        sql = commit_transaction(
            self.options,
            LedgerEntry(sink_id, batch_id, query_id),
            record=record() if record is not None else None,
            target=self.options.table_path,
            staging=self.staging_id,
            columns=columns,
            tokens=sorted({s.token for s in streams if s.rows}),
            overwrite=overwrite,
            prune=context.ledgered,
            staged_rows=sum(s.rows for s in streams),
        )
        try:
            run_query(self.options, sql, settle=True)
        except DestinationError:
            # the guard's ERROR(): another query wrote under this sink id meanwhile
            self.ledger(takeover=False).check(sink_id, query_id)
            raise
        self._clean_after_commit(context)

    def _clean_after_commit(self, context: CommitContext) -> None:
        """The batch has landed: a failed cleanup must not fail it. Staging rows of losing
        attempts are never read (the target takes the winners' tokens only) and are swept by
        age in a later commit."""
        try:
            self._clean_staging(context)
        except QuixSinksError as exc:
            logger.warning(
                "bigquery: batch %d of %s landed, but deleting its staging rows failed (%s); "
                "a later commit sweeps them",
                context.batch_id,
                context.sink_id,
                exc,
            )

    def _clean_staging(self, context: CommitContext) -> None:
        """Delete the batch's staging rows (every attempt's), stale ones of any query, and
        the ledger rows of a batch write without the key (they only made a retried commit
        idempotent)."""
        prefix = f"{name_prefix(context.sink_id, context.query_id)}/{context.batch_id}/"
        seconds = int(self.options.staging_max_age_hours * 3600)
        run_query(
            self.options,
            f"DELETE FROM {sql_table(self.staging_id)} WHERE "
            f"STARTS_WITH({quote(TOKEN_COLUMN)}, {literal(prefix)}) OR "
            f"{quote(STAGED_AT_COLUMN)} < TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL "
            f"{seconds} SECOND)",
        )
        if not context.ledgered:
            BigQueryLedgerStore(self.options).forget(context.sink_id)

    def abort(self, context: CommitContext) -> None:
        entry = BigQueryLedgerStore(self.options).get(context.sink_id, context.batch_id)
        if entry is None or entry.query_id != context.query_id:  # not landed
            self._clean_staging(context)


_MODES: dict[str, type[WriteMode]] = {"exactly-once": ExactlyOnce, "direct": Direct}


def write_mode(options: BigQueryOptions) -> WriteMode:
    """The mode ``options.write_mode`` names."""
    return _MODES[options.write_mode](options)
