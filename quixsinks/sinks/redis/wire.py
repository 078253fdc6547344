"""RESP, the Redis protocol, built from Arrow columns: pure functions, no server.

Each SinkBatch becomes one command stream (``SET``, ``HSET``, ``SADD`` or ``ZADD``,
optionally ``DEL`` before and ``EXPIRE`` after; for ``list`` and ``stream`` one ``HSET`` of
a staging hash per entry) built with pyarrow.compute kernels, with no Python per row
(unless a ``key_serializer`` / ``value_serializer`` is given): :class:`RespEncoder`. Strings
without a TTL (outside a cluster) become the arguments of one ``MSET`` per pipeline
instead. :func:`windows` cuts a stream into pipelines of ``pipeline_size`` commands
(:class:`Window`), which :mod:`.client` sends.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import (
    as_binary,
    concat_rows,
    first_null,
    first_true,
    join_lines,
    nearest_float,
    serialize_each,
)
from quixsinks.core.batch import SinkBatch
from quixsinks.core.errors import RecordError
from quixsinks.core.formats import (
    json_column,
    json_object_pieces,
    json_objects,
    value_json_texts,
)
from quixsinks.core.options import load_callable
from quixsinks.core.records import RecordSchema
from quixsinks.core.rowchecks import RowChecks, without_rows

from .options import RedisOptions, template_fields, template_separators

__all__ = [
    "MAX_VALUE_BYTES",
    "Commands",
    "RespEncoder",
    "Window",
    "as_text",
    "resp_commands",
    "windows",
]

Piece: TypeAlias = pa.Array | bytes
#: a batch's keys -> True where the key holds a value of another type (None: none does)
KeyCheck: TypeAlias = Callable[[pa.Array], pa.Array | None]

#: Redis refuses a string (or bulk argument) larger than this
MAX_VALUE_BYTES = 512 * 1024 * 1024
#: fields of one stream entry: the commit script passes an entry's fields to XADD with
#: Lua's ``unpack``, which takes about 8,000 values; an entry with more would fail the
#: script part-way, after earlier entries were appended (Redis keeps a script's writes)
MAX_STREAM_FIELDS = 3_900

# ---------------------------------------------------------------------- RESP in Arrow


def _check_separators(
    text: pa.Array, name: str, separators: str, template: str, checks: RowChecks
) -> None:
    """The rows whose value of template column ``name`` holds one of the ``separators``
    between it and the next column (their keys would be ambiguous), to ``checks``."""
    for character in separators:
        mask = pc.fill_null(pc.match_substring(text, character), False)
        if not pc.any(mask).as_py():
            continue

        def why(row: int, character: str = character) -> str:
            shown = text[row].as_py().decode("utf-8", "replace")
            return (
                f"redis: the value {shown!r} of {{{name}}} (row {row}) holds "
                f"{character!r}, which separates it from the next column in 'key_template' "
                f"{template!r}: two different rows could build the same key and one would "
                "overwrite the other; replace that character in the column, or change the "
                "template's separator"
            )

        checks.add(mask, why, name)


def as_text(column: pa.Array, name: str) -> pa.Array:
    """A column as binary Redis arguments: text and bytes as they are, numbers and booleans
    as their text, times and nested values as JSON (strings without their quotes)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    t = column.type
    if pa.types.is_dictionary(t):
        column = column.dictionary_decode()
        t = column.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.cast(column, pa.binary())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.cast(pc.cast(column, pa.large_binary()), pa.binary())
    if pa.types.is_boolean(t):
        return pc.cast(pc.if_else(column, "true", "false"), pa.binary())
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return pc.cast(pc.cast(column, pa.string()), pa.binary())
    if pa.types.is_null(t):
        return pa.nulls(len(column), pa.binary())
    text = json_column(column)  # floats (shortest text), times, nested values
    text = pc.if_else(pc.is_null(column), pa.scalar(None, pa.string()), text)
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        text = pc.utf8_slice_codeunits(text, 1, -1)  # the ISO text, without JSON quotes
    del name
    return pc.cast(text, pa.binary())


def _bulk(arg: Piece | list[Piece]) -> list[Piece]:
    """RESP bulk string pieces of one argument: an array, the same bytes in every row, or
    pieces whose row-wise concatenation is the argument (joined once, with the command)."""
    if isinstance(arg, bytes):
        return [b"$%d\r\n%s\r\n" % (len(arg), arg)]
    if isinstance(arg, list):
        arrays = [p for p in arg if not isinstance(p, bytes)]
        fixed = sum(len(p) for p in arg if isinstance(p, bytes))
        if not arrays:
            return _bulk(b"".join(p for p in arg if isinstance(p, bytes)))
        total = pc.binary_length(arrays[0])
        for array in arrays[1:]:
            total = pc.add(total, pc.binary_length(array))
        if fixed:
            total = pc.add(total, fixed)
        length = pc.cast(pc.cast(total, pa.string()), pa.binary())
        return [b"$", length, b"\r\n", *arg, b"\r\n"]
    length = pc.cast(pc.cast(pc.binary_length(arg), pa.string()), pa.binary())
    return [b"$", length, b"\r\n", arg, b"\r\n"]


def resp_commands(args: list[Piece | list[Piece]], rows: int) -> pa.Array:
    """One RESP command per row (``*N`` then each argument as a bulk string)."""
    pieces: list[Piece] = [b"*%d\r\n" % len(args)]
    for arg in args:
        pieces += _bulk(arg)
    return concat_rows(pieces, rows)


@dataclass(frozen=True)
class Window:
    """One pipeline: its RESP bytes, how many replies they get, the rows they come from."""

    body: pa.Buffer  # the batch's command bytes, sliced (not copied)
    replies: int
    row0: int
    counts: pa.Array  # commands per row of the window
    mset: bool = False  # one MSET whose arguments are the window's rows (one reply)
    head: bytes = b""  # sent before the body (an MSET's ``*N`` and name)


#: data types whose commands (SET, MSET, HSET, DEL, EXPIRE, SADD) answer one-line replies only
SIMPLE_REPLIES = ("string", "hash", "set")

#: an MSET (one command, buffered whole by the server) carries at most this many bytes of
#: arguments, however many rows ``pipeline_size`` allows
MSET_MAX_BYTES = 16 * 1024 * 1024

#: pipelines sent back to back (the next one is on its way while the previous one's
#: replies are read) and retried together: they are overwrites, safe to send again
WINDOWS_PER_RETRY = 16


@dataclass(frozen=True)
class Commands:
    """A batch's command stream: per row, its commands' bytes and how many commands."""

    data: pa.Array  # binary, one element per row (possibly several commands)
    counts: pa.Array  # int64, commands (replies) per row
    keys: pa.Array  # binary, the key of each row (for error messages)
    mset: bool = False  # data holds MSET arguments (key, value), one MSET per window
    batch: SinkBatch | None = None  # the rows of ``data``, row ``i`` for element ``i``


class RespEncoder:
    """The commands of a sink's batches: its options and the DataFrame's record columns
    (resolved by the sink's ``prepare``)."""

    def __init__(self, options: RedisOptions, records: RecordSchema) -> None:
        self.options = options
        self.records = records

    def _key_column(self, batch: SinkBatch, values: pa.Table | None, checks: RowChecks) -> pa.Array:
        opts = self.options
        if opts.key_template is not None:
            pieces: list[Piece] = []
            separators = template_separators(opts.key_template)
            for literal, name in template_fields(opts.key_template):
                pieces.append(literal.encode())
                if name is not None:
                    text = as_text(_column(batch, values, name, "key_template"), name)
                    if name in separators:
                        _check_separators(text, name, separators[name], opts.key_template, checks)
                    pieces.append(text)
            keys = concat_rows(pieces, batch.num_rows)
        else:
            assert self.records.key is not None
            if opts.key_serializer is not None:  # Quix's key_serializer(key, value)
                fn = load_callable(opts.key_serializer, option_name="key_serializer")
                raw = batch.column(self.records.key).to_pylist()
                keys = serialize_each(
                    lambda pair: fn(*pair),
                    list(zip(raw, self._messages(batch), strict=True)),
                    sink="redis",
                    option="key_serializer",
                    nulls=True,
                )
            else:
                keys = as_text(batch.column(self.records.key), self.records.key)
        if opts.key_prefix:
            keys = concat_rows([opts.key_prefix.encode(), keys], batch.num_rows)
        return keys

    def keyed(
        self, batch: SinkBatch, key_check: KeyCheck | None = None
    ) -> tuple[SinkBatch, pa.Array, int]:
        """The batch and its keys without the rows that cannot be written, and the count
        of rows skipped for a null key (null_keys=skip: the per-sink option wins).

        Every other row Redis would refuse for what it holds (a null key with
        null_keys=error, a template value holding its separator, a TTL that is not
        positive, a null value_column, a score that is null or NaN, a key ``key_check``
        finds of another type) is refused by its row (``batch.refuse``: ``on_error``).
        """
        opts = self.options
        checks = RowChecks(batch)
        template = self.records.value_json and opts.key_template is not None
        values = batch.values() if template else None  # a template may name JSON keys
        keys = self._key_column(batch, values, checks)
        null = pc.is_null(keys)
        if keys.null_count:
            if opts.null_keys == "skip":  # the per-sink option wins: skipped and counted
                nulls = keys.null_count
                rest, keys, skipped = self.keyed(without_rows(batch, null), key_check)
                return rest, keys, skipped + nulls
            checks.add(
                null,
                lambda row: (
                    f"redis: the key of row {row} is null (key column or "
                    "key_template column null); set null_keys=skip to skip such rows"
                ),
            )
        if opts.ttl_column is not None:
            column = batch.column(opts.ttl_column)
            ttl_name = opts.ttl_column
            checks.add(
                pc.less_equal(column, 0),
                lambda row: (
                    f"redis: ttl_column {ttl_name!r} is {column[row].as_py()} in row "
                    f"{row}; a TTL must be a positive number of seconds (null: no expiry)"
                ),
                ttl_name,
            )
        if opts.value_column is not None and opts.data_type not in ("hash", "stream"):
            value_name = opts.value_column
            checks.add(
                pc.is_null(batch.column(value_name)),
                lambda row: (
                    f"redis: value_column {value_name!r} is null in row {row}; Redis "
                    "has no null value (filter such rows, or write JSON values)"
                ),
                value_name,
            )
        if opts.score_column is not None:
            score = batch.column(opts.score_column)
            bad = pc.is_null(score)
            if pa.types.is_floating(score.type):
                bad = pc.or_(bad, pc.fill_null(pc.is_nan(score), False))
            score_name = opts.score_column
            checks.add(
                bad,
                lambda row: (
                    f"redis: score_column {score_name!r} is {score[row].as_py()} in row "
                    f"{row}; every member needs a score (NaN is not one)"
                ),
                score_name,
            )
        if key_check is not None:
            wrong = key_check(pc.fill_null(keys, b""))
            if wrong is not None:
                checks.add(
                    pc.and_(wrong, pc.invert(null)),
                    lambda row: (
                        f"redis: the key {keys[row].as_py().decode('utf-8', 'replace')!r}"
                        f" (row {row}) holds a value of another type than {opts.data_type}; delete "
                        "it or write to other keys (key_prefix)"
                    ),
                )
        drop = checks.mask
        if drop is not None:
            batch = checks.refuse()  # on_error: fail naming the first row, skip, dead-letter
            keys = keys.filter(pc.invert(drop))
        return batch, keys, 0

    def commands(self, batch: SinkBatch) -> tuple[Commands, int]:
        """The batch's commands (the rows Redis would refuse refused, see :meth:`keyed`)
        and the count of rows skipped for a null key."""
        batch, keys, skipped = self.keyed(batch)
        try:
            return self._commands(batch, keys), skipped
        except _TooLarge as large:  # rare: refuse the rows, build the rest again
            commands, more = self.commands(large.checks.refuse())
            return commands, skipped + more

    def _commands(self, batch: SinkBatch, keys: pa.Array) -> Commands:
        opts = self.options
        rows = batch.num_rows
        ttl = self._ttl(batch)
        data_type = opts.data_type
        if data_type == "hash":
            data, counts = self._hash_commands(batch, keys, ttl)
            return Commands(data, counts, keys, batch=batch)
        one_each = pa.repeat(pa.scalar(1, pa.int64()), rows)  # one command per row
        value: Piece | list[Piece]
        if self.options.value_column is None and self.options.value_serializer is None:
            # joined with the command: the producer's JSON bytes, or the pieces of the
            # JSON objects of the value columns (no Python per row either way)
            value = (
                value_json_texts(batch)
                if batch.passthrough
                else _json_pieces(self._value_table(batch))
            )
        else:
            value = self._value(batch)
            _check_size(value, "value", batch)
        if data_type == "string":
            if ttl is None and not opts.cluster:  # MSET (a cluster refuses cross-slot keys)
                data = concat_rows([*_bulk(keys), *_bulk(value)], rows)
                return Commands(data, one_each, keys, mset=True, batch=batch)
            if ttl is None:
                data = resp_commands([b"SET", keys, value], rows)
            elif isinstance(ttl, bytes):
                data = resp_commands([b"SET", keys, value, b"EX", ttl], rows)
            else:
                with_ttl = resp_commands([b"SET", keys, value, b"EX", pc.fill_null(ttl, b"")], rows)
                without = resp_commands([b"SET", keys, value], rows)
                data = pc.if_else(pc.is_valid(ttl), with_ttl, without)
            return Commands(data, one_each, keys, batch=batch)
        if data_type == "set":
            data = resp_commands([b"SADD", keys, value], rows)
        else:
            assert opts.score_column is not None
            score = _scores(batch.column(opts.score_column), opts.score_column)
            data = resp_commands([b"ZADD", keys, score, value], rows)
        data, counts = _with_expire(data, one_each, keys, ttl, rows)
        return Commands(data, counts, keys, batch=batch)

    def _ttl(self, batch: SinkBatch) -> bytes | pa.Array | None:
        opts = self.options
        if opts.ttl_seconds is not None:
            return str(opts.ttl_seconds).encode()
        if opts.ttl_column is None:
            return None
        column = batch.column(opts.ttl_column)
        row = first_true(pc.less_equal(column, 0))
        if row is not None:
            raise RecordError(
                f"redis: ttl_column {opts.ttl_column!r} is {column[row].as_py()} in row {row}; "
                "a TTL must be a positive number of seconds (null: no expiry)",
                column=opts.ttl_column,
                row=row,
            )
        return as_text(column, opts.ttl_column)

    def _value(self, batch: SinkBatch) -> pa.Array:
        opts = self.options
        if opts.value_column is not None:
            value = as_text(batch.column(opts.value_column), opts.value_column)
            row = first_null(value)
            if row is not None:
                raise RecordError(
                    f"redis: value_column {opts.value_column!r} is null in row {row}; Redis "
                    "has no null value (filter such rows, or write JSON values)",
                    column=opts.value_column,
                    row=row,
                )
            return value
        if opts.value_serializer is not None:
            fn = load_callable(opts.value_serializer, option_name="value_serializer")
            return serialize_each(
                fn, self._messages(batch), sink="redis", option="value_serializer"
            )  # None is refused by its row: Redis has no null value
        if batch.passthrough:
            return value_json_texts(batch)
        return pc.cast(json_objects(self._value_table(batch)), pa.binary())

    def _messages(self, batch: SinkBatch) -> list[object]:
        """Each row's value as a Quix app holds it, what a ``value_serializer`` or
        ``key_serializer`` is called with: a JSON value's own object (``None`` for a
        tombstone; the score and TTL columns are DataFrame columns, never taken out of
        it), or a dict of the value columns less the score and TTL columns."""
        if batch.passthrough:
            return batch.messages()
        return list(self._value_table(batch).to_pylist())

    def _value_table(self, batch: SinkBatch) -> pa.Table:
        values = batch.values()
        taken = {self.options.score_column, self.options.ttl_column}
        keep = [n for n in values.column_names if n not in taken]
        return values.select(keep)

    def _hash_commands(
        self, batch: SinkBatch, keys: pa.Array, ttl: bytes | pa.Array | None
    ) -> tuple[pa.Array, pa.Array]:
        rows = batch.num_rows
        table = self._value_table(batch)
        pieces: list[Piece] = []
        fields: pa.Array | int = 0
        for name in table.column_names:
            text = as_text(table.column(name), name)
            _check_size(text, f"field {name!r}", batch)
            name_bytes = name.encode()
            if text.null_count == 0:  # every row has the field: straight into the join
                pieces += [*_bulk(name_bytes), *_bulk(text)]
                fields = pc.add(fields, 1) if isinstance(fields, pa.Array) else fields + 1
                continue
            valid = pc.is_valid(text)
            pair = concat_rows([*_bulk(name_bytes), *_bulk(pc.fill_null(text, b""))], rows)
            pieces.append(pc.if_else(valid, pair, pa.scalar(b"", pa.binary())))
            fields = pc.add(fields, pc.cast(valid, pa.int64()))  # an int broadcasts
        if isinstance(fields, int):  # the same fields in every row: no per-row choice
            count: Piece = b"%d" % (2 * fields + 2)
            any_field = pa.repeat(pa.scalar(fields > 0), rows)
        else:
            count = pc.cast(pc.cast(pc.add(pc.multiply(fields, 2), 2), pa.string()), pa.binary())
            any_field = pc.greater(fields, 0)
        hset = concat_rows([b"*", count, b"\r\n", *_bulk(b"HSET"), *_bulk(keys), *pieces], rows)
        if isinstance(fields, int):
            data = hset if fields else pa.repeat(pa.scalar(b"", pa.binary()), rows)
        else:
            data = pc.if_else(any_field, hset, pa.scalar(b"", pa.binary()))
        counts = pc.cast(any_field, pa.int64())
        if self.options.hash_replace:
            data = concat_rows([resp_commands([b"DEL", keys], rows), data], rows)
            counts = pc.add(counts, 1)
        return _with_expire(data, counts, keys, ttl, rows, only=any_field)

    def staged_commands(
        self, batch: SinkBatch, staging: str, key_check: KeyCheck | None = None
    ) -> tuple[Commands, int]:
        """``HSET <staging> <seq> <entry>`` per row with an entry (seq: the entry's place in
        the task, 0, 1, 2... without gaps: the commit counts the fields to find lost ones).
        The rows Redis would refuse are refused first (see :meth:`keyed`); the count of
        rows skipped for a null key is returned with the commands."""
        batch, keys, skipped = self.keyed(batch, key_check)
        try:
            return self._staged_commands(batch, keys, staging), skipped
        except _TooLarge as large:  # rare: refuse the rows, build the rest again
            commands, more = self.staged_commands(large.checks.refuse(), staging)
            return commands, skipped + more

    def _staged_commands(self, batch: SinkBatch, keys: pa.Array, staging: str) -> Commands:
        opts = self.options
        rows = batch.num_rows
        head = concat_rows([_length_text(keys), b"\n", keys], rows)
        if opts.data_type == "list":
            value = self._value(batch)
            _check_size(value, "value", batch)
            entries = concat_rows([head, value], rows)
            present = pa.repeat(pa.scalar(True), rows)
        else:
            table = self._value_table(batch)
            pieces: list[Piece] = [head]
            fields = pa.array([0] * rows, pa.int64())
            for name in table.column_names:
                text = as_text(table.column(name), name)
                valid = pc.is_valid(text)
                name_bytes = name.encode()
                filled = pc.fill_null(text, b"")
                pair = concat_rows(
                    [
                        b"%d\n%s" % (len(name_bytes), name_bytes),
                        _length_text(filled),
                        b"\n",
                        filled,
                    ],
                    rows,
                )
                pieces.append(pc.if_else(valid, pair, pa.scalar(b"", pa.binary())))
                fields = pc.add(fields, pc.cast(valid, pa.int64()))
            entries = concat_rows(pieces, rows)
            present = pc.greater(fields, 0)
            _check_fields(fields, batch)
        _check_size(entries, "entry", batch)
        none = rows - int(pc.sum(present).as_py()) if rows else 0
        if none:
            batch.count("skipped_no_fields", none)
        task = batch.task
        first = 0
        entries_staged = int(pc.sum(present).as_py() or 0) if rows else 0
        if task is not None:
            first = task.state.get("redis_seq", 0)
            task.state["redis_seq"] = first + entries_staged
        # entries numbered in row order, skipping the rows without one (their seq is unused)
        numbers = pc.add(pc.cumulative_sum(pc.cast(present, pa.int64())), first - 1)
        seq = pc.cast(pc.cast(numbers, pa.string()), pa.binary())
        data = resp_commands([b"HSET", staging.encode(), seq, entries], rows)
        data = pc.if_else(present, data, pa.scalar(b"", pa.binary()))
        return Commands(data, pc.cast(present, pa.int64()), keys, batch=batch)


def _json_pieces(table: pa.Table) -> list[Piece]:
    """Pieces of one JSON object per row (as core's json_objects builds), as binary, null
    free: a JSON object never exceeds Redis's 512 MB in practice (no size check)."""
    out: list[Piece] = []
    for piece in json_object_pieces(table):
        if isinstance(piece, str):
            out.append(piece.encode())
        else:
            out.append(
                as_binary(piece.combine_chunks() if isinstance(piece, pa.ChunkedArray) else piece)
            )
    return out


def _column(batch: SinkBatch, values: pa.Table | None, name: str, option: str) -> pa.Array:
    if name in batch.table.column_names:
        return batch.column(name)
    if values is not None and name in values.column_names:
        return values.column(name).combine_chunks()
    if values is not None:  # no row of this batch has the field: every key is null
        return pa.nulls(batch.num_rows, pa.string())
    raise RecordError(
        f"redis: {option!r} names {name!r}, which neither the DataFrame nor this batch's "
        "JSON values have",
        column=name,
    )


def _with_expire(
    data: pa.Array,
    counts: pa.Array,
    keys: pa.Array,
    ttl: bytes | pa.Array | None,
    rows: int,
    only: pa.Array | None = None,
) -> tuple[pa.Array, pa.Array]:
    """Append ``EXPIRE key ttl`` to the rows that have a TTL (and ``only`` true)."""
    if ttl is None:
        return data, counts
    expire = resp_commands(
        [b"EXPIRE", keys, ttl if isinstance(ttl, bytes) else pc.fill_null(ttl, b"")], rows
    )
    has = pa.repeat(pa.scalar(True), rows) if isinstance(ttl, bytes) else pc.is_valid(ttl)
    if only is not None:
        has = pc.and_(has, only)
    tail = pc.if_else(has, expire, pa.scalar(b"", pa.binary()))
    return concat_rows([data, tail], rows), pc.add(counts, pc.cast(has, pa.int64()))


def _scores(column: pa.Array, name: str) -> pa.Array:
    column = nearest_float(column)
    row = first_null(column)
    if row is None and pa.types.is_floating(column.type):
        row = first_true(pc.is_nan(column))
    if row is not None:
        raise RecordError(
            f"redis: score_column {name!r} is {column[row].as_py()} in row {row}; every "
            "member needs a score (NaN is not one)",
            column=name,
            row=row,
        )
    if pa.types.is_floating(column.type):
        # shortest round-trip text; Arrow spells infinities inf / -inf, as Redis does
        return pc.cast(pc.cast(column, pa.string()), pa.binary())
    return as_text(column, name)


class _TooLarge(Exception):
    """Rows whose value is over Redis's limit (their checks): refused, then the batch's
    commands are built again without them."""

    def __init__(self, checks: RowChecks) -> None:
        super().__init__("values over Redis's limit")
        self.checks = checks


def _check_fields(fields: pa.Array, batch: SinkBatch) -> None:
    """Refuse the stream entries with more fields than the commit script can append."""
    _refuse_over(
        fields,
        MAX_STREAM_FIELDS,
        batch,
        lambda row, n: (
            f"redis: the stream entry of row {row} has {n} fields; the sink appends at most "
            f"{MAX_STREAM_FIELDS} per entry (the commit script's XADD)"
        ),
    )


def _check_size(values: pa.Array, what: str, batch: SinkBatch) -> None:
    """Refuse the values over Redis's size limit."""
    _refuse_over(
        pc.binary_length(values) if len(values) else values,
        MAX_VALUE_BYTES,
        batch,
        lambda row, n: (
            f"redis: the {what} of row {row} is {n} bytes; Redis stores at most "
            f"{MAX_VALUE_BYTES} bytes (512 MB) per value"
        ),
    )


def _refuse_over(
    measures: pa.Array, limit: int, batch: SinkBatch, message: Callable[[int, int], str]
) -> None:
    """Raise _TooLarge with the rows whose measure is over ``limit`` (none: nothing)."""
    if not len(measures) or (pc.max(measures).as_py() or 0) <= limit:
        return
    checks = RowChecks(batch)
    checks.add(pc.greater(measures, limit), lambda row: message(row, measures[row].as_py()))
    raise _TooLarge(checks)


def windows(
    data: pa.Array, counts: pa.Array, rows_per_pipeline: int, *, mset: bool = False
) -> list[Window]:
    windows: list[Window] = []
    for start in range(0, len(data), rows_per_pipeline):
        if mset:  # one MSET of the window's rows (split where it passes MSET_MAX_BYTES)
            chunk = data.slice(start, rows_per_pipeline)
            for first, n in _byte_bounded(chunk, MSET_MAX_BYTES):
                head = b"*%d\r\n$4\r\nMSET\r\n" % (2 * n + 1)
                body = join_lines(chunk.slice(first, n), b"")
                rows = counts.slice(start + first, n)
                windows.append(Window(body, 1, start + first, rows, mset=True, head=head))
            continue
        chunk_counts = counts.slice(start, rows_per_pipeline)
        replies = int(pc.sum(chunk_counts).as_py() or 0)
        if replies:
            body = join_lines(data.slice(start, rows_per_pipeline), b"")
            windows.append(Window(body, replies, start, chunk_counts))
    return windows


def _byte_bounded(chunk: pa.Array, limit: int) -> list[tuple[int, int]]:
    """(first, count) runs of ``chunk`` of at most ``limit`` bytes each (a longer value
    alone in its run)."""
    sizes = pc.binary_length(chunk)
    if (pc.sum(sizes).as_py() or 0) <= limit:
        return [(0, len(chunk))]
    ends = list(itertools.accumulate(sizes.to_pylist()))
    runs, first, base = [], 0, 0
    while first < len(chunk):
        last = max(bisect.bisect_right(ends, base + limit), first + 1)
        runs.append((first, last - first))
        base, first = ends[last - 1], last
    return runs


def _length_text(values: pa.Array) -> pa.Array:
    return pc.cast(pc.cast(pc.binary_length(values), pa.string()), pa.binary())
