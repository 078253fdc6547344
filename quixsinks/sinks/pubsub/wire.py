"""Arrow to Pub/Sub's wire: a SinkBatch's rows as messages, framed in protobuf, checked
against Pub/Sub's limits before anything of the batch is published. No client here.

A message's data is the value as JSON (``value_json_texts``: a Kafka JSON value as the
producer wrote it, ``null`` for a tombstone; else a JSON object of the value columns), a
``data_column`` as is, or a ``value_serializer``'s result on each message's own object
(``json:dumps`` gives Quix's bytes); its attributes are Quix's
(``_key``, ``_timestamp``, ``_offset`` and the Kafka headers, as text), the
``attributes_columns`` and the dedupe attribute. :class:`Encoder` builds them two ways:
:meth:`Encoder.frames` in Arrow, as the ``messages`` fields of a PublishRequest (the sink
serializes requests itself when there are no ordering keys), and :meth:`Encoder.messages`,
one :class:`Message` per row for the client library (ordering keys).

Pub/Sub refuses a whole publish request (INVALID_ARGUMENT) when one of its messages breaks
a limit, after the task's earlier requests went out; so every message of a SinkBatch is
checked first, and the first offender is named by its row and attribute:

- a message (data, attributes and ordering key): at most 10,000,000 bytes;
- at most 100 attributes per message (the sink's dedupe attribute included);
- an attribute name: 1 to 256 bytes (UTF-8), not starting with ``goog``;
- an attribute value: at most 1024 bytes;
- an ordering key: at most 1024 bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import (
    as_binary,
    concat_rows,
    first_null,
    first_true,
    serialize_each,
    varints,
)
from quixsinks.core.delivery import DedupeIds, kafka_coordinates
from quixsinks.core.errors import RecordError
from quixsinks.core.formats import csv_keys, value_json_texts
from quixsinks.core.options import load_callable
from quixsinks.core.records import RecordSchema

if TYPE_CHECKING:
    from .options import PubSubOptions

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_MESSAGE_BYTES",
    "MAX_NAME_BYTES",
    "MAX_ORDERING_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "Encoder",
    "Frame",
    "Message",
    "check_attribute_arrays",
    "check_attribute_rows",
    "check_ordering_keys",
    "encode_message",
    "message_size",
    "name_problem",
    "publish_request",
]

#: Pub/Sub refuses a message (data, attributes and ordering key) larger than this
MAX_MESSAGE_BYTES = 10_000_000


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


MAX_ATTRIBUTES = 100
MAX_NAME_BYTES = 256
MAX_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024


def name_problem(name: str) -> str | None:
    """Why Pub/Sub refuses ``name`` as an attribute name, or None."""
    size = len(name.encode("utf-8"))
    if size == 0:
        return "an attribute name cannot be empty"
    if size > MAX_NAME_BYTES:
        return (
            f"the attribute name {name[:40]!r}... is {size} bytes; Pub/Sub takes at most "
            f"{MAX_NAME_BYTES}"
        )
    if name.startswith("goog"):
        return f"the attribute name {name!r} starts with 'goog', which Pub/Sub reserves"
    return None


def _value_error(name: str, value: str, row: int) -> RecordError:
    size = len(value.encode("utf-8"))
    return RecordError(
        f"pubsub: attribute {name!r} of row {row} is {size} bytes ({value[:40]!r}...); "
        f"Pub/Sub takes at most {MAX_VALUE_BYTES} bytes per attribute value: shorten it, or "
        "send it in the message data",
        column=name,
        row=row,
    )


def check_attribute_arrays(
    arrays: Mapping[str, pa.Array], extra: Sequence[int] | None, row0: int
) -> None:
    """RecordError for the first value of the column-built attributes (``arrays``: name ->
    text per row, null: not set) over the value limit, or for a message with more than
    :data:`MAX_ATTRIBUTES` attributes counting ``extra`` (per row, the attributes added
    from headers or a map column) and the dedupe attribute."""
    counts: pa.Array | None = None
    for name, texts in arrays.items():
        problem = name_problem(name)
        if problem:
            raise RecordError(f"pubsub: {problem}", column=name, row=row0)
        row = first_true(pc.greater(pc.binary_length(texts), MAX_VALUE_BYTES))
        if row is not None:
            raise _value_error(name, texts[row].as_py(), row0 + row)
        present = pc.cast(pc.is_valid(texts), pa.int32())
        counts = present if counts is None else pc.add(counts, present)
    if counts is None:
        return
    if extra is not None:
        counts = pc.add(counts, pa.array(extra, pa.int32()))
    row = first_true(pc.greater(counts, MAX_ATTRIBUTES - 1))
    if row is not None:
        raise RecordError(
            f"pubsub: row {row0 + row} has {counts[row].as_py() + 1} attributes (the dedupe "
            f"attribute included); Pub/Sub takes at most {MAX_ATTRIBUTES} per message",
            row=row0 + row,
        )


def check_attribute_rows(rows: Sequence[Mapping[str, str]], row0: int) -> None:
    """RecordError for the first attribute (from headers or a map column) whose name or
    value Pub/Sub would refuse, or a message with too many."""
    for i, attributes in enumerate(rows):
        if len(attributes) > MAX_ATTRIBUTES - 1:
            raise RecordError(
                f"pubsub: row {row0 + i} has {len(attributes) + 1} attributes (the dedupe "
                f"attribute included); Pub/Sub takes at most {MAX_ATTRIBUTES} per message",
                row=row0 + i,
            )
        for name, value in attributes.items():
            problem = name_problem(name)
            if problem:
                raise RecordError(f"pubsub: row {row0 + i}: {problem}", column=name, row=row0 + i)
            if len(value) > MAX_VALUE_BYTES // 4 and len(value.encode("utf-8")) > MAX_VALUE_BYTES:
                raise _value_error(name, value, row0 + i)


def check_ordering_keys(keys: pa.Array, name: str, row0: int) -> None:
    """RecordError for the first ordering key over :data:`MAX_ORDERING_KEY_BYTES`."""
    row = first_true(pc.greater(pc.binary_length(keys), MAX_ORDERING_KEY_BYTES))
    if row is not None:
        value = keys[row].as_py()
        raise RecordError(
            f"pubsub: the ordering key of row {row0 + row} (column {name!r}) is "
            f"{len(value.encode('utf-8'))} bytes ({value[:40]!r}...); Pub/Sub takes at most "
            f"{MAX_ORDERING_KEY_BYTES}",
            column=name,
            row=row0 + row,
        )


class Encoder:
    """Builds the messages of one sink's batches (from the options and the plan that
    ``prepare`` made: the record columns, the attribute columns or map column)."""

    def __init__(
        self,
        options: PubSubOptions,
        records: RecordSchema,
        attribute_names: tuple[str, ...],
        attribute_map: str | None,
    ) -> None:
        self.options = options
        self.records = records
        self.attribute_names = attribute_names
        self.attribute_map = attribute_map

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
        if opts.value_serializer is not None:
            fn = load_callable(opts.value_serializer, option_name="value_serializer")
            column = serialize_each(
                fn, batch.messages(), sink="pubsub", option="value_serializer", first_row=row0
            )
            _check_sizes(pc.binary_length(column), row0)
            return column
        text = value_json_texts(batch)
        _check_sizes(pc.binary_length(text), row0)
        return text

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
                    out["_key"] = _key_texts(key, records.key, row0)
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


def _key_texts(keys: pa.Array, name: str, row0: int) -> pa.Array:
    """The ``_key`` attribute: the key as text (:func:`csv_keys`: bytes decoded as UTF-8,
    as Quix's ``bytes.decode``; null: no attribute). A binary key that is not UTF-8 is a
    RecordError naming its row (Quix's ``bytes.decode`` raises too): a replacement
    character would change the key a consumer reads, silently."""
    if pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type):
        try:
            return pc.cast(keys, pa.string())
        except pa.ArrowInvalid:
            for i, key in enumerate(keys.to_pylist()):
                if key is None:
                    continue
                try:
                    key.decode("utf-8")
                except UnicodeDecodeError:
                    raise RecordError(
                        f"pubsub: the key of row {row0 + i} (column {name!r}) holds bytes that "
                        f"are not UTF-8 text ({key[:40]!r}); the _key attribute is text: set "
                        "key_serializer (e.g. one that writes base64), or decode the key in Spark",
                        column=name,
                        row=row0 + i,
                    ) from None
            raise
    return csv_keys(keys)


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


def _str(value: Any, option: str, row: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise RecordError(
        f"pubsub: {option!r} returned {type(value).__name__} for row {row}; it must return str",
        row=row,
    )
