"""Options of the ``pubsub`` sink (Quix PubSubSink's names, snake_case or camelCase)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from quixsinks.core.errors import OptionError
from quixsinks.core.options import check_import_path, option
from quixsinks.core.sink import CommonOptions, small_batches

from .wire import name_problem

__all__ = ["MAX_REQUEST_BYTES", "MAX_REQUEST_MESSAGES", "PubSubOptions"]

#: Pub/Sub refuses a publish request larger than this (the publisher's batch max_bytes cap)
MAX_REQUEST_BYTES = 10_000_000
#: and more than this many messages in one publish request
MAX_REQUEST_MESSAGES = 1000

#: a topic id: 3 to 255 of letters, digits and - _ . ~ + %, starting with a letter, not
#: with "goog" (in any case)
_TOPIC_ID = r"(?![Gg][Oo][Oo][Gg])[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}"


@dataclass(frozen=True, kw_only=True)
class PubSubOptions(CommonOptions):
    sink_name: ClassVar[str] = "pubsub"

    project_id: str = option(pattern=r"[^/]+", doc="Google Cloud project of the topic")
    topic_id: str = option(
        pattern=_TOPIC_ID,
        doc="Topic id: the last part of projects/<project>/topics/<topic>, not the path",
    )
    service_account_json: str | None = option(
        None,
        secret=True,
        doc="Service account key: its JSON text, or the path of its file; default: "
        "application-default credentials",
    )
    emulator_host: str | None = option(
        None,
        env="PUBSUB_EMULATOR_HOST",
        doc="host:port of a Pub/Sub emulator (no credentials); default: PUBSUB_EMULATOR_HOST",
    )
    value_serializer: str | None = option(
        None,
        one_of="data",
        doc="Import path (module:function) called per row on the message's own value (as "
        "json.loads gives it; None for a tombstone); returns str or bytes; json:dumps gives "
        "Quix's bytes (default: the value as JSON, a Kafka JSON value as the producer wrote "
        "it)",
    )
    key_serializer: str | None = option(
        None,
        doc="Import path (module:function) called per row on a non-null key; returns str "
        "(default: the key as text, bytes decoded as UTF-8 as Quix's bytes.decode; a key "
        "that is not UTF-8 is refused, on_error)",
    )
    data_column: str | None = option(
        None,
        one_of="data",
        doc="Send this binary or string column as the message data, as is (default: the "
        "value serialized)",
    )
    ordering_key_column: str | None = option(
        None,
        doc="Column holding each message's ordering key (message ordering is enabled; a key "
        "whose publish failed is resumed by the sink before it resends)",
    )
    attributes_columns: tuple[str, ...] = option(
        (),
        doc="Extra attributes: one map<string,string> column, or comma-separated columns "
        "sent as attributes named after them (values as text)",
    )
    metadata_attributes: bool = option(
        True,
        doc="Set Quix's attributes: key, timestamp, offset and the Kafka headers (as text)",
    )
    dedupe_attribute: str = option(
        "qs_dedupe_id",
        doc="Attribute holding each message's deterministic dedupe id (sink id, batch id, "
        "content hash)",
    )
    flush_timeout: float = option(
        5.0,
        positive=True,
        doc="Seconds to wait for the outstanding publishes of one round; those not done then "
        "are resent under the retry policy",
    )
    publish_timeout: float = option(
        10.0,
        positive=True,
        doc="Deadline of one gRPC request (publish, and the topic check before any task), "
        "in seconds: connecting and the answer included",
    )
    max_messages: int = option(
        MAX_REQUEST_MESSAGES,
        minimum=1,
        maximum=MAX_REQUEST_MESSAGES,
        doc="Batch setting: messages per publish request",
    )
    max_bytes: int = option(
        4 * 1024 * 1024,
        minimum=1,
        maximum=MAX_REQUEST_BYTES,
        doc="Batch setting: bytes per publish request",
    )
    max_latency: float = option(
        0.01,
        minimum=0,
        doc="Batch setting (with ordering keys): seconds a message may wait for its batch to "
        "fill; without, full requests are sent at once",
    )
    max_outstanding_messages: int = option(
        4000,
        minimum=1,
        doc="Flow control: messages a task has published and not yet seen acknowledged "
        "(without ordering keys: max_outstanding_messages / max_messages requests in flight, "
        "at most 16)",
    )
    max_outstanding_bytes: int = option(
        64 * 1024 * 1024,
        minimum=1,
        doc="Flow control: bytes a task has published and not yet seen acknowledged",
    )
    round_messages: int = option(
        20_000,
        minimum=1,
        doc="Messages a task publishes before it waits for all their results (one delivery "
        "round; failed ones are resent); bounds the futures a task holds",
    )
    max_batch_bytes: int = small_batches(
        "a SinkBatch's messages are all built before it publishes, about 1 KB of Python "
        "objects a row, so 64 MiB of small rows held about 2 GB"
    )
    check_topic: bool = option(
        True,
        doc="Check that the topic exists (get_topic) on the driver before any task; skipped "
        "when the credentials may not read topics",
    )

    def validate(self) -> None:
        super().validate()
        problem = name_problem(self.dedupe_attribute)
        if problem:
            raise OptionError(
                f"pubsub: 'dedupe_attribute' {self.dedupe_attribute!r}: {problem} (it must be "
                "a non-empty name not starting with 'goog')",
                option="dedupe_attribute",
                value=self.dedupe_attribute,
            )
        for name in ("key_serializer", "value_serializer"):
            check_import_path(getattr(self, name), option_name=name)
