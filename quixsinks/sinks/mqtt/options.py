"""Options of the ``mqtt`` sink (Quix MQTTSink's names, snake_case or camelCase)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Literal

from quixsinks.core.errors import OptionError
from quixsinks.core.options import check_import_path, option
from quixsinks.core.sink import CommonOptions, small_batches

__all__ = [
    "MAX_TOPIC_BYTES",
    "NOT_IN_STRINGS_RE2",
    "MQTTOptions",
    "MQTTVersion",
    "string_problem",
    "topic_problem",
]

MQTTVersion = Literal["3.1", "3.1.1", "5"]

#: a topic name is a UTF-8 string of at most 65535 bytes (MQTT 3.1.1 and 5, 1.5.3)
MAX_TOPIC_BYTES = 65535
#: paho-mqtt (and the protocol's variable byte integer) caps a packet at this many bytes
MAX_PACKET_BYTES = 268_435_455
#: MQTT 3.1 allows client identifiers of 1 to 23 characters
MQTT31_MAX_CLIENT_ID = 23
#: what the sink appends to ``client_id`` so that no two connections share one: "-" + hex
CLIENT_ID_SUFFIX_CHARS = 9


#: what an MQTT UTF-8 string must not hold (NUL) and what brokers refuse as malformed
#: (Mosquitto: the control characters and Unicode noncharacters the spec says SHOULD NOT
#: appear); as a Python and an RE2 character class
_NOT_IN_STRINGS = re.compile("[\x00-\x1f\x7f-\x9f\ufdd0-\ufdef\ufffe\uffff]")
NOT_IN_STRINGS_RE2 = r"[\x00-\x1f\x7f-\x9f\x{fdd0}-\x{fdef}\x{fffe}\x{ffff}]"


def string_problem(text: str) -> str | None:
    """Why ``text`` cannot be an MQTT string a broker accepts, or None."""
    found = _NOT_IN_STRINGS.search(text)
    if found is None:
        return None
    char = found.group()
    what = "NUL" if char == "\x00" else f"the control character or noncharacter {char!r}"
    return f"it contains {what}, which MQTT brokers refuse as a malformed packet"


def topic_problem(topic: str) -> str | None:
    """Why ``topic`` cannot be published to (wildcards, NUL and control characters, empty,
    too long), or None."""
    if not topic:
        return "it is empty"
    for bad, name in (("+", "the wildcard '+'"), ("#", "the wildcard '#'")):
        if bad in topic:
            return f"it contains {name}, which no MQTT topic name may hold"
    problem = string_problem(topic)
    if problem:
        return problem
    size = len(topic.encode("utf-8", "surrogatepass"))
    if size > MAX_TOPIC_BYTES:
        return f"it is {size} bytes long; a topic name holds at most {MAX_TOPIC_BYTES}"
    return None


@dataclass(frozen=True, kw_only=True)
class MQTTOptions(CommonOptions):
    sink_name: ClassVar[str] = "mqtt"

    client_id: str = option(
        doc="MQTT client identifier; each connection appends '-' and 8 random hex digits, "
        "so that two tasks never share one (the broker would disconnect the first)"
    )
    server: str = option(doc="MQTT broker host name or address")
    port: int = option(
        minimum=1, maximum=65535, doc="MQTT broker port (1883 plain, 8883 TLS by convention)"
    )
    topic_root: str = option(
        doc="Topic root: each record goes to <topic_root>/<key> (no key column: topic_root)"
    )
    username: str | None = option(None, doc="User name for the broker (default: none)")
    password: str | None = option(None, secret=True, doc="Password for the broker")
    version: MQTTVersion = option(
        "3.1.1", doc="MQTT protocol version; 5 adds user properties and the dedupe id property"
    )
    tls_enabled: bool = option(True, doc="Connect with TLS (Quix's default)")
    tls_ca_cert: str | None = option(
        None,
        doc="CA bundle file (PEM) that signed the broker's certificate (default: the system's CAs)",
    )
    tls_verify: bool = option(
        True,
        doc="Verify the broker's certificate and host name (false: encrypted, but the "
        "broker is not authenticated)",
    )
    qos: int = option(
        1,
        minimum=0,
        maximum=2,
        doc="Quality of service: 0 at-most-once, 1 and 2 at-least-once (Quix has 0 and 1)",
    )
    retain: str = option(
        "false",
        doc="Retain each message for new subscribers: true, false, or the name of a boolean "
        "column (null: not retained)",
    )
    properties: tuple[str, ...] = option(
        (),
        doc="MQTT 5 user properties: one map<string,string> column, or comma-separated "
        "columns sent as properties named after them (values as text, nulls left out)",
    )
    dedupe_property: str | None = option(
        "qs_dedupe_id",
        doc="MQTT 5: the user property holding each message's deterministic dedupe id "
        "(none: no id)",
    )
    key_serializer: str | None = option(
        None,
        doc="Import path (module:function) called per row on the key, returning the topic "
        "suffix as str (default: the key as text, bytes decoded as UTF-8, as Quix's "
        "bytes.decode)",
    )
    value_serializer: str | None = option(
        None,
        doc="Import path (module:function) called per row on the value as a Quix app holds "
        "it (a Kafka JSON value: json.loads of the message, None for a tombstone; else a "
        "dict of the value columns), returning str or bytes; json:dumps publishes Quix's "
        "MQTTSink payloads exactly (default: a Kafka JSON value as the producer wrote it, "
        "null for a tombstone; else a compact JSON object of the value columns)",
    )
    mqtt_flush_timeout_seconds: float = option(
        10.0,
        positive=True,
        doc="Seconds to wait for the acknowledgements of one window of publishes (and for "
        "the broker's CONNACK); those not acknowledged then are resent on a new connection "
        "under the retry policy",
    )
    max_inflight: int = option(
        1000,
        minimum=1,
        maximum=65535,
        doc="Messages a task publishes before it waits for their acknowledgements (one "
        "window; at most 65535, and with MQTT 5 at most the broker's receive maximum)",
    )
    keepalive_seconds: int = option(60, minimum=5, doc="MQTT keep-alive interval of the connection")
    max_batch_bytes: int = small_batches(
        "a SinkBatch's messages (topic, payload and properties of each row) are all built "
        "before the first is published, several hundred bytes of Python objects a row"
    )

    def validate(self) -> None:
        super().validate()
        if not self.client_id.strip():
            raise OptionError("mqtt: 'client_id' is empty", option="client_id")
        if self.version == "3.1" and (
            len(self.client_id) + CLIENT_ID_SUFFIX_CHARS > MQTT31_MAX_CLIENT_ID
        ):
            limit = MQTT31_MAX_CLIENT_ID - CLIENT_ID_SUFFIX_CHARS
            raise OptionError(
                f"mqtt: 'client_id' {self.client_id!r} is {len(self.client_id)} characters; "
                f"MQTT 3.1 allows 23 and the sink appends {CLIENT_ID_SUFFIX_CHARS} "
                f"('-' and 8 hex digits), so give at most {limit}",
                option="client_id",
                value=self.client_id,
            )
        if not self.server.strip() or "/" in self.server:
            raise OptionError(
                f"mqtt: 'server' {self.server!r} is not a host name or address (give the "
                "host only, the port in 'port')",
                option="server",
                value=self.server,
            )
        problem = topic_problem(self.topic_root)
        if problem:
            raise OptionError(
                f"mqtt: 'topic_root' {self.topic_root!r} is not a topic name: {problem}",
                option="topic_root",
                value=self.topic_root,
            )
        if self.version != "5" and self.properties:
            raise OptionError(
                f"mqtt: 'properties' needs version=5 (user properties are an MQTT 5 "
                f"feature; version is {self.version})",
                option="properties",
                value=",".join(self.properties),
            )
        if self.password is not None and self.username is None:
            raise OptionError(
                "mqtt: 'password' is given without 'username'; MQTT sends a password only "
                "with a user name",
                option="username",
            )
        if self.tls_ca_cert is not None and not self.tls_enabled:
            raise OptionError(
                "mqtt: 'tls_ca_cert' is given but tls_enabled=false (the connection would "
                "not be encrypted); set tls_enabled=true or drop tls_ca_cert",
                option="tls_ca_cert",
                value=self.tls_ca_cert,
            )
        for name in ("key_serializer", "value_serializer"):
            check_import_path(getattr(self, name), option_name=name)

    @property
    def retain_flag(self) -> bool | None:
        """``retain`` as a constant, or None when it names a column."""
        text = self.retain.strip().lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        return None

    @property
    def dedupe_ids(self) -> bool:
        """Whether each message carries a dedupe id (MQTT 5, ``dedupe_property`` set)."""
        return self.version == "5" and bool(self.dedupe_property)
