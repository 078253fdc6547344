"""Arrow rows to Kinesis PutRecords entries: data, partition keys, dedupe ids, limits.

:func:`encode` turns a batch into entries: each record's data (the value as JSON: a Kafka
JSON value as the producer wrote it, ``null`` for a tombstone, else a JSON object of the
value columns built in Arrow; a column as it is; or a value serializer's bytes, called on
each message's own object), its partition key (the key column as text, another column, or
a key serializer's text), an optional explicit
hash key, and a deterministic dedupe id (``core.delivery.DedupeIds``) placed in the JSON
object or before the data. :func:`layers` splits entries for ``ordered`` delivery, and
:func:`request_body` is a PutRecords request's JSON. Pure functions: no client, no server.

Kinesis refuses a whole PutRecords call when one of its records breaks a limit, and the
answer does not say which record; so every record is checked here first, vectorised in
Arrow, and each one that breaks a limit is refused by its row before anything is sent
(``batch.refuse``: ``on_error`` fails naming it, skips it or dead-letters it), unless
``invalid_records=skip`` skips and counts it (the per-sink option wins). A null partition
key (with ``null_partition_keys=error``) and a null ``data_column`` are refused the same
way. The limits are the strictest of the real service's:

- a request: at most 500 records and 5 MiB (data and partition keys together);
- a record: at most 1 MiB, its data and its partition key (UTF-8 bytes) together;
- a partition key: 1 to 256 Unicode characters;
- an explicit hash key: a decimal integer from 0 to 2^128 - 1.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_true, serialize_each
from quixsinks.core.batch import SinkBatch
from quixsinks.core.delivery import DedupeIds, kafka_coordinates
from quixsinks.core.errors import RecordError
from quixsinks.core.formats import csv_keys, value_json_texts
from quixsinks.core.options import load_callable
from quixsinks.core.rowchecks import RowChecks

from .options import KinesisOptions

__all__ = [
    "MAX_HASH_KEY",
    "MAX_KEY_CHARS",
    "MAX_RECORDS",
    "MAX_RECORD_BYTES",
    "MAX_REQUEST_BYTES",
    "Problem",
    "encode",
    "entry_size",
    "find_problems",
    "hash_key_text",
    "layers",
    "request_body",
]

MAX_RECORDS = 500
MAX_REQUEST_BYTES = 5 * 1024 * 1024
MAX_RECORD_BYTES = 1024 * 1024
MAX_KEY_CHARS = 256
MAX_HASH_KEY = 2**128 - 1
_MAX_HASH_DIGITS = len(str(MAX_HASH_KEY))  # 39


@dataclass(frozen=True)
class Problem:
    """The records of a batch that Kinesis would refuse.

    Attributes:
        mask: True for each record that breaks a limit.
        count: how many do.
        row: the first one's index.
        reasons: per limit, the records breaking it and why a record does.
    """

    mask: pa.Array
    count: int
    row: int
    reasons: tuple[tuple[pa.Array, Callable[[int], str]], ...] = ()

    @property
    def reason(self) -> str:
        """Why the first offending record is refused, for a message."""
        return self.reason_of(self.row)

    def reason_of(self, row: int) -> str:
        """Why record ``row`` is refused ("" when it breaks no limit)."""
        return "; ".join(why(row) for check, why in self.reasons if check[row].as_py())

    def narrowed(self, mask: pa.Array) -> Problem | None:
        """The same problem for the records of ``mask`` only; None when there are none."""
        mask = pc.fill_null(mask, False)
        count = int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)
        row = first_true(mask)
        if not count or row is None:
            return None
        return Problem(mask, count, row, self.reasons)


def entry_size(entry: dict[str, Any]) -> int:
    """What a PutRecords entry counts against the request and record limits."""
    return len(entry["Data"]) + len(entry["PartitionKey"].encode())


def request_body(stream: str, entries: Sequence[dict[str, Any]]) -> bytes:
    """The JSON body of a PutRecords request of ``entries`` to ``stream``: what botocore's
    serializer sends for the same parameters (``Data`` in base64, the keys as JSON
    strings), built in one pass over the records."""
    quoted: dict[str, bytes] = {}  # partition keys repeat: each is escaped once

    def key(text: str) -> bytes:
        found = quoted.get(text)
        if found is None:
            found = quoted[text] = json.dumps(text, ensure_ascii=False).encode()
        return found

    b64 = base64.b64encode
    records = [
        b'{"Data":"'
        + b64(entry["Data"])
        + b'","PartitionKey":'
        + key(entry["PartitionKey"])
        + (
            b',"ExplicitHashKey":' + key(entry["ExplicitHashKey"])
            if "ExplicitHashKey" in entry
            else b""
        )
        + b"}"
        for entry in entries
    ]
    return b"".join(
        (
            b'{"StreamName":',
            json.dumps(stream, ensure_ascii=False).encode(),
            b',"Records":[',
            b",".join(records),
            b"]}",
        )
    )


def hash_key_text(column: pa.Array) -> pa.Array:
    """An explicit hash key column as decimal text (null stays null: no explicit key)."""
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.utf8_trim_whitespace(pc.cast(column, pa.string()))
    if pa.types.is_integer(t):
        return pc.cast(column, pa.string())
    if pa.types.is_decimal(t) and t.scale == 0:
        return pc.cast(column, pa.string())
    raise TypeError(f"an explicit hash key must be text or an integer, not {t}")


def find_problems(data: pa.Array, keys: pa.Array, hash_keys: pa.Array | None) -> Problem | None:
    """Check every record against Kinesis's limits; None when all pass.

    Args:
        data: binary, each record's data (no nulls).
        keys: string, each record's partition key (no nulls).
        hash_keys: string decimal explicit hash keys (null: none), or None.
    """
    key_bytes = pc.binary_length(pc.cast(keys, pa.binary()))
    size = pc.add(pc.binary_length(data), key_bytes)
    too_big = pc.greater(size, MAX_RECORD_BYTES)
    key_chars = pc.utf8_length(keys)
    bad_key = pc.or_(pc.less(key_chars, 1), pc.greater(key_chars, MAX_KEY_CHARS))
    checks: list[tuple[pa.Array, str]] = [(too_big, "size"), (bad_key, "key")]
    if hash_keys is not None:
        checks.append((_bad_hash_keys(hash_keys), "hash"))
    mask = checks[0][0]
    for other, _ in checks[1:]:
        mask = pc.or_(mask, other)
    mask = pc.fill_null(mask, False)
    count = int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)
    if not count:
        return None
    row = first_true(mask)
    assert row is not None
    reasons: list[tuple[pa.Array, Callable[[int], str]]] = []
    for check, kind in checks:
        if kind == "size":
            reasons.append(
                (
                    check,
                    lambda r: (
                        f"the record is {size[r].as_py()} bytes with its partition key; "
                        f"Kinesis takes at most {MAX_RECORD_BYTES} (1 MiB)"
                    ),
                )
            )
        elif kind == "key":
            reasons.append(
                (
                    check,
                    lambda r: (
                        f"its partition key has {key_chars[r].as_py()} characters; "
                        f"Kinesis takes 1 to {MAX_KEY_CHARS}"
                    ),
                )
            )
        else:
            assert hash_keys is not None
            reasons.append((pc.fill_null(check, False), _hash_key_reason(hash_keys)))
    return Problem(mask, count, row, tuple(reasons))


def _hash_key_reason(hash_keys: pa.Array) -> Callable[[int], str]:
    def why(row: int) -> str:
        shown = _clip(hash_keys[row].as_py())
        return f"its explicit hash key {shown!r} is not a decimal integer from 0 to 2^128-1"

    return why


def _bad_hash_keys(hash_keys: pa.Array) -> pa.Array:
    """True where an explicit hash key is given and is not a decimal in 0..2^128-1."""
    digits = pc.match_substring_regex(hash_keys, r"^[0-9]{1,39}$")
    bad = pc.invert(pc.fill_null(digits, True))
    # 39 digits may still pass 2^128-1: compare those few as Python integers
    long = pc.fill_null(
        pc.and_(digits, pc.equal(pc.utf8_length(hash_keys), _MAX_HASH_DIGITS)), False
    )
    if pc.any(long).as_py():
        over = [
            bool(is_long) and int(text) > MAX_HASH_KEY
            for is_long, text in zip(long.to_pylist(), hash_keys.to_pylist(), strict=True)
        ]
        bad = pc.or_(bad, pa.array(over, pa.bool_()))
    return pc.fill_null(bad, False)


def _clip(text: str | None, limit: int = 60) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + "..."


# -- rows to entries ---------------------------------------------------------------------


def encode(
    batch: SinkBatch,
    options: KinesisOptions,
    *,
    key_column: str | None,
    kafka: bool,
    dedupe: DedupeIds,
    row0: int = 0,
) -> tuple[list[dict[str, Any]], Problem | None]:
    """The PutRecords entries of a batch (limits checked, dedupe ids placed), and the
    records skipped for breaking a limit (``invalid_records=skip``), if any.

    Args:
        key_column: the column of partition keys (None: every key is null).
        kafka: the rows carry Kafka coordinates; the dedupe ids are keyed by them.
        row0: the task's row number of the batch's first row, for messages.

    Raises:
        RecordError: a row breaks a rule and the options say to fail.
    """
    checks = RowChecks(batch)
    data = _data(batch, options, checks)
    keys = _keys(batch, options, key_column)
    hash_keys = (
        hash_key_text(batch.column(options.explicit_hash_key_column))
        if options.explicit_hash_key_column
        else None
    )

    # the dedupe id covers the record's content (data, key, hash key); for Kafka input
    # it is keyed by the record's topic, partition and offset, else by its position
    parts: list[Any] = [data, b"\x00", pc.cast(pc.fill_null(keys, ""), pa.binary())]
    if hash_keys is not None:
        parts += [b"\x00", pc.cast(pc.fill_null(hash_keys, ""), pa.binary())]
    content = pc.binary_join_element_wise(*parts, b"")
    coordinates = kafka_coordinates(batch) if kafka else None
    ids = pa.array(dedupe.ids(content.to_pylist(), coordinates), pa.string())

    if keys.null_count:
        if options.null_partition_keys == "error":
            checks.add(
                pc.is_null(keys),
                lambda row: (
                    f"kinesis: row {row0 + row} of batch {batch.batch_id} partition "
                    f"{batch.partition_id} has a null partition key (column {key_column!r}); set "
                    "null_partition_keys=dedupe_id to use the record's dedupe id as its partition "
                    "key"
                ),
                key_column,
            )
        keys = pc.coalesce(keys, ids)

    placement = options.dedupe_placement
    if placement == "prefix":
        data = pc.binary_join_element_wise(pc.cast(ids, pa.binary()), b" ", data, b"")
    elif placement == "field":
        data = _with_field(data, ids, options.dedupe_id_field)

    problem = find_problems(data, keys, hash_keys)
    skipped: Problem | None = None
    if problem is not None:
        if options.invalid_records == "error":
            checks.add(
                problem.mask,
                lambda row: (
                    f"kinesis: row {row0 + row} of batch {batch.batch_id} partition "
                    f"{batch.partition_id} (partition key {_clip(keys[row].as_py())!r}) cannot be "
                    f"put: {problem.reason_of(row)} (invalid_records=skip skips such records)"
                ),
            )
        else:  # invalid_records=skip wins over on_error: counted, never dead-lettered
            refused = checks.mask
            mask = problem.mask if refused is None else pc.and_(problem.mask, pc.invert(refused))
            skipped = problem.narrowed(mask)
    drop = checks.mask
    if checks:
        checks.refuse()  # on_error: fail naming the first row, skip, or dead-letter
    if skipped is not None:
        drop = skipped.mask if drop is None else pc.or_(drop, skipped.mask)
    if drop is not None:
        keep = pc.invert(drop)
        data, keys = data.filter(keep), keys.filter(keep)
        hash_keys = hash_keys.filter(keep) if hash_keys is not None else None

    out: list[dict[str, Any]] = [
        {"Data": d, "PartitionKey": k}
        for d, k in zip(data.to_pylist(), keys.to_pylist(), strict=True)
    ]
    if hash_keys is not None:
        for entry, h in zip(out, hash_keys.to_pylist(), strict=True):
            if h is not None:
                entry["ExplicitHashKey"] = h
    return out, skipped


def _data(batch: SinkBatch, options: KinesisOptions, checks: RowChecks) -> pa.Array:
    """Each record's data, binary, no nulls (a null ``data_column`` is refused, its row's
    data left empty until then)."""
    if options.data_column is not None:
        column = batch.column(options.data_column)
        if column.null_count:
            name = options.data_column
            checks.add(
                pc.is_null(column),
                lambda row: (
                    f"kinesis: 'data_column' {name!r} is null in row {row} of batch "
                    f"{batch.batch_id} partition {batch.partition_id}; a record needs data"
                ),
                name,
            )
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        data = pc.cast(pc.cast(column, pa.large_binary()), pa.binary())
        return pc.fill_null(data, b"") if data.null_count else data
    if options.value_serializer is not None:
        fn = load_callable(options.value_serializer, option_name="value_serializer")
        return serialize_each(fn, batch.messages(), sink="kinesis", option="value_serializer")
    return value_json_texts(batch)


def _keys(batch: SinkBatch, options: KinesisOptions, key_column: str | None) -> pa.Array:
    """Each record's partition key as text (null where the row has none)."""
    if key_column is None:
        return pa.nulls(batch.num_rows, pa.string())
    column = batch.column(key_column)
    if options.key_serializer is not None:
        fn = load_callable(options.key_serializer, option_name="key_serializer")
        texts = []
        for key in column.to_pylist():
            text = None if key is None else fn(key)
            if text is not None and not isinstance(text, str):
                raise RecordError(
                    f"kinesis: 'key_serializer' returned {type(text).__name__}; it must "
                    "return str (a partition key is text)"
                )
            texts.append(text)
        return pa.array(texts, pa.string())
    return csv_keys(column)


def _with_field(data: pa.Array, ids: pa.Array, name: str) -> pa.Array:
    """``{"<name>":"<id>",...rest}`` from each JSON object ``{...rest}``.

    The data is JSON the sink built or the producer's own text (validated as an object or
    ``null``): whitespace before the ``{`` goes, the rest is kept byte for byte. A value
    that is not an object (``null``, a Kafka tombstone) is sent unchanged, without an id:
    a delete applied twice is still one delete.
    """
    head = ("{" + json.dumps(name, ensure_ascii=False) + ':"').encode()
    objects = pc.match_substring_regex(data, _OBJECT)
    rest = pc.replace_substring_regex(data, _OBJECT, b"", max_replacements=1)  # after the "{"
    empty = pc.match_substring_regex(rest, _EMPTY_REST)
    tail = pc.if_else(empty, rest, pc.binary_join_element_wise(b",", rest, b""))
    with_id = pc.binary_join_element_wise(head, pc.cast(ids, pa.binary()), b'"', tail, b"")
    return with_id if pc.all(objects).as_py() else pc.if_else(objects, with_id, data)


#: a JSON object's start: its "{" after JSON whitespace
_OBJECT = r"^[ \t\r\n]*\{"
#: an empty object's rest after its "{"
_EMPTY_REST = r"^[ \t\r\n]*\}"


def layers(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Entries split so that each layer holds at most one record per partition key, and a
    key's n-th record is in layer n: a layer goes once the one before has fully landed."""
    seen: dict[str, int] = {}
    out: list[list[dict[str, Any]]] = []
    for entry in entries:
        depth = seen.get(entry["PartitionKey"], 0)
        seen[entry["PartitionKey"]] = depth + 1
        if depth == len(out):
            out.append([])
        out[depth].append(entry)
    return out
