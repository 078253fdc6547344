"""A SinkBatch as MQTT messages: topics, payloads, retain flags, user properties, dedupe ids.

Everything that can be is built in Arrow for the whole batch: the topic
``<topic_root>/<key>`` (the key as text, binary keys strictly UTF-8 as Quix's
``bytes.decode``), the payload (a Kafka JSON value as the producer wrote it, or the JSON
object of the value columns, as the other sinks build it; or a ``value_serializer``'s
str/bytes, called on each message's own object), and the checks that name the first
offending row before anything of the batch is published: a topic with a wildcard (``+``,
``#``), NUL or over 65535 bytes, a null key, a payload over the protocol's packet limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import concat_rows, serialize_each, uint16_be, varints
from quixsinks.core.batch import SinkBatch
from quixsinks.core.delivery import DedupeIds, kafka_coordinates
from quixsinks.core.errors import RecordError
from quixsinks.core.formats import csv_keys, decode_utf8_strict, value_json_texts
from quixsinks.core.options import load_callable
from quixsinks.core.rowchecks import RowChecks

from .options import (
    MAX_PACKET_BYTES,
    MAX_TOPIC_BYTES,
    NOT_IN_STRINGS_RE2,
    MQTTOptions,
    string_problem,
    topic_problem,
)

__all__ = ["Messages", "build_messages"]


@dataclass
class Messages:
    """One batch's messages as MQTT PUBLISH packets, split around the packet id.

    A QoS 1/2 packet is ``head[i] + <packet id> + tail[i]``; a QoS 0 packet has no packet
    id. The packet ids are given per window (:meth:`window`), when the packets are sent.

    Attributes:
        topics: each message's topic (for error messages).
        head: fixed header, remaining length, topic length and topic.
        tail: the MQTT 5 properties (length first) and the payload.
        qos: the QoS of every message.
        batch: the rows the messages come from, message ``i`` from row ``i``.
    """

    topics: pa.Array
    head: pa.Array
    tail: pa.Array
    qos: int
    batch: SinkBatch | None = None  # the rows of the messages, one each (refused ones out)

    def __len__(self) -> int:
        return len(self.topics)

    def window(self, indices: Sequence[int]) -> memoryview:
        """The packets of messages ``indices``, packet ids 1, 2... in that order."""
        take = pa.array(indices, pa.int64())
        head, tail = self.head.take(take), self.tail.take(take)
        if self.qos:
            ids = uint16_be(pa.array(range(1, len(indices) + 1), pa.int32()))
            packets = concat_rows([head, ids, tail], len(indices), pa.binary())
        else:
            packets = concat_rows([head, tail], len(indices), pa.binary())
        if not len(indices):
            return memoryview(b"")
        import numpy as np

        offsets = np.frombuffer(packets.buffers()[1], dtype=np.int32)
        start, end = offsets[packets.offset], offsets[packets.offset + len(packets)]
        return memoryview(packets.buffers()[2])[int(start) : int(end)]


def _where(batch: SinkBatch, row: int) -> str:
    return f"row {row} of batch {batch.batch_id} partition {batch.partition_id}"


def build_messages(
    opts: MQTTOptions,
    batch: SinkBatch,
    key_column: str | None,
    dedupe: DedupeIds | None,
    row0: int = 0,
    with_coordinates: bool = False,
    max_packet_bytes: int = MAX_PACKET_BYTES,
) -> Messages:
    """The messages of ``batch`` (rows ``row0``... of its task), checked, dedupe ids placed.

    A row MQTT cannot carry (a null key, a topic the protocol refuses, a user property a
    broker refuses, a packet over ``max_packet_bytes``: the broker's Maximum Packet Size
    or the protocol's limit) is refused by its row (``batch.refuse``: ``on_error``) and
    left out, before anything is published."""
    checks = RowChecks(batch)
    topics = _topics(opts, batch, key_column, row0, checks)
    payloads = _payloads(opts, batch, row0)
    retain = _retain(opts, batch)
    rows = batch.num_rows
    properties: pa.Array | None = None
    if opts.version == "5":
        properties = _user_properties(opts, batch, row0, checks)
        if opts.dedupe_ids and dedupe is not None:
            content = pc.binary_join_element_wise(
                pc.cast(topics, pa.binary()), payloads, b"\x00"
            ).to_pylist()
            coordinates = kafka_coordinates(batch) if with_coordinates else None
            ids = pa.array(dedupe.ids(content, coordinates), pa.binary())
            entry = _property_entry((opts.dedupe_property or "").encode(), ids, rows)
            properties = concat_rows([entry, properties], rows, pa.binary())
        properties = concat_rows(
            [varints(pc.binary_length(properties)), properties], rows, pa.binary()
        )
    topic_bytes = pc.cast(topics, pa.binary())
    topic_length = pc.binary_length(topic_bytes)
    remaining = pc.add(pc.add(topic_length, 2 + (2 if opts.qos else 0)), pc.binary_length(payloads))
    if properties is not None:
        remaining = pc.add(remaining, pc.binary_length(properties))
    # the fixed header: one byte, then the remaining length in 1 to 4 bytes
    header = pc.add(
        1,
        pc.add(
            1,
            pc.add(
                pc.cast(pc.greater(remaining, 127), pa.int64()),
                pc.add(
                    pc.cast(pc.greater(remaining, 16383), pa.int64()),
                    pc.cast(pc.greater(remaining, 2097151), pa.int64()),
                ),
            ),
        ),
    )
    packet = pc.add(pc.cast(remaining, pa.int64()), header)
    limit = min(max_packet_bytes, MAX_PACKET_BYTES)
    too_big = pc.greater(pc.cast(remaining, pa.int64()), MAX_PACKET_BYTES)
    too_big = pc.or_(too_big, pc.greater(packet, limit))
    if pc.any(too_big).as_py():
        checks.add(
            too_big,
            lambda row: (
                f"mqtt: {_where(batch, row0 + row)}: the message is "
                f"{packet[row].as_py()} bytes as an MQTT packet; "
                + (
                    f"the broker takes at most {limit} (its Maximum Packet Size)"
                    if limit < MAX_PACKET_BYTES
                    else f"an MQTT packet holds at most {MAX_PACKET_BYTES} bytes"
                )
            ),
        )
        # a packet that will not be sent must still be encodable here
        remaining = pc.if_else(too_big, 0, remaining)
    first = 0x30 | (opts.qos << 1)
    fixed = pc.if_else(
        retain, pa.scalar(bytes([first | 1]), pa.binary()), pa.scalar(bytes([first]), pa.binary())
    )
    head = concat_rows(
        [fixed, varints(remaining), uint16_be(topic_length), topic_bytes], rows, pa.binary()
    )
    tail = (
        payloads if properties is None else concat_rows([properties, payloads], rows, pa.binary())
    )
    if checks:
        drop = checks.mask
        batch = checks.refuse()  # on_error: fail naming the first row, skip, or dead-letter
        keep = pc.invert(drop)
        topics, head, tail = topics.filter(keep), head.filter(keep), tail.filter(keep)
    return Messages(topics, head, tail, opts.qos, batch)


def _property_entry(name: bytes, values: pa.Array, rows: int) -> pa.Array:
    """An MQTT 5 user property (identifier 0x26, name and value as UTF-8 strings) per row."""
    prefix = b"\x26" + len(name).to_bytes(2, "big") + name
    return concat_rows([prefix, uint16_be(pc.binary_length(values)), values], rows, pa.binary())


def _topics(
    opts: MQTTOptions, batch: SinkBatch, key_column: str | None, row0: int, checks: RowChecks
) -> pa.Array:
    """``<topic_root>/<key>`` per row; a null key or a topic MQTT refuses goes to
    ``checks`` (its topic is then a placeholder that is never published)."""
    if key_column is None:
        return pa.array([opts.topic_root] * batch.num_rows, pa.string())
    column = batch.column(key_column)
    if opts.key_serializer is not None:
        fn = load_callable(opts.key_serializer, option_name="key_serializer")
        texts: list[str | None] = []
        for offset, key in enumerate(column.to_pylist()):
            text = None if key is None else fn(key)
            if text is not None and not isinstance(text, str):
                raise RecordError(
                    f"mqtt: 'key_serializer' returned {type(text).__name__} for "
                    f"{_where(batch, row0 + offset)}; it must return str (a topic is text)",
                    row=row0 + offset,
                )
            texts.append(text)
        keys = pa.array(texts, pa.string())
    elif pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        keys = decode_utf8_strict(pc.cast(column, pa.binary()), f"mqtt: key column {key_column!r}")
    else:
        keys = csv_keys(column)
    null = pc.is_null(keys)
    if keys.null_count:
        checks.add(
            null,
            lambda row: (
                f"mqtt: {_where(batch, row0 + row)} has a null key (column "
                f"{key_column!r}); the topic is <topic_root>/<key>: fill the key, or set "
                f"key_column=none to publish every row to {opts.topic_root!r}"
            ),
            key_column,
        )
        keys = pc.fill_null(keys, "")
    topics = pc.binary_join_element_wise(opts.topic_root, keys, "/")
    bad = pc.or_(
        pc.or_(
            pc.match_substring_regex(topics, r"[+#]"),
            pc.match_substring_regex(topics, NOT_IN_STRINGS_RE2),
        ),
        pc.or_(
            pc.greater(pc.binary_length(pc.cast(topics, pa.binary())), MAX_TOPIC_BYTES),
            pc.equal(pc.binary_length(pc.cast(topics, pa.binary())), 0),
        ),
    )
    bad = pc.and_(bad, pc.invert(null))
    if pc.any(bad).as_py():

        def why(row: int, topics: pa.Array = topics) -> str:
            topic = topics[row].as_py()
            shown = topic if len(topic) <= 80 else topic[:80] + "..."
            return (
                f"mqtt: {_where(batch, row0 + row)}: the topic {shown!r} cannot be published "
                f"to: {topic_problem(topic)} (key column {key_column!r})"
            )

        checks.add(bad, why, key_column)
        topics = pc.if_else(bad, pa.scalar(opts.topic_root, pa.string()), topics)
    return topics


def _payloads(opts: MQTTOptions, batch: SinkBatch, row0: int) -> pa.Array:
    """Each row's payload: ``value_serializer`` called on the value as a Quix app holds it
    (:meth:`SinkBatch.messages`), or by default the value as JSON text (a Kafka JSON
    value as the producer wrote it, ``null`` for a tombstone: no Python per row)."""
    if opts.value_serializer is None:
        return value_json_texts(batch)
    fn = load_callable(opts.value_serializer, option_name="value_serializer")
    return serialize_each(
        fn, batch.messages(), sink="mqtt", option="value_serializer", first_row=row0
    )


def _retain(opts: MQTTOptions, batch: SinkBatch) -> pa.Array:
    flag = opts.retain_flag
    if flag is not None:
        return pa.repeat(pa.scalar(flag), batch.num_rows)
    column = batch.column(opts.retain)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return pc.fill_null(column, False)


def _user_properties(opts: MQTTOptions, batch: SinkBatch, row0: int, checks: RowChecks) -> pa.Array:
    """Each row's user properties (their encoded entries) from the ``properties`` columns;
    null values are left out. A row holding a value a broker refuses goes to ``checks``."""
    rows = batch.num_rows
    names = opts.properties
    empty = pa.repeat(pa.scalar(b"", pa.binary()), rows)
    if not names:
        return empty
    if len(names) == 1 and pa.types.is_map(batch.column(names[0]).type):
        encoded: list[bytes] = []
        bad: dict[int, str] = {}
        for offset, pairs in enumerate(batch.column(names[0]).to_pylist()):
            parts = []
            for name, value in pairs or ():
                if value is None:
                    continue
                n, problem = _text(name, names[0])
                v, value_problem = _text(value, names[0])
                problem = problem or value_problem
                if problem:
                    bad.setdefault(offset, problem)
                    continue
                nb, vb = n.encode(), v.encode()
                parts.append(
                    b"\x26" + len(nb).to_bytes(2, "big") + nb + len(vb).to_bytes(2, "big") + vb
                )
            encoded.append(b"".join(parts))
        if bad:
            checks.add(
                pa.array([i in bad for i in range(rows)], pa.bool_()),
                lambda row: f"mqtt: {_where(batch, row0 + row)}: {bad[row]}",
                names[0],
            )
        return pa.array(encoded, pa.binary())
    pieces: list[pa.Array] = []
    for name in names:
        texts = csv_keys(batch.column(name))
        _check_strings(texts, name, batch, row0, checks)
        values = pc.cast(pc.fill_null(texts, ""), pa.binary())
        entry = _property_entry(name.encode(), values, rows)
        pieces.append(pc.if_else(pc.is_valid(texts), entry, pa.scalar(b"", pa.binary())))
    return concat_rows(pieces, rows, pa.binary()) if len(pieces) > 1 else pieces[0]


def _check_strings(
    texts: pa.Array, column: str, batch: SinkBatch, row0: int, checks: RowChecks
) -> None:
    """The rows whose user property value a broker would refuse, to ``checks``."""
    bad = pc.fill_null(pc.match_substring_regex(texts, NOT_IN_STRINGS_RE2), False)
    too_long = pc.greater(pc.fill_null(pc.binary_length(pc.cast(texts, pa.binary())), 0), 65535)
    bad = pc.or_(bad, too_long)
    if pc.any(bad).as_py():

        def why(row: int) -> str:
            text = texts[row].as_py()
            problem = string_problem(text) or (
                f"it is {len(text.encode())} bytes; an MQTT string holds at most 65535"
            )
            return (
                f"mqtt: {_where(batch, row0 + row)}: the user property {column!r} cannot be "
                f"sent: {problem}"
            )

        checks.add(bad, why, column)


def _text(value: Any, column: str) -> tuple[str, str | None]:
    """A map property's name or value as text, and why a broker would refuse it (or None)."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return "", (
                f"the properties column {column!r} holds bytes that are not UTF-8; a user "
                "property is UTF-8 text"
            )
    text = value if isinstance(value, str) else str(value)
    problem = string_problem(text)
    if problem is None and len(text.encode()) > 65535:
        problem = f"it is {len(text.encode())} bytes; an MQTT string holds at most 65535"
    if problem:
        return "", f"a user property of column {column!r} cannot be sent: {problem}"
    return text, None
