"""The generic PySpark DataSource that turns any quixsinks Sink into a Spark sink.

``QuixDataSource`` (one subclass per sink, setting ``sink_class``) parses the options
and plans the write on the driver, before any task runs. Its Arrow writers run on the
executors: each task wraps Spark's Arrow record batches in SinkBatches of bounded size,
calls ``sink.write`` under the sink's RetryPolicy and returns a :class:`ReceiptMessage`.
On the driver, ``commit`` hands the receipts to ``sink.commit`` and logs one INFO line
per micro-batch.

Facts of the Spark API honoured here (DESIGN.md): the DataSource and its stream writer
are built several times per micro-batch and the committing writer is a new object, so
nothing here does I/O except the once-per-process preflight; the micro-batch id and
query id are read from the task's local properties and travel in receipts.

A batch write with the options ``sink_id`` and ``batch_id`` (a *keyed* batch write) gets
that sink id and batch id and the query id ``batch-write`` (``BATCH_WRITE_QUERY_ID``), so
the sink records it in its fenced ledger as it records a micro-batch, and a rerun of it
writes nothing. Without the key a batch write gets a fresh ``write-<uuid>`` sink id.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from quixsinks import __version__
from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.clients import ClientCache, secret_digest
from quixsinks.core.deadletters import (
    abort_dead_letters,
    dead_letter_staging,
    publish_dead_letters,
    without_unparseable,
    write_isolating,
)
from quixsinks.core.errors import OptionError, QuixSinksError, RecordError
from quixsinks.core.ledger import BATCH_WRITE_QUERY_ID
from quixsinks.core.secrets import is_secret_name, scrubbed_errors
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task
from quixsinks.spark.heap import frozen_imports
from quixsinks.spark.timings import timed

__all__ = ["QuixDataSource", "ReceiptMessage", "VersionMismatchError", "data_source_for"]

logger = logging.getLogger("quixsinks.commit")

_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"

# (sink class, options, overwrite) already checked by Sink.preflight in this driver: a
# bounded cache keyed without secrets (the options, map options included, as one digest)
_PREFLIGHT_DONE: ClientCache[bool] = ClientCache("preflight checks", lambda _: None, max_size=64)

_Method = TypeVar("_Method", bound=Callable[..., Any])


class VersionMismatchError(QuixSinksError):
    """The quixsinks on a Spark worker is not the version that planned the write."""


def _surfaces_errors(method: _Method) -> _Method:
    """Mark a method Spark calls (planning, a task, a commit) as the edge to Spark.

    Spark shows a Python error as its formatted traceback behind its own wrapper; our
    message, which says what happened and what to do, would come after every frame of our
    code and every chained client error (800+ characters in). A quixsinks error leaves
    this edge without its frames and chain, so its message is the first thing after
    Spark's wrapper; the whole chain is logged at DEBUG. Any other error (a bug) keeps
    its traceback.
    """

    @functools.wraps(method)
    def edge(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except QuixSinksError as exc:
            logger.debug("%s: %s", type(exc).__name__, exc.message, exc_info=exc)
            raise exc.with_traceback(None) from None

    return cast(_Method, edge)


@dataclass
class ReceiptMessage(WriterCommitMessage):
    """The WriterCommitMessage carrying a task's :class:`Receipt`."""

    receipt: Receipt[Any]


def _ensure_logging() -> None:
    """Give the ``quixsinks`` logger a stderr handler in Spark's Python workers.

    Spark plans and commits Python data sources in worker processes whose logging the
    user cannot configure; without this the per-batch INFO line would be lost. The
    level is ``QUIXSINKS_LOG_LEVEL`` (default INFO). A process that configured logging
    itself (a handler on the root or the quixsinks logger) is left alone. Spark's own
    Python worker logging (``spark.sql.pyspark.worker.logging.enabled``) puts a handler on
    the root logger while a worker runs our code: then only the level is set, and the
    lines go to Spark's ``python_worker_logs`` table (the root's WARNING would drop them).
    """
    package_logger = logging.getLogger("quixsinks")
    if package_logger.handlers:
        return
    root_handlers = logging.getLogger().handlers
    if root_handlers and not all(_spark_worker_logging(h) for h in root_handlers):
        return
    if not root_handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        package_logger.addHandler(handler)
    package_logger.setLevel(os.environ.get("QUIXSINKS_LOG_LEVEL", "INFO").upper())


def _spark_worker_logging(handler: logging.Handler) -> bool:
    """Whether ``handler`` is the one Spark's Python worker logging puts on the root logger."""
    try:
        from pyspark.logger.worker_io import JSONFormatterWithMarker
    except ImportError:  # a pyspark without worker logging
        return False
    return isinstance(handler.formatter, JSONFormatterWithMarker)


@functools.cache
def _utc_timestamps() -> dict[str, Any]:
    """to_arrow_schema's argument for UTC timestamps in this pyspark (looked up once)."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:  # pyspark >= 4.2
        return {"timezone": "UTC"}
    return {"timestamp_utc": True}  # pyspark 4.1


def _arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of the batches Spark hands the writers (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    convert: Any = to_arrow_schema
    return convert(schema, **_utc_timestamps())


class QuixDataSource(DataSource):
    """A Spark data source (write side) driving one quixsinks :class:`Sink`."""

    sink_class: ClassVar[type[Sink[Any, Any]]]
    #: the format name, when it is not the sink's name (the ``qs_<name>`` aliases)
    format_name: ClassVar[str | None] = None

    @classmethod
    def name(cls) -> str:
        return cls.format_name or cls.sink_class.name

    @_surfaces_errors
    def writer(self, schema: StructType, overwrite: bool) -> SinkArrowWriter:
        return SinkArrowWriter(self._plan(schema, overwrite, streaming=False))

    @_surfaces_errors
    def streamWriter(self, schema: StructType, overwrite: bool) -> SinkStreamArrowWriter:
        return SinkStreamArrowWriter(self._plan(schema, overwrite, streaming=True))

    def _plan(self, schema: StructType, overwrite: bool, *, streaming: bool) -> Sink[Any, Any]:
        raw = self.options
        with (
            timed(self.sink_class.name, "plan"),
            frozen_imports(),
            scrubbed_errors(lambda: [v for k, v in raw.items() if is_secret_name(k)]),
        ):
            return self._planned(schema, overwrite, streaming=streaming)

    def _planned(self, schema: StructType, overwrite: bool, *, streaming: bool) -> Sink[Any, Any]:
        cls = self.sink_class
        cls.check_dependencies()
        options = cls.options_class.from_options(self.options)
        if streaming and options.batch_id is not None:
            raise OptionError(
                f"{cls.name}: option 'batch_id' is for batch writes (df.write); each "
                "micro-batch of a streaming query has its own batch id, recorded under the "
                "query's sink id: remove 'batch_id'",
                option="batch_id",
                value=str(options.batch_id),
            )
        if overwrite and not cls.supports_overwrite:
            raise OptionError(
                f"{cls.name}: overwrite is not supported (save mode 'overwrite' or output mode "
                "'complete'); use mode 'append'",
                option="mode",
                value="overwrite",
                allowed=("append",),
            )
        with scrubbed_errors(options.secret_values):
            sink = cls(options, overwrite=overwrite)
            sink.prepare(_arrow_schema(schema))
            every_value = repr(dataclasses.astuple(options))  # never shown: digested
            key = (cls.__module__, cls.__qualname__, overwrite, secret_digest(every_value))

            dead_letters = dead_letter_staging(options)  # a bad path fails here, on the driver

            def check() -> bool:
                sink.preflight()
                if dead_letters is not None:
                    dead_letters.check()
                return True

            _PREFLIGHT_DONE.get(key, check)
        return sink


def data_source_for(sink_class: type[Sink[Any, Any]]) -> type[QuixDataSource]:
    """The PySpark DataSource class of a sink, for ``spark.dataSource.register``.

    ``quixsinks.register(spark, MySink)`` calls this for you. The built-in sinks' classes
    are declared in :mod:`quixsinks.spark.sources`.
    """
    return type(
        f"{sink_class.__name__}DataSource",
        (QuixDataSource,),
        {
            "sink_class": sink_class,
            "__module__": sink_class.__module__,
            "__doc__": sink_class.__doc__,
        },
    )


class _SinkWriter:
    """The task and commit logic shared by the batch and the streaming writer."""

    streaming: ClassVar[bool] = False

    def __init__(self, sink: Sink[Any, Any]) -> None:
        self.sink = sink
        # A batch write plans once, so this id is the same on executors and driver.
        self.write_id = uuid.uuid4().hex
        self.planned_with = __version__

    # ---------------------------------------------------------------- executor side

    def _context(self) -> WriteContext:
        from pyspark import TaskContext

        task = TaskContext.get()
        partition = task.partitionId() if task else 0
        attempt = f"{partition:05d}-{task.attemptNumber() if task else 0}-{uuid.uuid4().hex[:12]}"
        if not self.streaming:
            key = self._batch_write()
            return WriteContext(key.sink_id, key.batch_id, partition, attempt, False, key.query_id)
        batch_text = task.getLocalProperty(_BATCH_ID_PROPERTY) if task else None
        query_id = task.getLocalProperty(_QUERY_ID_PROPERTY) if task else None
        if batch_text is None or not query_id:
            raise QuixSinksError(
                f"Spark did not set {_BATCH_ID_PROPERTY!r} and {_QUERY_ID_PROPERTY!r} for a "
                "streaming task; this Spark version is not supported (quixsinks needs 4.1+)"
            )
        sink_id = self.sink.options.sink_id or query_id
        return WriteContext(sink_id, int(batch_text), partition, attempt, True, query_id)

    def _batch_write(self) -> CommitContext:
        """Sink id, batch id and query id of a batch write: the user's key, recorded in the
        ledger under BATCH_WRITE_QUERY_ID; without it a fresh sink id, batch 0, no query."""
        options = self.sink.options
        if options.sink_id is not None and options.batch_id is not None:
            return CommitContext(
                options.sink_id, options.batch_id, False, BATCH_WRITE_QUERY_ID, self.sink.name
            )
        return CommitContext(f"write-{self.write_id}", 0, False, sink=self.sink.name)

    @_surfaces_errors
    def write(self, iterator: Iterator[pa.RecordBatch]) -> ReceiptMessage:
        _ensure_logging()
        with (
            timed(self.sink.name, "write"),
            frozen_imports(),
            scrubbed_errors(self.sink.options.secret_values),
        ):
            self._check_version()
            return self._write_task(iterator)

    def _check_version(self) -> None:
        """Refuse to write when this worker's quixsinks is not the planning one's: another
        version may encode, stage or commit differently, so mixing them is never safe."""
        if self.planned_with != __version__:
            raise VersionMismatchError(
                f"{self.sink.name}: quixsinks {__version__} on the Spark worker "
                f"{socket.gethostname()}, but the write was planned with quixsinks "
                f"{self.planned_with}: install the same quixsinks version on the driver and "
                "every executor (pip install 'quixsinks==<version>', or the same wheel)"
            )

    def _write_task(self, iterator: Iterator[pa.RecordBatch]) -> ReceiptMessage:
        sink = self.sink
        context = self._context()
        task = sink.new_task(context)
        receipt: Receipt[Any] = Receipt(
            context.sink_id,
            context.batch_id,
            context.partition_id,
            context.attempt_id,
            query_id=context.query_id,
            counters=task.counters,
        )
        assert sink.records is not None, "prepare() runs on the driver before any task"
        try:
            sink.setup(task)
            if context.ledgered:
                sink.check_fence(task)  # before any data moves
            max_bytes = sink.options.max_batch_bytes
            if sink.options.read_ahead:
                iterator = _read_ahead(iterator, max_bytes)
            for table in _bounded_tables(iterator, max_bytes):
                batch = SinkBatch(table, sink.records, context, task.counters, task=task)
                started = time.perf_counter()
                receipt.staged.extend(_write_batch(sink, batch, task))
                receipt.seconds += time.perf_counter() - started
                receipt.rows += batch.num_rows
                receipt.nbytes += batch.nbytes
            staging = dead_letter_staging(sink.options)
            if staging is not None:
                receipt.dead_letters = task.refusals.stage(staging, context)
        finally:
            try:
                sink.close(task)
            finally:
                task.refusals.close()
                task.close()
        receipt.retries = task.stats.retries
        return ReceiptMessage(receipt)

    # ---------------------------------------------------------------- driver side

    def _commit_context(self, receipts: list[Receipt[Any]], batch_id: int) -> CommitContext | None:
        """The commit's context; None for a streaming micro-batch without receipts.

        The query id reaches the driver only in receipts: the commit runs in a short-lived
        Spark worker where no SparkContext is active. Without receipts (Spark replaces an
        empty input with one empty partition, so this is a corner case) there is nothing
        to commit, and nothing may be recorded under a made-up id.
        """
        if not self.streaming:
            return self._batch_write()
        if not receipts:
            return None
        first = receipts[0]
        return CommitContext(first.sink_id, batch_id, True, first.query_id, self.sink.name)

    def _commit(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        _ensure_logging()
        with (
            timed(self.sink.name, "commit"),
            frozen_imports(),
            scrubbed_errors(self.sink.options.secret_values),
        ):
            self._check_version()
            self._commit_batch(messages, batch_id)

    def _commit_batch(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        receipts = _receipts(messages)
        context = self._commit_context(receipts, batch_id)
        if context is None:
            logger.info(
                "%s: micro-batch %d has no task receipts: nothing to commit",
                self.sink.name,
                batch_id,
            )
            return
        started = context.started
        dead_letter_files = publish_dead_letters(self.sink.options, context, receipts)
        self.sink.commit(context, receipts)
        context.commit_record(receipts).log()
        logger.info(
            "%s: committed batch %d of %s: %d rows, %d bytes, %d partitions, %.3f s writing, "
            "%.3f s committing, %d retries%s%s",
            self.sink.name,
            context.batch_id,
            context.sink_id,
            sum(r.rows for r in receipts),
            sum(r.nbytes for r in receipts),
            len(receipts),
            sum(r.seconds for r in receipts),
            time.perf_counter() - started,
            sum(r.retries for r in receipts),
            _counters_text(receipts),
            f", {dead_letter_files} dead-letter file(s) published" if dead_letter_files else "",
        )

    def _abort(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        _ensure_logging()
        with (
            timed(self.sink.name, "abort"),
            frozen_imports(),
            scrubbed_errors(self.sink.options.secret_values),
        ):
            self._abort_batch(messages, batch_id)

    def _abort_batch(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        receipts = _receipts(messages)
        context = self._commit_context(receipts, batch_id)
        if context is None:
            logger.warning(
                "%s: aborting micro-batch %d: no task receipts, nothing to clean up here "
                "(staging of failed tasks is swept by later commits)",
                self.sink.name,
                batch_id,
            )
            return
        logger.warning(
            "%s: aborting batch %d of %s (%d task receipts)",
            self.sink.name,
            context.batch_id,
            context.sink_id,
            len(receipts),
        )
        try:
            self.sink.abort(context, receipts)
        finally:
            abort_dead_letters(self.sink.options, context, receipts)


def _write_batch(sink: Sink[Any, Any], batch: SinkBatch, task: Task) -> list[Any]:
    """Write one SinkBatch; under on_error skip/dead_letter, a RecordError for the whole
    batch is narrowed down to the rows that cause it (see write_isolating)."""
    # pure: under fail, it names the row that fails
    parsed = without_unparseable(batch, typed=sink.types_json_values())
    if parsed is None:
        return []
    if task.refusals.on_error == "fail":
        staged = _write(sink, parsed, task)
        return [] if staged is None else [staged]
    return write_isolating(parsed, lambda piece: _write(sink, piece, task), task.refusals)


def _write(sink: Sink[Any, Any], batch: SinkBatch, task: Task) -> Any:
    """One ``sink.write``: retried whole unless the sink retries per request itself; an
    Arrow conversion failure (a value the destination's format cannot hold) is a RecordError.
    """

    def attempt() -> Any:
        # a failed attempt's refusals and counts did not happen: its retry makes them again
        counted, mark = dict(batch.counters), task.refusals.mark()
        try:
            return sink.write(batch)
        except BaseException:
            batch.counters.clear()
            batch.counters.update(counted)
            task.refusals.rollback(mark)
            raise

    try:
        if sink.retries_requests:
            return attempt()
        return task.retry(attempt, what=f"{sink.name} write")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise RecordError(
            f"{sink.name}: a value of batch {batch.batch_id} partition {batch.partition_id} "
            f"cannot be converted: {exc}"
        ) from exc


def _receipts(messages: list[WriterCommitMessage | None]) -> list[Receipt[Any]]:
    return [m.receipt for m in messages if isinstance(m, ReceiptMessage)]


def _counters_text(receipts: list[Receipt[Any]]) -> str:
    totals: dict[str, int] = {}
    for receipt in receipts:
        for name, value in receipt.counters.items():
            totals[name] = totals.get(name, 0) + value
    return "".join(f", {value} {name}" for name, value in sorted(totals.items()))


def _bounded_tables(batches: Iterator[pa.RecordBatch], max_bytes: int) -> Iterator[pa.Table]:
    """Group Spark's record batches into tables of about ``max_bytes`` (at least one batch)."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        size += batch.nbytes
        if size >= max_bytes:
            yield pa.Table.from_batches(pending)
            pending, size = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


class SinkArrowWriter(_SinkWriter, DataSourceArrowWriter):
    """Batch (``df.write``) writer."""

    @_surfaces_errors
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._commit(messages, 0)

    @_surfaces_errors
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._abort(messages, 0)


class SinkStreamArrowWriter(_SinkWriter, DataSourceStreamArrowWriter):
    """Structured Streaming (``df.writeStream``) writer: one commit per micro-batch."""

    streaming: ClassVar[bool] = True

    @_surfaces_errors
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._commit(messages, batchId)

    @_surfaces_errors
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._abort(messages, batchId)


def _read_ahead(batches: Iterator[pa.RecordBatch], max_bytes: int) -> Iterator[pa.RecordBatch]:
    """Spark's record batches, read by a thread up to about ``max_bytes`` ahead of the sink.

    Without it Spark's JVM stops handing rows over while the sink encodes or sends a
    SinkBatch (the socket between them fills up); with it the hand-over of the next
    SinkBatch overlaps the sink's work on this one, on another core. The first SinkBatch's
    worth is read here, where there is nothing to overlap it with yet; only an input larger
    than that starts the thread (a small micro-batch never does). The thread is then the
    only reader of Spark's iterator; an error either meets is raised here, in order. A
    consumer that stops early (the sink failed) leaves the thread to finish its current
    read: the worker process does not outlive a failed task.
    """
    head: deque[pa.RecordBatch] = deque()
    size, more, error = 0, False, None
    try:
        for batch in batches:
            head.append(batch)
            size += batch.nbytes
            if size >= max_bytes:
                more = True
                break
    except BaseException as exc:  # raised after the batches before it
        error = exc
    if not more:  # the whole input fits one SinkBatch: no thread
        yield from head
        if error is not None:
            raise error
        return
    yield from _read_rest_ahead(head, size, batches, max_bytes)


def _read_rest_ahead(
    head: deque[pa.RecordBatch], size: int, batches: Iterator[pa.RecordBatch], max_bytes: int
) -> Iterator[pa.RecordBatch]:
    """``head`` (``size`` bytes, already read), then the rest of ``batches``, read by a
    thread while at most about ``max_bytes`` wait, ``head``'s included."""
    ready = head
    changed = threading.Condition()
    state: dict[str, Any] = {"bytes": size, "done": False, "error": None, "stopped": False}

    def read() -> None:
        try:
            for batch in batches:
                with changed:
                    while state["bytes"] >= max_bytes and not state["stopped"]:
                        changed.wait()
                    if state["stopped"]:
                        return
                    ready.append(batch)
                    state["bytes"] += batch.nbytes
                    changed.notify_all()
        except BaseException as exc:  # handed to the consumer, raised there
            state["error"] = exc
        finally:
            with changed:
                state["done"] = True
                changed.notify_all()

    reader = threading.Thread(target=read, name="quixsinks-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            with changed:
                while not ready and not state["done"]:
                    changed.wait()
                if not ready:
                    break
                batch = ready.popleft()
                state["bytes"] -= batch.nbytes
                changed.notify_all()
            yield batch
        reader.join()
        if state["error"] is not None:
            raise state["error"]
    finally:
        with changed:
            state["stopped"] = True
            changed.notify_all()
