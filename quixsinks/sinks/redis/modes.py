"""The two ways the redis sink writes a batch, behind one interface (:class:`WriteMode`).

* :class:`Overwrite` (``string``, ``hash``, ``set``, ``zset``): every command overwrites the
  same key, field or member with the same value, so the tasks write straight to the keys
  and the driver has nothing to commit: a replay leaves Redis as one run would.
* :class:`Append` (``list``, ``stream``): ``RPUSH`` and ``XADD`` append, so tasks stage their
  entries in staging hashes and the driver appends them with one Lua script under the
  fenced ledger (:mod:`.ledger`): exactly-once.
"""

from __future__ import annotations

import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.batch import SinkBatch, name_prefix
from quixsinks.core.errors import (
    CommitError,
    DestinationError,
    LedgerFenceError,
    QuixSinksError,
    RecordError,
)
from quixsinks.core.ledger import log_already_committed
from quixsinks.core.sink import CommitContext, Receipt, Task, staged_in_order

from .client import RedisClient
from .ledger import (
    COMMIT_SCRIPT,
    RedisLedgerStore,
    StagedHash,
    ledger_key,
    records_key,
    registry_key,
    staged_totals,
    staging_key,
)
from .options import APPENDING, RedisOptions
from .wire import Commands, RespEncoder

__all__ = ["Append", "Overwrite", "WriteMode", "write_mode"]

R = TypeVar("R")


class Sent(NamedTuple):
    """What sending a batch's commands came to: the commands sent, and the rows (of the
    commands' batch) the server refused for what they hold, with why."""

    commands: int
    refused: list[tuple[int, str]]


#: sends a batch's commands (under the task's RetryPolicy)
Send = Callable[[SinkBatch, Commands], Sent]


def retried(task: Task | None, fn: Callable[[], R], what: str) -> R:
    """``fn`` under the task's RetryPolicy (once, when called without a task: tests)."""
    return task.retry(fn, what=what) if task is not None else fn()


class WriteMode(ABC):
    """What a data type does on the executors (write, fence check) and on the driver."""

    def __init__(self, options: RedisOptions, client: RedisClient, logger: logging.Logger):
        self.options = options
        self.client = client
        self.logger = logger

    @abstractmethod
    def write(self, batch: SinkBatch, encoder: RespEncoder, send: Send) -> StagedHash | None:
        """Encode and send one batch; what it staged, if anything."""

    @abstractmethod
    def check_fence(self, task: Task) -> None:
        """Fail before any data moves when another query owns the sink id."""

    @abstractmethod
    def commit(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        """Finish a micro-batch on the driver."""

    @abstractmethod
    def abort(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        """Clean up what the tasks staged."""


class Overwrite(WriteMode):
    """``string``, ``hash``, ``set``, ``zset``: overwrites, nothing to commit."""

    def write(self, batch: SinkBatch, encoder: RespEncoder, send: Send) -> StagedHash | None:
        commands, skipped = encoder.commands(batch)
        if skipped:
            batch.count("skipped_null_keys", skipped)
        sent = send(batch, commands)
        # every other row landed; an overwrite sent again (a task retry, a replay) is
        # harmless, so a refusal never has to undo anything
        rows = commands.batch if commands.batch is not None else batch
        for row, why in sent.refused:
            rows.refuse(row, RecordError(why, row=row))
        return None

    def check_fence(self, task: Task) -> None:
        """Nothing to fence: overwrites keep no ledger."""

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        """Nothing to commit: the tasks wrote the keys."""

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        """Nothing staged."""


class Append(WriteMode):
    """``list``, ``stream``: staged by the tasks, appended by one fenced Lua commit."""

    @property
    def _staging_ttl_ms(self) -> int:
        return int(self.options.staging_max_age_hours * 3_600_000)

    def write(self, batch: SinkBatch, encoder: RespEncoder, send: Send) -> StagedHash | None:
        opts, ctx, task = self.options, batch.context, batch.task
        staging = staging_key(
            opts.key_prefix, ctx.name_prefix, ctx.batch_id, ctx.partition_id, ctx.attempt_id
        )
        # a key of another type is refused here, before staging: the commit then finds
        # every target key of the right type (unless one changes type in between)
        check = functools.partial(self._wrong_type, task)
        commands, skipped = encoder.staged_commands(batch, staging, check)
        # registered before any entry lands: the next commit deletes it if this attempt
        # dies; it also expires (staging_max_age_hours)
        registry = registry_key(opts.key_prefix, ctx.name_prefix)
        for command in (("SADD", registry, staging), ("PEXPIRE", registry, self._staging_ttl_ms)):
            retried(
                task, functools.partial(self.client.command, *command), "redis staging registry"
            )
        if skipped:
            batch.count("skipped_null_keys", skipped)
        sent = send(batch, commands)
        if sent.refused:  # an HSET into our own staging hash: never about the row
            row, why = sent.refused[0]
            raise DestinationError(f"{self.client.where}: staging row {row} failed: {why}")
        if not sent.commands:
            return None
        # a staging hash no commit names (a failed attempt) expires
        expire = ("PEXPIRE", staging, self._staging_ttl_ms)
        retried(task, lambda: self.client.command(*expire), "redis staging expiry")
        return StagedHash(staging, sent.commands)  # one HSET per staged entry

    def _wrong_type(self, task: Task | None, keys: pa.Array) -> pa.Array | None:
        """True for each key that holds a value of another type than the data type's (one
        ``TYPE`` per distinct key, pipelined); None when none does."""
        distinct = pc.unique(keys)
        names = distinct.to_pylist()
        if not names:
            return None
        redis = self.client.redis()

        def types() -> list[Any]:
            pipe = redis.pipeline(transaction=False)
            for name in names:
                pipe.type(name)
            return list(pipe.execute())

        found = retried(task, lambda: self.client.call(types), "redis key types")
        wanted = self.options.data_type.encode()
        wrong = [
            name
            for name, kind in zip(names, found, strict=True)
            if (kind.encode() if isinstance(kind, str) else kind) not in (b"none", wanted)
        ]
        if not wrong:
            return None
        return pc.is_in(keys, value_set=pa.array(wrong, keys.type))

    def check_fence(self, task: Task) -> None:
        ctx = task.context
        if not ctx.ledgered:
            return
        ledger = self.options.ledger(RedisLedgerStore(self.client.redis(), self.options.key_prefix))
        task.retry(
            lambda: self.client.call(lambda: ledger.check(ctx.sink_id, ctx.query_id)),
            what="redis fence check",
        )

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        opts, call = self.options, self.client.call
        redis = self.client.redis()
        ledger = opts.ledger(RedisLedgerStore(redis, opts.key_prefix))
        policy = opts.retry_policy()
        committed = policy.call(
            lambda: call(
                lambda: ledger.committed(context.sink_id, context.batch_id, context.query_id)
            ),
            what="redis ledger fence",
        )
        staged = staged_totals(staged_in_order(receipts))
        keys = [
            ledger_key(opts.key_prefix, context.sink_id),
            registry_key(opts.key_prefix, name_prefix(context.sink_id, context.query_id)),
            records_key(opts.key_prefix, context.sink_id),
            *staged,
        ]
        record = context.commit_record(receipts).to_json() if context.ledgered else ""
        args = [
            str(context.batch_id),
            context.query_id,
            opts.data_type,
            str(opts.stream_maxlen or 0),
            str(opts.ledger_keep_batches),
            record,
            *(str(entries) for entries in staged.values()),
        ]
        script = redis.register_script(COMMIT_SCRIPT)
        result = policy.call(
            lambda: call(lambda: script(keys=keys, args=args)), what="redis commit script"
        )
        code = int(result[0])
        detail = result[1].decode() if isinstance(result[1], bytes) else result[1]
        if code == -1:
            raise LedgerFenceError(
                sink_id=context.sink_id, owner_query_id=detail, query_id=context.query_id
            )
        if code == -2:
            self.abort(context, receipts)
            raise CommitError(
                f"{self.client.where}: the key {detail!r} holds a value of another type than "
                f"{opts.data_type}; it changed type after the tasks checked it. Nothing of "
                f"batch {context.batch_id} was appended: restart the query (the replay refuses "
                "that key's rows as on_error says), or delete the key"
            )
        if code == -3:
            self.abort(context, receipts)
            raise self._staging_lost(context, detail, *(int(n) for n in result[2:5]))
        if not context.ledgered:  # an unkeyed batch write is never seen again: no ledger key
            try:
                call(lambda: redis.delete(keys[0], keys[2]))
            except QuixSinksError as exc:  # the entries are appended: the write succeeded
                self.logger.warning(
                    "batch %s was appended, but deleting its write's ledger keys failed "
                    "(%s); they hold one entry and are harmless",
                    context.batch_id,
                    exc,
                )
        if committed:  # before the script, which found the entry too and appended nothing
            log_already_committed(context.sink_id, context.batch_id)
            return
        self.logger.info("batch %s: %s %s entries appended", context.batch_id, code, opts.data_type)

    def _staging_lost(
        self, context: CommitContext, staging: str, expected: int, found: int, short: int
    ) -> CommitError:
        others = f" (and {short - 1} more staging hash(es) of the batch)" if short > 1 else ""
        again = (
            "restart the query from its checkpoint to write the micro-batch again (it is "
            "staged anew)"
            if context.streaming
            else "run the write again"
        )
        return CommitError(
            f"{self.client.where}: micro-batch {context.batch_id} of sink {context.sink_id} "
            f"cannot be committed: a task staged {expected} {self.options.data_type} entries "
            f"in {staging!r}, but the server holds {found}{others}. Staged entries were lost "
            "between the tasks' writes and this commit (a server restart without persistence "
            "or within its fsync window, a failover to a replica that missed writes, the hash "
            "evicted by maxmemory-policy, deleted, or expired after staging_max_age_hours). "
            f"Nothing was appended and the micro-batch is not recorded: {again}."
        )

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        staged = list(staged_totals(s for r in receipts for s in r.staged))
        if not staged:
            return
        redis = self.client.redis()
        registry = registry_key(
            self.options.key_prefix, name_prefix(context.sink_id, context.query_id)
        )
        self.client.call(lambda: redis.delete(*staged))
        self.client.call(lambda: redis.srem(registry, *staged))


def write_mode(options: RedisOptions, logger: logging.Logger) -> WriteMode:
    """The mode of ``options.data_type``."""
    kind = Append if options.data_type in APPENDING else Overwrite
    return kind(options, RedisClient(options), logger)
