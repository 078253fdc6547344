"""The sink contract, the per-task state, the receipt a task returns, and BatchingSink.

A sink is one class with three parts, in this order:

* **options**: a frozen :class:`CommonOptions` subclass (``options_class``);
* **executor**: ``setup(task)`` once per task, ``write(batch)`` for each
  :class:`~quixsinks.core.batch.SinkBatch` of the task's partition (returning a small,
  picklable item, e.g. a staged file, or None), ``close(task)`` at the end of the task.
  What a task opens (connections, counters, staging names) lives on its :class:`Task`
  (``batch.task``), never on the sink, which carries the driver's plan;
* **driver**: ``prepare(schema)`` while Spark plans the write (validation, cheap
  checks), then ``commit(context, receipts)`` once every task has succeeded, or
  ``abort(context, receipts)`` when one failed.

The Spark glue (``quixsinks.spark``) drives this contract; nothing here imports
pyspark. Everything set on the sink in ``__init__`` and ``prepare`` travels to the
executors by pickle, so clients are created lazily (``quixsinks.core.clients``).

To write a custom sink, subclass :class:`BatchingSink`, implement ``write`` and
register it with ``quixsinks.register(spark, MySink)`` (see docs/custom-sinks.md).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar

import pyarrow as pa

from .backpressure import RetryPolicy, RetryStats
from .batch import SinkBatch, WriteContext, ledgered
from .commits import CommitRecord
from .deadletters import OnError, Refusals, check_dead_letter_options
from .errors import OptionError, QuixSinksError
from .ledger import DEFAULT_KEEP_BATCHES, Ledger, LedgerStore, check_sink_id
from .options import SinkOptions, option
from .publish import StagedFile
from .records import AUTO, RecordSchema, ValueFormat

__all__ = [
    "BatchingSink",
    "CommitContext",
    "CommonOptions",
    "Guarantee",
    "LedgerOptions",
    "Receipt",
    "Sink",
    "Task",
    "small_batches",
    "staged_in_order",
]

Guarantee = Literal["exactly-once", "effectively exactly-once", "at-least-once"]
#: The largest ``batch_id`` option: integers up to 2**53 - 1 are exact in every ledger
#: store (Redis' Lua numbers, JSON readers).
MAX_BATCH_ID = 2**53 - 1
StagedT = TypeVar("StagedT")
OptionsT = TypeVar("OptionsT", bound="CommonOptions")
R = TypeVar("R")


#: ``max_batch_bytes`` of every sink (64 MiB): few, large SinkBatches
BATCH_BYTES = 64 * 1024 * 1024
#: ``max_batch_bytes`` of a sink that builds a Python object per row (:func:`small_batches`)
SMALL_BATCH_BYTES = 1024 * 1024


def small_batches(why: str) -> Any:
    """The ``max_batch_bytes`` option of a sink that sends its rows as messages or commands
    (a Python object or more per row, all built before a SinkBatch is sent): 1 MiB
    SinkBatches keep a task's memory flat whatever its partition's size, and cost nothing,
    since Spark hands the next batch over while one is being sent. ``why``: what this sink
    builds per row, for the option's doc."""
    return option(
        SMALL_BATCH_BYTES,
        minimum=1,
        doc="A task hands its rows to the sink in SinkBatches of about this many Arrow bytes "
        f"(1 MiB here, not 64: {why}; Spark prepares the next batch while one is being sent)",
    )


@dataclass(frozen=True, kw_only=True)
class CommonOptions(SinkOptions):
    """Options every sink accepts."""

    sink_id: str | None = option(
        None,
        doc="Stable id of this writer in the destination's ledger; default: the streaming "
        "query id (stable across restarts from a checkpoint); a batch write keeps one only "
        "with batch_id",
    )
    batch_id: int | None = option(
        None,
        minimum=0,
        doc="Batch writes only, with sink_id: the write's idempotency key, a number the job "
        "sets; a write whose (sink_id, batch_id) the sink's ledger holds writes nothing; see "
        "'Idempotent batch writes' in docs/index.md",
    )
    key_column: str = option(
        AUTO, doc="Column holding the record key; auto: `key` if present; none: no key"
    )
    timestamp_column: str = option(
        AUTO,
        doc="Column holding the record time (timestamp or "
        "integer ms); auto: `timestamp` if present; none: no time",
    )
    value_columns: tuple[str, ...] = option(
        (), doc="Comma-separated value columns; default: every other column"
    )
    value_format: ValueFormat = option(
        "auto",
        doc="auto: parse a Kafka `value` column as JSON; json: parse the single value "
        "column as JSON objects; columns: write the value columns as they are",
    )
    max_batch_bytes: int = option(
        BATCH_BYTES,
        minimum=1,
        doc="A task hands its rows to the sink in SinkBatches of about this many Arrow bytes",
    )
    read_ahead: bool = option(
        True,
        doc="A task keeps reading Spark's next rows (up to one more SinkBatch) while the sink "
        "writes the current SinkBatch, so Spark's hand-over overlaps the sink's work",
    )
    retry_max_attempts: int = option(5, minimum=1, doc="Attempts per write on a retryable error")
    retry_backoff_seconds: float = option(0.5, minimum=0, doc="First backoff pause")
    retry_max_backoff_seconds: float = option(30.0, minimum=0, doc="Longest backoff pause")
    retry_deadline_seconds: float = option(
        300.0, minimum=0, doc="No retry starts this many seconds after the first attempt"
    )
    on_error: OnError = option(
        "fail",
        doc="What a row the destination or an encoder refuses does (never a server, network, "
        "auth or throttling error): fail: the batch fails, naming the row; skip: the row is "
        "dropped and counted; dead_letter: the row goes to dead_letter_path, exactly once "
        "with its batch; see docs/errors.md",
    )
    dead_letter_path: str | None = option(
        None,
        doc="on_error=dead_letter: the directory of the refused rows, as JSON Lines (an "
        "absolute path, s3://, abfs[s]://, az:// or gs://)",
    )

    def validate(self) -> None:
        check_dead_letter_options(self)
        if self.sink_id is not None:
            try:
                check_sink_id(self.sink_id)
            except ValueError as exc:
                raise OptionError(str(exc), option="sink_id", value=self.sink_id) from None
        if self.batch_id is not None:
            if self.sink_id is None:
                raise OptionError(
                    f"option 'batch_id' ({self.batch_id}) needs option 'sink_id': the ledger "
                    "records a batch write under (sink_id, batch_id); set a sink_id that "
                    "stays the same when the job runs again",
                    option="batch_id",
                    value=str(self.batch_id),
                )
            if self.batch_id > MAX_BATCH_ID:
                raise OptionError(
                    f"option 'batch_id' has value {self.batch_id}, expected at most "
                    f"{MAX_BATCH_ID} (2**53 - 1)",
                    option="batch_id",
                    value=str(self.batch_id),
                    allowed=f"0 to {MAX_BATCH_ID}",
                )

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.retry_max_attempts,
            initial_backoff=self.retry_backoff_seconds,
            max_backoff=self.retry_max_backoff_seconds,
            deadline=self.retry_deadline_seconds,
        )

    def record_schema(self, schema: pa.Schema) -> RecordSchema:
        return RecordSchema.resolve(
            schema,
            key_column=self.key_column,
            timestamp_column=self.timestamp_column,
            value_columns=self.value_columns,
            value_format=self.value_format,
        )


@dataclass(frozen=True, kw_only=True)
class LedgerOptions(CommonOptions):
    """Options of the sinks that keep a fenced ledger (see quixsinks.core.ledger)."""

    takeover_query_id: str | None = option(
        None,
        doc="Hand the sink id over from this (finished) streaming query: its ledger entries "
        "are dropped; see 'Fencing' in docs/index.md",
    )
    ledger_keep_batches: int = option(
        DEFAULT_KEEP_BATCHES,
        minimum=1,
        doc="Ledger entries kept per sink id (those of the highest batch ids); at least "
        "spark.sql.streaming.minBatchesToRetain",
    )
    staging_max_age_hours: float = option(
        24.0,
        minimum=0.01,
        doc="Staged data this old that no commit names (a query that never ran again) is "
        "deleted by the next commit to the same destination",
    )

    def ledger(self, store: LedgerStore) -> Ledger:
        return Ledger(
            store, takeover_query_id=self.takeover_query_id, keep_batches=self.ledger_keep_batches
        )


@dataclass(frozen=True)
class CommitContext:
    """What the driver knows when it commits or aborts a micro-batch.

    Attributes:
        sink_id: the writer's stable id (see ``WriteContext.sink_id``).
        batch_id: the micro-batch id (a batch write: the ``batch_id`` option, or 0).
        streaming: True in Structured Streaming (Spark replays a failed micro-batch).
        query_id: the streaming query id, carried from the tasks in their receipts
            (a keyed batch write: :data:`~quixsinks.core.ledger.BATCH_WRITE_QUERY_ID`;
            empty for a batch write without the key); ledger entries are fenced by it.
    """

    sink_id: str
    batch_id: int
    streaming: bool
    query_id: str = ""
    #: the sink's format name (for commit records)
    sink: str = ""
    #: when the driver's commit started (``time.perf_counter``)
    started: float = field(default_factory=time.perf_counter, compare=False)

    def commit_record(self, receipts: list[Receipt[Any]]) -> CommitRecord:
        """The batch's :class:`~quixsinks.core.commits.CommitRecord`, timed now: a sink
        that stores records calls it just before it writes its ledger entry."""
        return CommitRecord.of(
            sink=self.sink,
            sink_id=self.sink_id,
            batch_id=self.batch_id,
            query_id=self.query_id,
            receipts=receipts,
            commit_seconds=time.perf_counter() - self.started,
        )

    @property
    def ledgered(self) -> bool:
        """Whether the batch is recorded in the sink's fenced ledger: streaming, or a keyed
        batch write (``sink_id`` and ``batch_id`` set). Sinks decide "ledger or not" on
        this, and on ``streaming`` only where a message speaks of restarting a query."""
        return ledgered(self.streaming, self.query_id)


class Task:
    """One task attempt on an executor: where a sink keeps what it opens for the task.

    Attributes:
        context: sink id, query id, batch id, partition and attempt of the task.
        counters: counts reported in the receipt (``SinkBatch.count`` adds to them).
        state: the sink's per-task objects (a connection, staging names...).
        stats: what retrying cost the task.
        refusals: the task's refused rows (``on_error``; see quixsinks.core.deadletters).
    """

    def __init__(
        self,
        context: WriteContext,
        policy: RetryPolicy | None = None,
        *,
        refusals: Refusals | None = None,
    ) -> None:
        self.context = context
        self.policy = policy or RetryPolicy()
        self.refusals = refusals or Refusals("")
        self.counters: dict[str, int] = {}
        self.state: dict[str, Any] = {}
        self.stats = RetryStats()
        self._closers: list[Callable[[], object]] = []

    def retry(self, fn: Callable[[], R], *, what: str) -> R:
        """Run ``fn`` under the task's RetryPolicy (retries :class:`RetryableError` only)."""
        return self.policy.call(fn, stats=self.stats, what=what)

    def on_close(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` when the task ends (last registered, first run), also after a failure."""
        self._closers.append(fn)

    def close(self) -> None:
        errors = []
        while self._closers:
            try:
                self._closers.pop()()
            except Exception as exc:  # every closer runs; the first error is raised
                errors.append(exc)
        if errors:
            raise errors[0]


@dataclass
class Receipt(Generic[StagedT]):
    """What one task reports to the driver: small and picklable.

    Attributes:
        sink_id, batch_id, partition_id, attempt_id, query_id: where it comes from.
        rows, nbytes: rows and Arrow bytes the task handed to the sink.
        seconds: time spent in the sink's write calls.
        retries: retries the RetryPolicy made.
        staged: what each ``write`` returned (None results are left out).
        counters: the sink's own counts (``SinkBatch.count``).
        dead_letters: the task's staged dead letters (``on_error=dead_letter``).
    """

    sink_id: str
    batch_id: int
    partition_id: int
    attempt_id: str
    query_id: str = ""
    rows: int = 0
    nbytes: int = 0
    seconds: float = 0.0
    retries: int = 0
    staged: list[StagedT] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    dead_letters: list[StagedFile] = field(default_factory=list)


def staged_in_order(receipts: list[Receipt[StagedT]]) -> list[StagedT]:
    """Every task's staged items, in partition order (the DataFrame's order)."""
    ordered = sorted(receipts, key=lambda r: r.partition_id)
    return [staged for receipt in ordered for staged in receipt.staged]


class Sink(ABC, Generic[OptionsT, StagedT]):
    """Base of every sink. See the module docstring for the contract."""

    #: the Spark format name, e.g. ``"file"``
    name: ClassVar[str]
    #: the options dataclass
    options_class: ClassVar[type[CommonOptions]] = CommonOptions
    #: the delivery guarantee this sink gives (see docs/index.md)
    guarantee: ClassVar[Guarantee] = "at-least-once"
    #: the pip extra its client needs, or None
    extra: ClassVar[str | None] = None
    #: whether overwrite (save mode / complete output mode) is supported
    supports_overwrite: ClassVar[bool] = False
    #: True when ``write`` retries each request itself through ``batch.task.retry``;
    #: otherwise the glue retries the whole ``write`` on a RetryableError
    retries_requests: ClassVar[bool] = False
    #: attribute names holding clients: dropped from the pickle, recreated on first use
    _transient: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: OptionsT, *, overwrite: bool = False) -> None:
        self.options = options
        self.overwrite = overwrite
        self.records: RecordSchema | None = None
        self.logger = logging.getLogger(f"quixsinks.sinks.{self.name}")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self._transient:
            state[name] = None
        return state

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options!r})"

    @classmethod
    def check_dependencies(cls) -> None:
        """Raise MissingDependencyError when the sink's client library is missing."""

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        """Validate options against the DataFrame's schema (driver, before any task).

        Runs each time Spark plans a micro-batch: keep it free of I/O. Subclasses extend
        it and call super(). Raise OptionError for a problem the user must fix.
        """
        self.records = self.options.record_schema(schema)

    def column_type(self, schema: pa.Schema, name: str, option: str) -> pa.DataType:
        """The type of column ``name`` that ``option`` names; OptionError if it is absent."""
        if name not in schema.names:
            raise OptionError(
                f"{self.name}: {option!r} names {name!r}, which the DataFrame does not have; "
                f"its columns are: {', '.join(schema.names)}",
                option=option,
                value=name,
                allowed=list(schema.names),
            )
        return schema.field(name).type

    def preflight(self) -> None:
        """Check the destination once per driver process (I/O allowed), e.g. writable."""

    # ------------------------------------------------------------------ executor

    def setup(self, task: Task) -> None:
        """Open what the task needs (keep it on ``task``). Once per task, before any write."""

    def task_of(self, batch: SinkBatch) -> Task:
        """The task ``batch`` belongs to; a task of its own, set up, when ``write`` is called
        directly (outside Spark: a test, a script)."""
        if batch.task is not None:
            return batch.task
        task = self.new_task(batch.context)
        self.setup(task)
        return task

    def new_task(self, context: WriteContext) -> Task:
        """A task attempt of this sink, with its retry policy and ``on_error``."""
        return Task(
            context,
            self.options.retry_policy(),
            refusals=Refusals(
                self.name, self.options.on_error, secrets=self.options.secret_values()
            ),
        )

    def check_fence(self, task: Task) -> None:
        """Fail before any data moves when another query owns the sink id (ledgered writes
        only: streaming, or a keyed batch write).

        Sinks with a fenced ledger read it here (``Ledger.check``); the default does nothing.
        """

    @abstractmethod
    def write(self, batch: SinkBatch) -> StagedT | None:
        """Write (or stage) one SinkBatch; return something for the driver, or None.

        Raise :class:`~quixsinks.core.errors.SinkBackpressureError` to have the write
        retried after ``retry_after`` seconds.
        """

    def close(self, task: Task) -> None:
        """Release what ``setup``/``write`` opened. Called at the end of every task.

        Things registered with ``task.on_close`` are closed after this, in any case.
        """

    # ------------------------------------------------------------------ driver: commit

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedT]]) -> None:
        """Finish a micro-batch once every task succeeded (driver)."""

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedT]]) -> None:
        """Clean up after a failed micro-batch (driver); must not undo a landed commit."""

    def types_json_values(self) -> bool:
        """Whether :meth:`write` reads a JSON value's typed columns
        (:meth:`SinkBatch.values`). A sink that writes each value only as its JSON text
        (:func:`~quixsinks.core.formats.value_json_texts`, or a serializer over
        :meth:`SinkBatch.messages`) returns False: then a key holding an integer in one
        message and a string in another is not a refusal, as in Quix Streams; only a row
        that is not a JSON object is. Default True (executor; options only)."""
        return True

    # ------------------------------------------------------------------ reading back

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The commit records kept with this sink's ledger entries (of ``sink_id``, or of
        every sink id), oldest first. Sinks without a ledger keep none: their records are
        the ``quixsinks.commits`` log lines."""
        raise QuixSinksError(
            f"{self.name} keeps no ledger in its destination, so it stores no commit "
            "records: read the JSON lines of the 'quixsinks.commits' logger (Spark's "
            "python_worker_logs with spark.sql.pyspark.worker.logging.enabled), see "
            "docs/errors.md"
        )


class BatchingSink(Sink[OptionsT, None]):
    """Base class for your own sink, as in Quix Streams: implement :meth:`write`.

    ``write(batch)`` gets each :class:`~quixsinks.core.batch.SinkBatch` of a task;
    iterate it for :class:`~quixsinks.core.batch.SinkItem` rows, or use its Arrow
    views. Raise ``SinkBackpressureError(retry_after)`` to be called again with the
    same batch later. Delivery is at-least-once: a retried task or a replayed
    micro-batch calls ``write`` again with the same rows.

    Set ``name`` (the Spark format name) and, for your own options, ``options_class``
    (a frozen ``CommonOptions`` subclass whose fields are declared with ``option``).
    """

    name: ClassVar[str] = "batching"

    @abstractmethod
    def write(self, batch: SinkBatch) -> None:
        """Write one batch to the destination."""
