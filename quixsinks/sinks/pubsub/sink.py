"""The Pub/Sub sink: one message per row, published with per-message resend, at-least-once.

Executor: each SinkBatch becomes messages (data, attributes, ordering key) built in Arrow:
the data is the JSON object of the value columns (Quix's ``json.dumps``), a ``data_column``
as is, or a ``value_serializer``'s result; the attributes are Quix's (``_key``,
``_timestamp``, ``_offset`` and the Kafka headers, as text), the ``attributes_columns`` and
``qs_dedupe_id``, a deterministic id of the message's content and either its Kafka topic,
partition and offset or its position in the Spark partition
(:class:`~quixsinks.core.delivery.DedupeIds`), the same when the batch is replayed. A
message over 10,000,000 bytes is a RecordError naming its row, before anything of the
batch is published.

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

import concurrent.futures
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import as_binary, concat_rows, first_null, first_true, varints
from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.delivery import DedupeIds, deliver, kafka_coordinates
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    MissingDependencyError,
    OptionError,
    RecordError,
    RetryableError,
    timed_out,
)
from quixsinks.core.formats import csv_keys, json_objects
from quixsinks.core.options import load_callable
from quixsinks.core.sink import Sink, Task

from .limits import check_attribute_arrays, check_attribute_rows, check_ordering_keys, name_problem
from .options import MAX_MESSAGE_BYTES, PubSubOptions

__all__ = ["PubSubSink", "PubSubTopicNotFoundError", "message_size"]


class PubSubTopicNotFoundError(DestinationNotFoundError):
    """The Pub/Sub topic does not exist (Quix's name)."""


def _close_publisher(publisher: Any) -> None:
    try:
        publisher.stop()
    finally:
        publisher.transport.close()


#: PublisherClients per process (Python workers are reused between tasks), closed at exit
_PUBLISHERS: ClientCache[Any] = ClientCache("pubsub publishers", _close_publisher, max_size=4)

#: gRPC status codes after which a message is resent
_RETRYABLE = (
    "ServiceUnavailable",
    "DeadlineExceeded",
    "ResourceExhausted",
    "Aborted",
    "InternalServerError",
    "Unknown",
    "Cancelled",
    "TooManyRequests",
    "BadGateway",
    "GatewayTimeout",
    "RetryError",
)
_DENIED = ("PermissionDenied", "Unauthenticated", "Forbidden", "Unauthorized")


def import_client() -> Any:
    try:
        from google.cloud import pubsub_v1
    except ImportError as exc:
        raise MissingDependencyError("google-cloud-pubsub", "pubsub") from exc
    return pubsub_v1


@dataclass(frozen=True)
class Message:
    """One message to publish; ``row`` is its row in the task's SinkBatch."""

    row: int
    data: bytes
    attributes: dict[str, str]
    ordering_key: str = ""
    #: the message as a serialized google.pubsub.v1.PubsubMessage (protobuf wire format)
    wire: bytes = b""


#: one message as (its row, its PublishRequest ``messages`` field: tag, length, the
#: PubsubMessage); a plain tuple, as there is one per row
Frame: TypeAlias = tuple[int, bytes]


Piece: TypeAlias = pa.Array | bytes


_varints = varints  # protobuf's varint: quixsinks.core.arrow.varints


def _field_pieces(tag: bytes, values: pa.Array) -> list[Piece]:
    """Pieces of a length-delimited protobuf field per row (values binary, no nulls)."""
    return [tag, _varints(pc.binary_length(values)), values]


def _entry_column(name: str, texts: pa.Array) -> pa.Array:
    """Per row, the attributes map entry ``name`` = text (empty where the text is null)."""
    rows = len(texts)
    values = pc.cast(pc.fill_null(pc.cast(texts, pa.string()), ""), pa.binary())
    key = _field(b"\x0a", name.encode()) + b"\x12"
    inner = concat_rows([key, _varints(pc.binary_length(values)), values], rows)
    entry = concat_rows(_field_pieces(b"\x12", inner), rows)
    if texts.null_count == 0:
        return entry
    return pc.if_else(pc.is_valid(texts), entry, pa.scalar(b"", pa.binary()))


def message_size(message: Message) -> int:
    """The bytes Pub/Sub counts against its 10 MB message limit."""
    attributes = sum(len(k.encode()) + len(v.encode()) for k, v in message.attributes.items())
    return len(message.data) + attributes + len(message.ordering_key.encode())


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
        import_client()

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

        publisher = self._publisher()
        try:
            publisher.get_topic(
                request={"topic": self.topic_path}, retry=None, timeout=self.options.publish_timeout
            )
        except gexc.NotFound:
            raise self._not_found() from None
        except gexc.PermissionDenied:
            self.logger.info(
                "pubsub: may not read %s (get_topic); a missing topic shows at the first publish",
                self.topic_path,
            )
        except gexc.GoogleAPICallError as exc:
            raise _translate(
                exc, self.topic_path, self._not_found, timeout=self.options.publish_timeout
            ) from None

    def _not_found(self) -> PubSubTopicNotFoundError:
        return PubSubTopicNotFoundError(
            f"pubsub: topic {self.topic_path} does not exist; create it (gcloud pubsub topics "
            "create) or fix 'project_id' / 'topic_id'",
            location=self.topic_path,
        )

    # ------------------------------------------------------------------ the client

    def _publisher(self) -> Any:
        return _PUBLISHERS.get(client_key(self.options), self._new_publisher)

    def _new_publisher(self) -> Any:
        pubsub_v1 = import_client()
        opts = self.options
        kwargs: dict[str, Any] = {}
        if opts.emulator_host:
            import grpc
            from google.auth.credentials import AnonymousCredentials
            from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

            kwargs["transport"] = PublisherGrpcTransport(
                channel=grpc.insecure_channel(opts.emulator_host),
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            )
        elif opts.service_account_json is not None:
            kwargs["credentials"] = self._credentials(opts.service_account_json)
        batch = pubsub_v1.types.BatchSettings(
            max_bytes=opts.max_bytes, max_latency=opts.max_latency, max_messages=opts.max_messages
        )
        flow = pubsub_v1.types.PublishFlowControl(
            message_limit=opts.max_outstanding_messages,
            byte_limit=opts.max_outstanding_bytes,
            limit_exceeded_behavior=pubsub_v1.types.LimitExceededBehavior.BLOCK,
        )
        publisher_options = pubsub_v1.types.PublisherOptions(
            enable_message_ordering=opts.ordering_key_column is not None,
            flow_control=flow,
            retry=None,
            timeout=opts.publish_timeout,
        )
        environ = os.environ.pop("PUBSUB_EMULATOR_HOST", None)  # the option decides, not it
        try:
            return pubsub_v1.PublisherClient(
                batch_settings=batch, publisher_options=publisher_options, **kwargs
            )
        finally:
            if environ is not None:
                os.environ["PUBSUB_EMULATOR_HOST"] = environ

    @staticmethod
    def _credentials(value: str) -> Any:
        from google.oauth2 import service_account

        text = value.strip()
        try:
            if text.startswith("{"):
                info = json.loads(text, strict=False)
            else:
                with open(text, encoding="utf-8") as f:
                    info = json.load(f, strict=False)
            return service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
                info, scopes=["https://www.googleapis.com/auth/pubsub"]
            )
        except (OSError, ValueError, KeyError) as exc:
            kind = type(exc).__name__
            raise OptionError(
                "pubsub: 'service_account_json' is neither a service account key's JSON text "
                f"nor the path of a readable key file ({kind})",
                option="service_account_json",
                value="***",
            ) from None

    # ------------------------------------------------------------------ executor

    def setup(self, task: Task) -> None:
        ctx = task.context
        task.state["dedupe"] = DedupeIds(ctx.sink_id, ctx.batch_id, ctx.partition_id)
        task.state["row0"] = 0

    def write(self, batch: Any) -> None:
        task = batch.task
        if task is None:  # called directly (tests): a task of its own
            task = Task(batch.context, self.options.retry_policy())
            self.setup(task)
        row0 = task.state["row0"]
        task.state["row0"] = row0 + batch.num_rows
        if batch.num_rows == 0:
            return
        publisher = self._publisher()
        opts = self.options
        what = f"pubsub {self.topic_path}"
        if opts.ordering_key_column is None:
            # no order to keep: PublishRequests serialized here, sent on the client's channel
            frames = self.frames(batch, task.state["dedupe"], row0)
            requests = _RequestSender(publisher, self.topic_path, opts.publish_timeout)
            for start in range(0, len(frames), opts.round_messages):
                deliver(
                    frames[start : start + opts.round_messages],
                    requests.send,
                    task.policy,
                    what=what,
                    chunk_size=opts.max_messages,
                    max_inflight=self.requests_in_flight(),
                    size_of=_wire_size,
                    max_chunk_size=opts.max_bytes - len(self.topic_path) - 16,
                    stats=task.stats,
                )
            batch.count("published", len(frames))
            return
        messages = self.messages(batch, task.state["dedupe"], row0)
        for start in range(0, len(messages), opts.round_messages):
            round_ = messages[start : start + opts.round_messages]
            sender = _Sender(publisher, self.topic_path, opts.flush_timeout, self._not_found)
            deliver(
                round_,
                sender.send,
                task.policy,
                what=what,
                chunk_size=len(round_),
                stats=task.stats,
            )
        batch.count("published", len(messages))

    def requests_in_flight(self) -> int:
        """Publish requests a task has on the wire at once (the outstanding limits)."""
        opts = self.options
        by_messages = opts.max_outstanding_messages // opts.max_messages
        by_bytes = opts.max_outstanding_bytes // opts.max_bytes
        return max(1, min(16, by_messages, by_bytes))

    # ------------------------------------------------------------------ messages

    def messages(self, batch: Any, dedupe: DedupeIds, row0: int = 0) -> list[Message]:
        """The batch's messages, in row order; RecordError for a row that cannot be one."""
        rows = batch.num_rows
        if rows == 0:
            return []
        data = self._data(batch, row0)
        attributes = self._attribute_columns(batch, row0)
        keys = self._ordering_keys(batch, row0)
        names = list(attributes)
        texts = [attributes[n] for n in names]
        dicts: list[dict[str, str]] = []
        for i in range(rows):
            row: dict[str, str] = {}
            for n, t in zip(names, texts, strict=True):
                value = t[i]
                if value is not None:
                    row[n] = value
            dicts.append(row)
        if self.attribute_map is not None:
            for i, pairs in enumerate(batch.column(self.attribute_map).to_pylist()):
                for name, value in pairs or ():
                    if value is not None:
                        dicts[i][str(name)] = _attribute_text(value, name, row0 + i)
        check_attribute_rows(dicts, row0)
        wires = [
            encode_message(d, a, k)
            for d, a, k in zip(data, dicts, keys or [""] * rows, strict=True)
        ]
        ids = dedupe.ids(wires, kafka_coordinates(batch))  # covers all the message carries
        name = self.options.dedupe_attribute
        out: list[Message] = []
        for i in range(rows):
            dicts[i][name] = ids[i]
            wire = wires[i] + _attribute_entry(name, ids[i])
            message = Message(row0 + i, data[i], dicts[i], keys[i] if keys else "", wire)
            size = message_size(message)
            if size > MAX_MESSAGE_BYTES:
                raise RecordError(
                    f"pubsub: the message of row {row0 + i} is {size} bytes (data, attributes "
                    f"and ordering key); Pub/Sub takes at most {MAX_MESSAGE_BYTES} bytes per "
                    "message",
                    row=row0 + i,
                )
            out.append(message)
        return out

    def _data(self, batch: Any, row0: int) -> list[bytes]:
        return self._data_array(batch, row0).to_pylist()  # type: ignore[no-any-return]

    def _data_array(self, batch: Any, row0: int) -> pa.Array:
        opts = self.options
        if opts.data_column is not None:
            column = as_binary(batch.column(opts.data_column))
            row = first_null(column)
            if row is not None:
                raise RecordError(
                    f"pubsub: data_column {opts.data_column!r} is null in row {row0 + row}; "
                    "a message needs data (filter such rows)",
                    column=opts.data_column,
                    row=row0 + row,
                )
            _check_sizes(pc.binary_length(column), row0)
            return column
        values = batch.values()
        if opts.value_serializer is not None:
            fn = load_callable(opts.value_serializer, option_name="value_serializer")
            out: list[bytes] = []
            for i, value in enumerate(values.to_pylist()):
                out.append(_as_bytes(fn(value), "value_serializer", row0 + i))
            column = pa.array(out, pa.binary())
            _check_sizes(pc.binary_length(column), row0)
            return column
        text = json_objects(values)
        _check_sizes(pc.binary_length(text), row0)
        return as_binary(text)

    def _attribute_arrays(self, batch: Any, row0: int) -> dict[str, pa.Array]:
        """Attribute name -> its text per row (null: not set), from the named columns."""
        records = self.records
        assert records is not None
        opts = self.options
        out: dict[str, pa.Array] = {}
        if opts.metadata_attributes:
            if records.key is not None:
                key = batch.column(records.key)
                if opts.key_serializer is not None:
                    fn = load_callable(opts.key_serializer, option_name="key_serializer")
                    texts = [
                        None if k is None else _str(fn(k), "key_serializer", row0 + i)
                        for i, k in enumerate(key.to_pylist())
                    ]
                    out["_key"] = pa.array(texts, pa.string())
                else:
                    out["_key"] = csv_keys(key)
            if records.timestamp is not None:
                out["_timestamp"] = pc.cast(batch.timestamps_ms(), pa.string())
            if records.offset is not None:
                out["_offset"] = csv_keys(batch.column(records.offset))
        for name in self.attribute_names:
            out[name] = csv_keys(batch.column(name))
        return out

    def _attribute_rows(self, batch: Any, row0: int = 0) -> list[dict[str, str]] | None:
        """Per row, the attributes from the Kafka headers and the map column, or None."""
        records = self.records
        assert records is not None
        headers = records.headers if self.options.metadata_attributes else None
        if headers is None and self.attribute_map is None:
            return None
        out: list[dict[str, str]] = [{} for _ in range(batch.num_rows)]
        if headers is not None:
            for i, pairs in enumerate(batch.column(headers).to_pylist()):
                for pair in pairs or ():
                    name, value = _header(pair)
                    if value is not None:
                        out[i][name] = _attribute_text(value, name, row0 + i)
        if self.attribute_map is not None:
            for i, pairs in enumerate(batch.column(self.attribute_map).to_pylist()):
                for name, value in pairs or ():
                    if value is not None:
                        out[i][str(name)] = _attribute_text(value, name, row0 + i)
        return out

    def _attribute_columns(self, batch: Any, row0: int) -> dict[str, list[str | None]]:
        """Attribute name -> its text per row (None: not set), headers included."""
        out = {n: a.to_pylist() for n, a in self._attribute_arrays(batch, row0).items()}
        records = self.records
        assert records is not None
        if self.options.metadata_attributes and records.headers is not None:
            for i, pairs in enumerate(batch.column(records.headers).to_pylist()):
                for pair in pairs or ():
                    name, value = _header(pair)
                    if value is not None:
                        out.setdefault(name, [None] * batch.num_rows)[i] = _attribute_text(
                            value, name, row0 + i
                        )
        return out

    # ------------------------------------------------------------------ frames (no ordering)

    def frames(self, batch: Any, dedupe: DedupeIds, row0: int = 0) -> list[Frame]:
        """The batch's messages as PublishRequest fields, built in Arrow, in row order.

        The same messages as :meth:`messages` (same attributes, same dedupe ids), without
        a Python object per attribute: for the requests the sink serializes itself.
        """
        rows = batch.num_rows
        if rows == 0:
            return []
        pieces: list[Piece] = [*_field_pieces(b"\x0a", self._data_array(batch, row0))]
        arrays = self._attribute_arrays(batch, row0)
        extra = self._attribute_rows(batch, row0)
        check_attribute_arrays(arrays, None if extra is None else [len(a) for a in extra], row0)
        if extra is not None:
            check_attribute_rows(extra, row0)
        for name, texts in arrays.items():
            pieces.append(_entry_column(name, texts))
        if extra is not None:
            encoded = [b"".join(_attribute_entry(k, v) for k, v in a.items()) for a in extra]
            pieces.append(pa.array(encoded, pa.binary()))
        wires = concat_rows(pieces, rows)
        ids = dedupe.ids(wires.to_pylist(), kafka_coordinates(batch))
        name = self.options.dedupe_attribute
        prefix = _attribute_entry(name, "0" * len(ids[0]))[: -len(ids[0])]
        wires = concat_rows([wires, prefix, pa.array(ids, pa.string()).cast(pa.binary())], rows)
        lengths = pc.binary_length(wires)
        row = first_true(pc.greater(lengths, MAX_MESSAGE_BYTES))
        if row is not None:
            self._check_exact_size(batch, row0, row, wires[row].as_py())
        framed = concat_rows([*_field_pieces(b"\x12", wires)], rows).to_pylist()
        return list(zip(range(row0, row0 + rows), framed, strict=True))

    def _check_exact_size(self, batch: Any, row0: int, row: int, wire: bytes) -> None:
        """RecordError when the message of ``row`` is over Pub/Sub's limit (its wire form
        is a few bytes larger than what Pub/Sub counts)."""
        from google.pubsub_v1.types import PubsubMessage

        parsed = PubsubMessage.deserialize(wire)
        message = Message(row0 + row, parsed.data, dict(parsed.attributes), parsed.ordering_key)
        size = message_size(message)
        if size > MAX_MESSAGE_BYTES:
            raise RecordError(
                f"pubsub: the message of row {row0 + row} is {size} bytes (data, attributes "
                f"and ordering key); Pub/Sub takes at most {MAX_MESSAGE_BYTES} bytes per "
                "message",
                row=row0 + row,
            )

    def _ordering_keys(self, batch: Any, row0: int) -> list[str] | None:
        name = self.options.ordering_key_column
        if name is None:
            return None
        keys = csv_keys(batch.column(name))
        check_ordering_keys(keys, name, row0)
        return ["" if k is None else k for k in keys.to_pylist()]


#: gRPC status codes after which a publish request is sent again
_RETRYABLE_CODES = (
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
    "RESOURCE_EXHAUSTED",
    "ABORTED",
    "INTERNAL",
    "UNKNOWN",
    "CANCELLED",
)


def _wire_size(frame: Frame) -> int:
    return len(frame[1])


class _RequestSender:
    """``send`` for :func:`deliver` without ordering keys: each chunk is one PublishRequest,
    serialized here and sent on the cached PublisherClient's gRPC channel. A request is
    all or nothing: a transient failure resends the whole chunk."""

    def __init__(self, publisher: Any, topic: str, timeout: float) -> None:
        self.topic = topic
        self.timeout = timeout
        self.metadata = (("x-goog-request-params", f"topic={topic}"),)
        self.topic_field = _field(b"\x0a", topic.encode())
        self.rpc = publisher.transport.grpc_channel.unary_unary(
            "/google.pubsub.v1.Publisher/Publish"
        )

    def send(self, chunk: Sequence[Frame]) -> list[int]:
        import grpc

        body = b"".join([self.topic_field, *(f[1] for f in chunk)])
        try:
            self.rpc(body, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            code = exc.code().name if exc.code() is not None else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code in _RETRYABLE_CODES:
                raise RetryableError(f"pubsub {self.topic}: {code}: {details}") from None
            rows = f"rows {chunk[0][0]}..{chunk[-1][0]}"
            if code == "NOT_FOUND":
                raise PubSubTopicNotFoundError(
                    f"pubsub: topic {self.topic} does not exist; create it (gcloud pubsub "
                    "topics create) or fix 'project_id' / 'topic_id'",
                    location=self.topic,
                ) from None
            if code in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
                raise DestinationAccessDeniedError(
                    f"pubsub: the credentials may not publish to {self.topic} ({code}: "
                    f"{details}); check 'service_account_json' (role roles/pubsub.publisher)",
                    location=self.topic,
                ) from None
            if code == "INVALID_ARGUMENT":
                raise RecordError(
                    f"pubsub: {self.topic} refused the messages of {rows}: {details}",
                    row=chunk[0][0],
                ) from None
            raise DestinationError(
                f"pubsub: publishing {rows} to {self.topic} failed: {code}: {details}",
                location=self.topic,
            ) from None
        return []


class _Sender:
    """One delivery round's ``send`` for :func:`deliver`: publish, then wait for all."""

    def __init__(
        self,
        publisher: Any,
        topic: str,
        flush_timeout: float,
        not_found: Callable[[], PubSubTopicNotFoundError],
    ) -> None:
        self.publisher = publisher
        self.topic = topic
        self.flush_timeout = flush_timeout
        self.not_found = not_found
        self.paused: set[str] = set()

    def send(self, chunk: Sequence[Message]) -> list[int]:
        from google.cloud.pubsub_v1.publisher import exceptions as pexc

        for key in self.paused:  # the failed messages of these keys come first in `chunk`
            self.publisher.resume_publish(self.topic, key)
        self.paused.clear()
        futures = []
        for message in chunk:
            try:
                future = self.publisher.publish(
                    self.topic,
                    message.data,
                    ordering_key=message.ordering_key,
                    retry=None,
                    **message.attributes,
                )
            except pexc.MessageTooLargeError as exc:
                raise RecordError(
                    f"pubsub: the message of row {message.row} does not fit in one publish "
                    f"request ({exc})",
                    row=message.row,
                ) from None
            except AssertionError as exc:
                # the client's batch of this key failed while we were adding to it (its
                # "publish after a publish error" assertion): refused, like the batch
                future = concurrent.futures.Future()
                future.set_exception(RuntimeError(str(exc)))
            futures.append(future)
        done, _ = concurrent.futures.wait(futures, timeout=self.flush_timeout)
        refused: list[int] = []
        reasons: list[str] = []
        for index, future in enumerate(futures):
            if future not in done:
                refused.append(index)
                reasons.append(f"no result in flush_timeout={self.flush_timeout:g} s")
                continue
            error = future.exception()
            if error is None:
                continue
            kind = type(error).__name__
            # a key's batches queued behind its failed one are cancelled with a bare
            # RuntimeError (the client's ordered sequencer): resent with the failed one
            cancelled = type(error) is RuntimeError
            if (
                isinstance(error, pexc.PublishToPausedOrderingKeyException)
                or kind in _RETRYABLE
                or cancelled
            ):
                refused.append(index)
                reasons.append(f"{kind}: {error}")
                if chunk[index].ordering_key:
                    self.paused.add(chunk[index].ordering_key)
                continue
            raise _translate(error, self.topic, self.not_found, row=chunk[index].row)
        if refused and len(refused) == len(chunk):
            raise RetryableError(f"pubsub {self.topic}: every publish failed: {reasons[0]}")
        return refused


def _translate(
    error: BaseException,
    topic: str,
    not_found: Callable[[], PubSubTopicNotFoundError],
    *,
    row: int | None = None,
    timeout: float | None = None,
) -> Exception:
    """A publish (or get_topic) failure that is not retried, as a quixsinks error;
    ``timeout``: the ``publish_timeout`` of the call, named when its deadline passed."""
    kind = type(error).__name__
    if kind == "NotFound":
        return not_found()
    if kind == "DeadlineExceeded" and timeout is not None:
        limit = timed_out(timeout, "publish_timeout")
        return DestinationError(f"pubsub: {topic} {limit}: {kind}: {error}", location=topic)
    if kind in _DENIED:
        return DestinationAccessDeniedError(
            f"pubsub: the credentials may not publish to {topic} ({kind}: {error}); check "
            "'service_account_json' (role roles/pubsub.publisher)",
            location=topic,
        )
    if kind in _RETRYABLE:
        return DestinationError(f"pubsub: cannot reach {topic}: {kind}: {error}", location=topic)
    if kind == "InvalidArgument" and row is not None:
        return RecordError(f"pubsub: {topic} refused the message of row {row}: {error}", row=row)
    return DestinationError(
        f"pubsub: publishing to {topic} failed: {kind}: {error}", location=topic
    )


def _check_sizes(lengths: pa.Array, row0: int) -> None:
    row = first_true(pc.greater(lengths, MAX_MESSAGE_BYTES))
    if row is not None:
        raise RecordError(
            f"pubsub: the message data of row {row0 + row} is {lengths[row].as_py()} bytes; "
            f"Pub/Sub takes at most {MAX_MESSAGE_BYTES} bytes per message",
            row=row0 + row,
        )


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes([i]) for i in range(0x80)]


def _field(tag: bytes, value: bytes) -> bytes:
    """A length-delimited protobuf field: its tag byte, the length, the bytes."""
    return tag + _varint(len(value)) + value


def _attribute_entry(name: str, value: str) -> bytes:
    """One entry of PubsubMessage.attributes (field 2, a map<string, string> entry)."""
    return _field(b"\x12", _field(b"\x0a", name.encode()) + _field(b"\x12", value.encode()))


def encode_message(data: bytes, attributes: dict[str, str], ordering_key: str = "") -> bytes:
    """A google.pubsub.v1.PubsubMessage in protobuf wire format: data (field 1),
    attributes (field 2), ordering_key (field 5). Fields may come in any order, so more
    attribute entries can be appended to the result."""
    parts = [_field(b"\x0a", data)] if data else []
    for name, value in attributes.items():
        parts.append(_attribute_entry(name, value))
    if ordering_key:
        parts.append(_field(b"\x2a", ordering_key.encode()))
    return b"".join(parts)


def publish_request(topic: str, wires: Sequence[bytes]) -> bytes:
    """A google.pubsub.v1.PublishRequest: the topic (field 1), the messages (field 2)."""
    return b"".join([_field(b"\x0a", topic.encode()), *(_field(b"\x12", w) for w in wires)])


def _header(pair: Any) -> tuple[str, Any]:
    if isinstance(pair, dict):
        return str(pair.get("key")), pair.get("value")
    name, value = pair
    return str(name), value


def _attribute_text(value: Any, name: Any, row: int) -> str:
    """An attribute value as text; RecordError for bytes that are not UTF-8 (Pub/Sub
    attributes are text, and replacement characters would change the value silently)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError(
                f"pubsub: attribute {str(name)!r} of row {row} holds bytes that are not UTF-8 "
                f"text ({value[:40]!r}); Pub/Sub attributes are text: decode or encode it "
                "(e.g. base64) in Spark",
                column=str(name),
                row=row,
            ) from None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _as_bytes(value: Any, option: str, row: int) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise RecordError(
        f"pubsub: {option!r} returned {type(value).__name__} for row {row}; it must return "
        "str or bytes",
        row=row,
    )


def _str(value: Any, option: str, row: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise RecordError(
        f"pubsub: {option!r} returned {type(value).__name__} for row {row}; it must return str",
        row=row,
    )
