"""Kinesis PutRecords limits, checked per record before anything is sent.

Kinesis refuses a whole PutRecords call when one of its records breaks a limit, and the
answer does not say which record; so every record is checked here first, vectorised in
Arrow, and the first one that breaks a limit is named by its row (or the offenders are
skipped and counted, by option). The limits are the strictest of the real service's:

- a request: at most 500 records and 5 MiB (data and partition keys together);
- a record: at most 1 MiB, its data and its partition key (UTF-8 bytes) together;
- a partition key: 1 to 256 Unicode characters;
- an explicit hash key: a decimal integer from 0 to 2^128 - 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_true

__all__ = [
    "MAX_HASH_KEY",
    "MAX_KEY_CHARS",
    "MAX_RECORDS",
    "MAX_RECORD_BYTES",
    "MAX_REQUEST_BYTES",
    "Problem",
    "entry_size",
    "find_problems",
    "hash_key_text",
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
        reason: why the first one is refused, for a message.
    """

    mask: pa.Array
    count: int
    row: int
    reason: str


def entry_size(entry: dict[str, Any]) -> int:
    """What a PutRecords entry counts against the request and record limits."""
    return len(entry["Data"]) + len(entry["PartitionKey"].encode())


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
    reasons = []
    for check, kind in checks:
        if check[row].as_py():
            if kind == "size":
                reasons.append(
                    f"the record is {size[row].as_py()} bytes with its partition key; Kinesis "
                    f"takes at most {MAX_RECORD_BYTES} (1 MiB)"
                )
            elif kind == "key":
                reasons.append(
                    f"its partition key has {key_chars[row].as_py()} characters; Kinesis takes "
                    f"1 to {MAX_KEY_CHARS}"
                )
            else:
                shown = hash_keys[row].as_py() if hash_keys is not None else None
                reasons.append(
                    f"its explicit hash key {_clip(shown)!r} is not a decimal integer from 0 to "
                    "2^128-1"
                )
    return Problem(mask, count, row, "; ".join(reasons))


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
