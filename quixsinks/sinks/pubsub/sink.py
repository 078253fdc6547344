"""The Pub/Sub sink: one message per row, published with per-message resend, at-least-once.

Executor: each SinkBatch becomes messages (data, attributes, ordering key) built in Arrow
(:mod:`.wire`): the data is the JSON object of the value columns (Quix's ``json.dumps``), a
``data_column`` as is, or a ``value_serializer``'s result; the attributes are Quix's
(``_key``, ``_timestamp``, ``_offset`` and the Kafka headers, as text), the
``attributes_columns`` and ``qs_dedupe_id``, a deterministic id of the message's content
and either its Kafka topic, partition and offset or its position in the Spark partition
(:class:`~quixsinks.core.delivery.DedupeIds`), the same when the batch is replayed. A
row that cannot be a message (over one of Pub/Sub's limits, :mod:`.wire`) is refused
(``on_error``) before anything of it is published; a message the service refuses
(INVALID_ARGUMENT) is narrowed down by publishing its request again in halves
(:mod:`.refusals`).

Messages go through one cached ``PublisherClient`` per process and settings (its batch and
flow-control options), in rounds of ``round_messages``: a round publishes its messages,
then waits for every future (so a task holds a bounded list of futures, and every one is
resolved before ``write()`` returns). :func:`~quixsinks.core.delivery.deliver` resends the
messages whose publish failed transiently (UNAVAILABLE, DEADLINE_EXCEEDED,
RESOURCE_EXHAUSTED, ABORTED, INTERNAL, a round not done in ``flush_timeout``), in their
order, with the task's RetryPolicy backoff; after ``retry_deadline_seconds`` the task fails
with a :class:`~quixsinks.core.errors.DeliveryError` counting the undelivered messages.
The client library's own retries are off (``retry=None``), so the policy is the only one.
With ``ordering_key_column``, a failed publish pauses its key in the client; the sink
resumes those keys (``resume_publish``) at the start of the next round, which resends the
failed messages first, so a key's messages are published in row order.

A missing topic is :class:`PubSubTopicNotFoundError` (Quix's name): from ``get_topic`` on
the driver before any task (``check_topic``), or, when the credentials may not read the
topic, from the first publish that fails with NOT_FOUND.

Driver: nothing to commit. Pub/Sub has no publish-side deduplication (a message published
again gets a new message id), so the guarantee is at-least-once: a retried task or a
replayed micro-batch publishes its messages again, with the same ``qs_dedupe_id``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import pyarrow as pa

from quixsinks.core.delivery import DedupeIds, deliver
from quixsinks.core.errors import DestinationError, OptionError, RecordError
from quixsinks.core.options import load_callable
from quixsinks.core.sink import Sink, Task

from .client import PubSubTopicNotFoundError, import_pubsub, publisher, translate
from .options import PubSubOptions
from .publishing import RequestSender, RoundSender, wire_size
from .refusals import deliver_isolating, encodable_rows
from .wire import Encoder, Frame, Message, name_problem

__all__ = ["PubSubSink", "PubSubTopicNotFoundError"]

M = TypeVar("M", Frame, Message)


def _message_row(message: Message) -> int:
    return message.row


class PubSubSink(Sink[PubSubOptions, None]):
    """Publishes one Pub/Sub message per row; at-least-once, never a silent loss.
    See docs/sinks/pubsub.md."""

    name: ClassVar[str] = "pubsub"
    options_class = PubSubOptions
    guarantee = "at-least-once"
    extra = "pubsub"
    retries_requests = True  # per-message resend through core.delivery, see write()

    def __init__(self, options: PubSubOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.attribute_names: tuple[str, ...] = ()
        self.attribute_map: str | None = None

    @classmethod
    def check_dependencies(cls) -> None:
        import_pubsub()

    def __repr__(self) -> str:
        opts = self.options
        where = f", emulator_host={opts.emulator_host!r}" if opts.emulator_host else ""
        return f"PubSubSink(topic={self.topic_path!r}{where})"

    @property
    def topic_path(self) -> str:
        return f"projects/{self.options.project_id}/topics/{self.options.topic_id}"

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        opts = self.options
        if opts.data_column is not None:
            t = self.column_type(schema, opts.data_column, "data_column")
            if not (pa.types.is_binary(t) or pa.types.is_string(t)) and not (
                pa.types.is_large_binary(t) or pa.types.is_large_string(t)
            ):
                raise OptionError(
                    f"pubsub: 'data_column' {opts.data_column!r} has type {t}; it must be "
                    "binary or string (sent as is)",
                    option="data_column",
                    value=opts.data_column,
                )
        if opts.ordering_key_column is not None:
            self.column_type(schema, opts.ordering_key_column, "ordering_key_column")
        self.attribute_map = None
        names = []
        for name in opts.attributes_columns:
            t = self.column_type(schema, name, "attributes_columns")
            if pa.types.is_map(t):
                if len(opts.attributes_columns) != 1:
                    raise OptionError(
                        f"pubsub: 'attributes_columns': {name!r} is a map column; give it "
                        "alone, or give named columns",
                        option="attributes_columns",
                        value=",".join(opts.attributes_columns),
                    )
                self.attribute_map = name
            else:
                problem = name_problem(name)
                if problem:
                    raise OptionError(
                        f"pubsub: 'attributes_columns': {problem}; rename the column in Spark",
                        option="attributes_columns",
                        value=name,
                    )
                names.append(name)
        self.attribute_names = tuple(names)
        for path, option_name in (
            (opts.key_serializer, "key_serializer"),
            (opts.value_serializer, "value_serializer"),
        ):
            if path is not None:
                load_callable(path, option_name=option_name)

    def preflight(self) -> None:
        """Check that the topic exists (``get_topic``): missing, unreachable or refused fails
        here, before any task; a permission error on reading topics skips the check."""
        if not self.options.check_topic:
            return
        from google.api_core import exceptions as gexc

        timeout = self.options.publish_timeout
        try:
            publisher(self.options).get_topic(
                request={"topic": self.topic_path}, retry=None, timeout=timeout
            )
        except gexc.PermissionDenied:
            self.logger.info(
                "pubsub: may not read %s (get_topic); a missing topic shows at the first publish",
                self.topic_path,
            )
        except Exception as exc:
            raise translate(exc, self.topic_path, timeout=timeout) from None

    # ------------------------------------------------------------------ executor

    def setup(self, task: Task) -> None:
        ctx = task.context
        task.state["dedupe"] = DedupeIds(ctx.sink_id, ctx.batch_id, ctx.partition_id)
        task.state["row0"] = 0

    def types_json_values(self) -> bool:
        """The data is the value's JSON text (or a column, or a serializer's bytes over
        each message's own object): nothing reads typed value columns."""
        return False

    def write(self, batch: Any) -> None:
        task = self.task_of(batch)
        row0 = task.state["row0"]
        task.state["row0"] = row0 + batch.num_rows
        if batch.num_rows == 0:
            return
        client = publisher(self.options)
        opts = self.options
        what = f"pubsub {self.topic_path}"
        if opts.ordering_key_column is None:
            # no order to keep: PublishRequests serialized here, sent on the client's channel
            frames, rows = self.encoded(batch, task, row0, self.frames)
            requests = RequestSender(client, self.topic_path, opts.publish_timeout)

            def send_frames(round_: Sequence[Frame]) -> None:
                deliver(
                    round_,
                    requests.send,
                    task.policy,
                    what=what,
                    chunk_size=opts.max_messages,
                    max_inflight=self.requests_in_flight(),
                    size_of=wire_size,
                    max_chunk_size=opts.max_bytes - len(self.topic_path) - 16,
                    stats=task.stats,
                )

            published = self.publish(batch, frames, rows, row0, send_frames, lambda f: f[0])
            batch.count("published", published)
            return
        messages, rows = self.encoded(batch, task, row0, self.messages)
        published = 0
        for start in range(0, len(messages), opts.round_messages):
            sender = RoundSender(client, self.topic_path, opts.flush_timeout, opts.publish_timeout)

            def send_messages(round_: Sequence[Message], sender: RoundSender = sender) -> None:
                deliver(
                    round_,
                    sender.send,
                    task.policy,
                    what=what,
                    chunk_size=len(round_),
                    stats=task.stats,
                )

            round_ = messages[start : start + opts.round_messages]
            published += self.publish(batch, round_, rows, row0, send_messages, _message_row)
        batch.count("published", published)

    def encoded(
        self, batch: Any, task: Task, row0: int, build: Callable[[Any, DedupeIds, int], list[M]]
    ) -> tuple[list[M], list[int] | None]:
        """The batch's messages (``build``: :meth:`frames` or :meth:`messages`) less the rows
        that cannot be one (refused, see :mod:`.refusals`), and the batch row of each
        message when some were refused (None: message i is row i)."""
        dedupe: DedupeIds = task.state["dedupe"]
        before = dedupe.copy()
        try:
            return build(batch, dedupe, row0), None
        except RecordError:
            task.state["dedupe"] = dedupe = before  # the failed build's ids never went out
        probe = DedupeIds("probe", 0, 0)
        rows = encodable_rows(
            batch, row0, lambda piece, first: build(piece, probe, first), batch.refuse
        )
        if not rows:
            return [], rows
        kept = dataclasses.replace(
            batch, table=batch.table.take(pa.array(rows, pa.int64())), _values=None
        )
        return build(kept, dedupe, row0), rows

    def publish(
        self,
        batch: Any,
        items: Sequence[M],
        rows: list[int] | None,
        row0: int,
        send: Callable[[Sequence[M]], None],
        row_of: Callable[[M], int],
    ) -> int:
        """Publish ``items`` with ``send``; a message Pub/Sub refuses (INVALID_ARGUMENT)
        is refused (``on_error``) unless every message was: that is no row's fault, and
        fails the batch. The messages published."""
        refused = deliver_isolating(items, send)
        if not refused:
            return len(items)
        if len(refused) == len(items) and len(items) > 1:
            raise DestinationError(
                f"pubsub: {self.topic_path} refused every message of a round, so not for "
                f"what one holds: {refused[0][1]}",
                location=self.topic_path,
            )
        for item, error in refused:
            number = row_of(item) - row0
            batch.refuse(number if rows is None else rows[number], error)
        return len(items) - len(refused)

    def requests_in_flight(self) -> int:
        """Publish requests a task has on the wire at once (the outstanding limits)."""
        opts = self.options
        by_messages = opts.max_outstanding_messages // opts.max_messages
        by_bytes = opts.max_outstanding_bytes // opts.max_bytes
        return max(1, min(16, by_messages, by_bytes))

    # ------------------------------------------------------------------ messages

    def encoder(self) -> Encoder:
        """The message builder of this sink's plan (``prepare`` first)."""
        assert self.records is not None
        return Encoder(self.options, self.records, self.attribute_names, self.attribute_map)

    def messages(self, batch: Any, dedupe: DedupeIds, row0: int = 0) -> list[Message]:
        """The batch's messages, in row order; RecordError for a row that cannot be one."""
        return self.encoder().messages(batch, dedupe, row0)

    def frames(self, batch: Any, dedupe: DedupeIds, row0: int = 0) -> list[Frame]:
        """The batch's messages as PublishRequest fields, built in Arrow, in row order."""
        return self.encoder().frames(batch, dedupe, row0)
