"""The MQTT sink: one message per row to ``<topic_root>/<key>``; QoS 1/2 at-least-once.

Executor: each SinkBatch becomes messages (``wire``): the topic ``<topic_root>/<key>`` and
the payload (a Kafka JSON value as the producer wrote it, the JSON object of the value
columns, or a serializer's result) built in Arrow, the retain
flag (a constant or a boolean column) and, with MQTT 5, the user properties from the
``properties`` columns and ``qs_dedupe_id``, a deterministic id of the message's content and
either its Kafka coordinates or its position in the Spark partition
(:class:`~quixsinks.core.delivery.DedupeIds`), the same when the batch is replayed. A row MQTT
cannot carry (a null key, a topic with a wildcard or NUL or over 65535 bytes, a user
property a broker refuses, a packet over the broker's Maximum Packet Size or the protocol's
limit) is refused by its row before anything of the batch is published: ``on_error`` fails
naming it, skips it or dead-letters it.

The messages go through one connection per Python worker (``ClientCache``; a worker runs one
task at a time) in windows of ``max_inflight``: a window is published back to back and its
acknowledgements are awaited together, at most ``mqtt_flush_timeout_seconds``
(:meth:`Connection.publish_window`). Those not acknowledged then, or lost with the
connection, are resent in their order on a new connection with the RetryPolicy's backoff
(:func:`~quixsinks.core.delivery.deliver`); past ``retry_deadline_seconds`` the task fails
with a DeliveryError counting them. ``write()`` returns only once every message of the task
was acknowledged, so a micro-batch commits only when every publish of every task was.

Driver: nothing to commit. MQTT has no idempotent publish: a resent message, a retried task
or a replayed micro-batch publishes again, with the same dedupe id (MQTT 5). QoS 0 is
at-most-once: nothing acknowledges it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pyarrow as pa

from quixsinks.core.batch import SinkBatch
from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.delivery import DedupeIds, deliver
from quixsinks.core.errors import DestinationError, OptionError, RecordError, RetryableError
from quixsinks.core.options import load_callable
from quixsinks.core.sink import Sink, Task

from .client import Connection, import_client, where
from .options import MAX_PACKET_BYTES, MQTTOptions
from .wire import Messages, build_messages

__all__ = ["MQTTSink"]

# one connection per process and options (Python workers are reused), closed at exit
_CONNECTIONS: ClientCache[Connection] = ClientCache("mqtt connections", lambda c: c.close())


class MQTTSink(Sink[MQTTOptions, None]):
    """Publishes one MQTT message per row; QoS 1/2 at-least-once (MQTT 5: with a dedupe id
    user property), QoS 0 at-most-once. See docs/sinks/mqtt.md."""

    name: ClassVar[str] = "mqtt"
    options_class = MQTTOptions
    guarantee = "at-least-once"
    extra = "mqtt"
    retries_requests = True  # deliver() resends unacknowledged messages under the task's policy

    def __init__(self, options: MQTTOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.key_column: str | None = None
        self.kafka_coordinates = False

    @classmethod
    def check_dependencies(cls) -> None:
        import_client()

    def __repr__(self) -> str:
        o = self.options
        return (
            f"MQTTSink(server={o.server!r}, port={o.port}, topic_root={o.topic_root!r}, "
            f"version={o.version!r}, qos={o.qos})"
        )

    @property
    def _where(self) -> str:
        return where(self.options)

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        records = self.records
        assert records is not None
        opts = self.options
        self.key_column = records.key
        if self.key_column is not None:
            t = schema.field(self.key_column).type
            if pa.types.is_nested(t) and opts.key_serializer is None:
                raise OptionError(
                    f"mqtt: the key column {self.key_column!r} has type {t}; a topic level "
                    "is text: give a column of text, bytes or numbers (key_column), or a "
                    "key_serializer",
                    option="key_column",
                    value=self.key_column,
                )
        if opts.retain_flag is None:
            t = self.column_type(schema, opts.retain, "retain")
            if not pa.types.is_boolean(t):
                raise OptionError(
                    f"mqtt: 'retain' names column {opts.retain!r} of type {t}; it must be "
                    "true, false or a boolean column",
                    option="retain",
                    value=opts.retain,
                )
        if opts.properties:
            types = [self.column_type(schema, n, "properties") for n in opts.properties]
            for name, t in zip(opts.properties, types, strict=True):
                if pa.types.is_map(t) and len(opts.properties) > 1:
                    raise OptionError(
                        f"mqtt: 'properties' column {name!r} is a map; give a map column "
                        "alone, or scalar columns",
                        option="properties",
                        value=",".join(opts.properties),
                    )
                if pa.types.is_nested(t) and not pa.types.is_map(t):
                    raise OptionError(
                        f"mqtt: 'properties' column {name!r} has type {t}; user properties "
                        "are text: give scalar columns or one map<string,string>",
                        option="properties",
                        value=",".join(opts.properties),
                    )
        for path, option_name in (
            (opts.key_serializer, "key_serializer"),
            (opts.value_serializer, "value_serializer"),
        ):
            if path is not None:
                load_callable(path, option_name=option_name)
        self.kafka_coordinates = (
            records.topic is not None
            and records.partition is not None
            and records.offset is not None
        )

    def preflight(self) -> None:
        """Connect once (TCP, TLS, CONNACK): an unreachable broker, refused credentials or a
        certificate that does not verify fail here, before any task runs."""
        opts = self.options

        def probe() -> None:
            connection = Connection(opts)
            try:
                connection.connect()
            finally:
                connection.close()

        try:
            opts.retry_policy().call(probe, what=f"{self._where}: connect")
        except RetryableError as exc:
            raise DestinationError(
                f"{exc.message}; are 'server', 'port' and 'tls_enabled' right?",
                location=self._where,
            ) from None

    # ------------------------------------------------------------------ executor

    def _connection(self) -> Connection:
        """The process's connection for these options: connected, recently used, else new."""
        key = client_key(self.options)
        connection = _CONNECTIONS.get(key, lambda: Connection(self.options))
        if connection.connected and connection.usable:
            return connection
        if connection.connected or connection.closed:  # lost, or idle past the keep-alive
            _CONNECTIONS.discard(key)
            connection = _CONNECTIONS.get(key, lambda: Connection(self.options))
        try:
            connection.connect()
        except BaseException:
            _CONNECTIONS.discard(key)
            raise
        return connection

    def _drop_connection(self) -> None:
        _CONNECTIONS.discard(client_key(self.options))

    def setup(self, task: Task) -> None:
        ctx = task.context
        opts = self.options
        task.state["dedupe"] = (
            DedupeIds(ctx.sink_id, ctx.batch_id, ctx.partition_id) if opts.dedupe_ids else None
        )
        task.state["row0"] = 0
        task.state["clean"] = True

    def types_json_values(self) -> bool:
        """A payload is the value's JSON text (or a serializer's bytes over each message's
        own object): nothing reads typed value columns."""
        return False

    def write(self, batch: SinkBatch) -> None:
        task = self.task_of(batch)
        row0 = int(task.state.get("row0", 0))
        if batch.num_rows == 0:
            return
        what = f"{self._where}: publish (batch {batch.batch_id}, partition {batch.partition_id})"
        limit = MAX_PACKET_BYTES
        if self.options.version == "5":
            # the broker's Maximum Packet Size (CONNACK): a row over it is refused, not sent
            announced = task.retry(lambda: self._connection().maximum_packet_size, what=what)
            limit = announced or limit
        messages = self.messages(batch, task.state.get("dedupe"), row0, limit)
        task.state["row0"] = row0 + batch.num_rows
        task.state["clean"] = False

        rejected: dict[int, str] = {}  # message -> why the broker refused it (its content)

        def send(chunk: Sequence[int]) -> list[int]:
            connection = self._connection()
            try:
                result = connection.publish_window(messages, chunk, what)
            except BaseException:
                self._drop_connection()
                raise
            for index, text in result.refused:
                rejected[chunk[index]] = text
            if result.unacknowledged:
                # the old session may still acknowledge late: a new connection, new packet ids
                self._drop_connection()
                if len(result.unacknowledged) == len(chunk):
                    raise RetryableError(f"{what}: {result.reason}")
            return result.unacknowledged

        window = self.options.max_inflight
        if self.options.qos:
            # a window never passes the broker's receive maximum (MQTT 5)
            window = min(window, task.retry(lambda: self._connection().receive_maximum, what=what))
        deliver(
            list(range(len(messages))),
            send,
            task.policy,
            what=what,
            chunk_size=window,
            stats=task.stats,
        )
        task.state["clean"] = True
        rows = messages.batch if messages.batch is not None else batch
        for message in sorted(rejected):  # after delivery: the others have landed
            rows.refuse(message, RecordError(rejected[message], row=message))
        batch.count("messages", len(messages) - len(rejected))

    def messages(
        self,
        batch: SinkBatch,
        dedupe: DedupeIds | None,
        row0: int = 0,
        max_packet_bytes: int = MAX_PACKET_BYTES,
    ) -> Messages:
        """The messages of a batch: checked (a row MQTT cannot carry is refused, as
        ``on_error`` says), dedupe ids placed (MQTT 5)."""
        return build_messages(
            self.options,
            batch,
            self.key_column,
            dedupe,
            row0,
            self.kafka_coordinates,
            max_packet_bytes,
        )

    def close(self, task: Task) -> None:
        if not task.state.get("clean", True):
            self._drop_connection()  # a failed task's window may still be in flight
