"""Column types from the Spark schema, DDL, and rows prepared for COPY.

Types come from the DataFrame's schema (its Arrow form), never from a first row:

==========================  ===========================
Spark / Arrow               PostgreSQL
==========================  ===========================
byte, short                 smallint
int                         integer
long                        bigint
float / double              real / double precision
decimal(p, s)               numeric(p,s)
string                      text
binary                      bytea
boolean                     boolean
date                        date
timestamp                   timestamp with time zone (UTC)
timestamp_ntz               timestamp without time zone
array, map, struct          jsonb
==========================  ===========================

An existing column takes our values only where nothing is lost: a ``numeric(p,s)``
column takes decimals and integers that fit its precision and scale (never floats,
which it would round), an unconstrained ``numeric`` anything numeric. With JSON values
an integer key may also go into an existing ``double precision`` column (the widening
of integers and floats in one key, as within a batch). Text cannot hold NUL (U+0000) in
PostgreSQL: a string or JSON value containing one is a RecordError.

Every identifier goes through ``psycopg2.sql.Identifier``; no name is ever pasted
into SQL text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_true
from quixsinks.core.batch import SinkBatch
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.formats import json_column

__all__ = [
    "DELETE_COLUMN",
    "JSON_NUL",
    "LEDGER_TABLE",
    "MAX_IDENTIFIER_BYTES",
    "ROW_COLUMN",
    "STAGING_REGISTRY",
    "TEXT_TYPES",
    "Column",
    "MessageJson",
    "NulError",
    "TableSchema",
    "accepts",
    "check_no_nul",
    "column_arrays",
    "column_plan",
    "has_nul",
    "incompatible_message",
    "is_binary",
    "is_json_source",
    "json_text",
    "key_texts",
    "message_json",
    "non_utf8_rows",
    "null_key_rows",
    "pg_type",
    "quote_ident",
    "spark_type_for",
    "sql_text",
    "stage_prefix",
    "stage_table_name",
    "unchecked_json_text",
]

LEDGER_TABLE = "_quixsinks_ledger"
#: every staging table and when it was made: the commit sweeps abandoned ones
STAGING_REGISTRY = "_quixsinks_staging"
#: write_mode=prepared: the prepared transactions the driver has decided to commit (a
#: driver that dies before committing them all leaves the rest to the next one)
DECIDED_TABLE = "_quixsinks_decided"
#: PostgreSQL truncates longer names (NAMEDATALEN - 1), so two long names can collide
MAX_IDENTIFIER_BYTES = 63
#: row order within a staging table (upsert only: the last row of a key wins)
ROW_COLUMN = "__qs_row"
#: whether a staged row deletes its primary key (delete_column only)
DELETE_COLUMN = "__qs_delete"
METADATA_TIMESTAMP = "timestamp"
METADATA_KEY = "__key"


def pg_type(t: pa.DataType, column: str) -> str:
    """The PostgreSQL type for an Arrow type, in ``format_type`` spelling."""
    if pa.types.is_dictionary(t):
        return pg_type(t.value_type, column)
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_integer(t):
        return "bigint"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "real"
    if pa.types.is_float64(t):
        return "double precision"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytea"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz else "timestamp without time zone"
    if pa.types.is_nested(t) or pa.types.is_null(t):
        return "jsonb"
    raise OptionError(
        f"postgresql: column {column!r} has type {t}, which has no PostgreSQL mapping; "
        "cast it (e.g. to string) or leave it out with 'value_columns'",
        option="value_columns",
        value=column,
    )


# Which existing column types accept our values, per type we would create.
_ACCEPTS: dict[str, tuple[str, ...]] = {
    "smallint": ("smallint", "integer", "bigint", "numeric", "real", "double precision"),
    "integer": ("integer", "bigint", "numeric", "double precision"),
    "bigint": ("bigint", "numeric"),
    "real": ("real", "double precision", "numeric"),
    "double precision": ("double precision", "numeric"),
    "numeric": ("numeric",),  # a double would round a decimal's digits
    "text": ("text", "character varying", "character", "citext", "uuid", "json", "jsonb"),
    "bytea": ("bytea",),
    "boolean": ("boolean",),
    "date": ("date", "timestamp with time zone", "timestamp without time zone"),
    "timestamp with time zone": ("timestamp with time zone",),
    "timestamp without time zone": ("timestamp without time zone",),
    "jsonb": ("jsonb", "json", "text"),
}


#: decimal digits an integer type needs
_INTEGER_DIGITS = {"smallint": 5, "integer": 10, "bigint": 19}


def _numeric_spec(pg: str) -> tuple[int, int] | None:
    """(precision, scale) of ``numeric(p,s)``; None for an unconstrained numeric."""
    if "(" not in pg:
        return None
    inner = pg.split("(", 1)[1].rstrip(")").split(",")
    precision = int(inner[0])
    return precision, int(inner[1]) if len(inner) > 1 else 0


def compatible(ours: str, existing: str, *, json_values: bool = False) -> bool:
    """Whether an existing column of type ``existing`` takes the values we write, losslessly."""
    base = ours.split("(")[0]
    existing_base = existing.split("(")[0]
    accepted = _ACCEPTS.get(base, (base,))
    if json_values and base in _INTEGER_DIGITS:
        accepted = (*accepted, "double precision")
    if existing_base not in accepted:
        return False
    if existing_base == "numeric":
        target = _numeric_spec(existing)
        if target is None:
            return True
        if base == "numeric":
            source = _numeric_spec(ours)
            return source is None or (
                source[1] <= target[1] and source[0] - source[1] <= target[0] - target[1]
            )
        if base in _INTEGER_DIGITS:
            return _INTEGER_DIGITS[base] <= target[0] - target[1]
        return False  # a float would be rounded to the column's scale
    return True


@dataclass(frozen=True)
class Column:
    """One column of a target table and where its values come from."""

    name: str
    pg_type: str
    source: str  # "value", "timestamp" (record time) or "key" (record key)


#: PostgreSQL types holding text, into which a binary key is written as its text
TEXT_TYPES = ("text", "character varying", "character")


def accepts(col: Column, existing: str, *, json_values: bool = False) -> bool:
    """Whether an existing column of type ``existing`` takes ``col``'s values losslessly:
    as :func:`compatible` says, and for the metadata columns of a table Quix's
    PostgreSQLSink created, the record time into ``timestamp without time zone`` (as its
    UTC wall time) and a binary key into a text column (as its text: ``key_text_format``)."""
    if compatible(col.pg_type, existing, json_values=json_values):
        return True
    base = existing.split("(")[0]
    if col.source == "timestamp":
        return base == "timestamp without time zone"
    if col.source == "key":
        return col.pg_type == "bytea" and base in TEXT_TYPES
    return False


def quote_ident(name: str) -> str:
    """``name`` as a PostgreSQL identifier in an error message (never executed)."""
    return '"' + name.replace('"', '""') + '"'


#: the Spark type whose values an existing column of a PostgreSQL type takes as they are
_SPARK_FOR: dict[str, str] = {
    "smallint": "smallint",
    "integer": "int",
    "bigint": "bigint",
    "real": "float",
    "double precision": "double",
    "text": "string",
    "character varying": "string",
    "character": "string",
    "bytea": "binary",
    "boolean": "boolean",
    "date": "date",
    "timestamp with time zone": "timestamp",
    "timestamp without time zone": "timestamp_ntz",
}


def spark_type_for(existing: str) -> str | None:
    """The Spark type to cast a column to so that an ``existing`` column takes it."""
    base = existing.split("(")[0]
    if base == "numeric":
        spec = _numeric_spec(existing)
        if spec is None:
            return "decimal(38,18)"
        return f"decimal({spec[0]},{spec[1]})" if spec[0] <= 38 else None
    return _SPARK_FOR.get(base)


def incompatible_message(
    table: TableSchema, col: Column, existing: str, *, json_values: bool = False
) -> str:
    """What to change when column ``col`` of ``table`` has the type ``existing``, which
    does not take the values we write without loss: the ALTER TABLE that widens it, or
    the Spark cast that makes the data fit it."""
    name = quote_ident(col.name)
    alter = (
        f"ALTER TABLE {quote_ident(table.schema)}.{quote_ident(table.name)} ALTER COLUMN "
        f"{name} TYPE {col.pg_type} USING {name}::{col.pg_type}"
    )
    fixes = [f"change the column: {alter}"]
    spark = spark_type_for(existing)
    if col.source == "value" and spark is not None:
        if json_values:
            fixes.append(
                f"or parse the JSON value in Spark (from_json) and cast {col.name!r} to {spark} "
                "(Spark's cast decides what is lost)"
            )
        else:
            fixes.append(
                f"or cast the column {col.name!r} to {spark} in Spark (Spark's cast decides "
                "what is lost)"
            )
    elif col.source != "value":
        fixes.append("or set include_metadata=false (no timestamp and __key columns)")
    fixes.append("or write to another table (existing columns are never altered)")
    return (
        f"postgresql: column {col.name!r} of table {table} has type {existing}, but the data "
        f"has {col.pg_type}, which it cannot take without loss; " + "; ".join(fixes)
    )


def column_plan(
    values: pa.Schema,
    key_type: pa.DataType | None,
    *,
    include_metadata: bool,
    exclude: Iterable[str] = (),
) -> list[Column]:
    """The target columns for a batch: metadata first (as Quix), then the value columns."""
    skip = set(exclude)
    columns: list[Column] = []
    if include_metadata:
        columns.append(Column(METADATA_TIMESTAMP, "timestamp with time zone", "timestamp"))
        key_pg = "text" if key_type is None else pg_type(key_type, METADATA_KEY)
        columns.append(Column(METADATA_KEY, "text" if key_pg == "jsonb" else key_pg, "key"))
    for field in values:
        if field.name in skip:
            continue
        if include_metadata and field.name in (METADATA_TIMESTAMP, METADATA_KEY):
            raise OptionError(
                f"postgresql: value column {field.name!r} clashes with the metadata column of "
                "the same name; rename it or set include_metadata=false",
                option="include_metadata",
            )
        problem = identifier_problem(field.name, "column")
        if problem:
            raise OptionError(
                f"postgresql: a column name PostgreSQL cannot keep as given: {problem}; rename "
                "the column in Spark (or the JSON key) or leave it out with 'value_columns'",
                option="value_columns",
                value=field.name,
            )
        columns.append(Column(field.name, pg_type(field.type, field.name), "value"))
    return columns


@dataclass(frozen=True)
class TableSchema:
    """A target table's identity: schema and name."""

    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


def identifier_problem(name: str, kind: str = "table") -> str | None:
    """Why PostgreSQL would not keep ``name`` (of a ``kind``: table, column) as given, or
    None. PostgreSQL truncates a longer name silently (with a NOTICE), so a table or column
    created under it would be read back under another name, and two long names could
    name one ``kind``."""
    size = len(name.encode("utf-8"))
    if size > MAX_IDENTIFIER_BYTES:
        return (
            f"{name[:20]!r}... is {size} bytes long; PostgreSQL keeps only the first "
            f"{MAX_IDENTIFIER_BYTES}, so two such names could name one {kind}"
        )
    if not name:
        return "the name is empty"
    if "\x00" in name:
        return f"{name!r} contains a NUL character"
    return None


def _digest(text: str, length: int) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:length]


def stage_prefix(sink_id: str) -> str:
    """Every staging table of a sink starts with this (then ``<batch id>_``)."""
    return f"_qs_{_digest(sink_id, 10)}_"


def stage_table_name(sink_id: str, batch_id: int, table: TableSchema, attempt_id: str) -> str:
    """The staging table of one task attempt for one target table (at most 63 bytes: 57
    with the largest batch id). The attempt's digest has 64 bits: two attempts of a batch
    sharing a table (a 1 in 2^33 chance per pair with 32 bits) fail its commit's count."""
    target = _digest(f"{table.schema}\x00{table.name}", 8)
    return f"{stage_prefix(sink_id)}{batch_id}_{target}_{_digest(attempt_id, 16)}"


def prepared_gid(sink_id: str, batch_id: int, attempt_id: str, n: int, schema: str) -> str:
    """The id of a task attempt's ``n``-th prepared transaction (write_mode=prepared).

    It starts like the sink's staging tables (``stage_batch`` reads its batch id back);
    the attempt id is unique per task attempt, so two attempts never share an id. It ends
    with the ledger's schema (:func:`gid_in_schema`): whether a prepared transaction was
    decided is known only from the decided table of that schema."""
    return f"{stage_prefix(sink_id)}{batch_id}_{_digest(attempt_id, 12)}_{n}_{_digest(schema, 8)}"


#: a prepared transaction id made before ids carried their schema: ``..._<n>``
_UNTAGGED_GID = re.compile(r"_qs_[0-9a-f]{10}_\d+_[0-9a-f]{12}_\d+")


def gid_in_schema(gid: str, schema: str) -> bool:
    """Whether prepared transaction ``gid`` is decided in ``schema``'s ledger tables (an
    id without a schema, made by an earlier quixsinks, counts for every schema)."""
    if not gid.startswith("_qs_"):
        return False
    return gid.endswith("_" + _digest(schema, 8)) or _UNTAGGED_GID.fullmatch(gid) is not None


def settle_action(
    gid: str,
    *,
    decided: bool,
    old: bool,
    schema: str,
    sink_id: str | None,
    batch_id: int | None,
    committed: Collection[int] = (),
) -> Literal["commit", "rollback", "abandoned"] | None:
    """What the settling of prepared transactions does with ``gid``.

    ``commit`` when it is ``decided`` in ``schema``'s decided table; ``rollback`` when it
    is an undecided one of ``sink_id`` in ``schema`` of ``batch_id`` or of a lower batch
    id in ``committed`` (the ledger holds it: a failed attempt, a replay of a committed
    batch); ``abandoned`` when it is an undecided one of any sink in ``schema`` that is
    ``old``; None (left alone) otherwise: never another schema's, whose decision this
    schema's table does not hold, nor a lower batch id's the ledger lacks (a keyed write
    of the sink id may still be running)."""
    if decided:
        return "commit"
    if not gid_in_schema(gid, schema):
        return None
    mine = stage_batch(gid, sink_id) if sink_id is not None else None
    if mine is not None and (mine == batch_id or mine in committed):
        return "rollback"
    return "abandoned" if old else None


def stage_batch(name: str, sink_id: str) -> int | None:
    """The batch id in a staging table's name, if it belongs to ``sink_id``."""
    prefix = stage_prefix(sink_id)
    if not name.startswith(prefix):
        return None
    head = name[len(prefix) :].split("_", 1)[0]
    return int(head) if head.isdigit() else None


#: a JSON text escape of NUL (an even run of backslashes before it is not an escape)
JSON_NUL = r"(^|[^\\])(\\\\)*\\u0000"


class NulError(RecordError):
    """A text or JSON value holds a NUL character, which PostgreSQL cannot store (the
    sink then finds every such row and refuses it alone: see ``nul_rows`` in wire.py)."""


def has_nul(text: pa.Array, pattern: str | None = None) -> pa.Array:
    """Per value: whether it holds a NUL (or, with ``pattern``, its JSON escape)."""
    if pattern is None:
        return pc.match_substring(text, "\x00")
    return pc.match_substring_regex(text, pattern)


def check_no_nul(text: pa.Array, name: str, pattern: str | None = None) -> None:
    """NulError for a NUL in a text column (or, with ``pattern``, its JSON escape)."""
    row = first_true(has_nul(text, pattern))
    if row is not None:
        raise NulError(
            f"postgresql: column {name!r} holds a NUL character (U+0000) in row {row}, which "
            "PostgreSQL text and jsonb cannot store; remove it, or write the value as binary",
            column=name,
            row=row,
        )


def json_text(column: pa.Array, name: str, *, strict: bool) -> pa.Array:
    """A nested (or JSON) column as JSON text, nulls kept; ``strict`` for json/jsonb,
    which refuse an escaped NUL too."""
    text = unchecked_json_text(column)
    check_no_nul(text, name, JSON_NUL if strict else None)
    return text


def unchecked_json_text(column: pa.Array) -> pa.Array:
    """A nested (or JSON) column as JSON text, nulls kept."""
    if isinstance(column.type, MessageJson):
        return column.storage
    return pc.if_else(pc.is_null(column), pa.scalar(None, pa.string()), json_column(column))


class MessageJson(pa.ExtensionType):  # type: ignore[misc]
    """JSON texts of each message's own nested value under one key (a JSON value read per
    message, as Quix writes it: its own keys and number types, not the batch's union),
    written as they are into a jsonb, json or text column."""

    def __init__(self) -> None:
        super().__init__(pa.string(), "quixsinks.postgresql.message_json")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> MessageJson:
        return cls()


def is_json_source(t: pa.DataType) -> bool:
    """Whether values of Arrow type ``t`` are written as JSON text (nested, or a message's
    own JSON)."""
    return bool(pa.types.is_nested(t) or isinstance(t, MessageJson))


def message_json(
    batch: SinkBatch, names: Sequence[str], rows: pa.Array | None
) -> dict[str, pa.Array]:
    """Per key of ``names``: each message's own value under it as JSON text
    (``json.dumps`` of ``json.loads``, as Quix's Json adapter writes it), null where the
    message lacks it, holds null there or is a tombstone; only ``rows``, when given."""
    raw = batch.table.column(batch.records.values[0]).combine_chunks()
    if rows is not None:
        raw = raw.take(rows)
    texts = [b"null" if t is None else t for t in pc.cast(raw, pa.binary()).to_pylist()]
    try:  # one array: about 3 times faster than a json.loads per message
        messages = json.loads(b"[" + b",".join(texts) + b"]")
    except ValueError:  # the glue's parser and json differ on a message: say which
        messages = [json.loads(text) for text in texts]
    out: dict[str, pa.Array] = {}
    for name in names:
        texts = [
            json.dumps(m[name]) if isinstance(m, dict) and m.get(name) is not None else None
            for m in messages
        ]
        out[name] = pa.ExtensionArray.from_storage(MessageJson(), pa.array(texts, pa.string()))
    return out


def sql_text(column: pa.Array, pg: str, name: str = "") -> pa.Array:
    """A column as COPY (CSV) will read it for a column of type ``pg``."""
    t = column.type
    if pg in ("jsonb", "json") or is_json_source(t):
        return json_text(column, name, strict=pg in ("jsonb", "json"))
    if pg == "bytea":
        hexed = [None if v is None else "\\x" + bytes(v).hex() for v in column.to_pylist()]
        return pa.array(hexed, pa.string())
    if pa.types.is_dictionary(t):
        return sql_text(column.dictionary_decode(), pg, name)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        check_no_nul(column, name)
        return column
    if pa.types.is_timestamp(t) and t.tz:
        # the same instant without its zone: Arrow writes naive timestamps to CSV much
        # faster, and the sink's sessions run with timezone=UTC
        return pc.cast(pc.cast(column, pa.timestamp(t.unit, "UTC")), pa.timestamp(t.unit))
    return column


def column_arrays(
    batch: SinkBatch,
    columns: Sequence[Column],
    rows: pa.Array | None = None,
    key_text_format: str = "utf8",
) -> dict[str, pa.Array]:
    """The batch's values of ``columns`` as Arrow arrays (only ``rows``, when given), each
    as its column takes it (a binary key into text: ``key_text_format``). A nested value
    of a JSON value column is each message's own JSON (:func:`message_json`)."""
    values = batch.values()
    out: dict[str, pa.Array] = {}
    own: dict[str, pa.Array] = {}
    if batch.passthrough:
        nested = [
            c.name
            for c in columns
            if c.source == "value"
            and c.name in values.column_names
            and pa.types.is_nested(values.schema.field(c.name).type)
        ]
        own = message_json(batch, nested, rows) if nested else {}
    for col in columns:
        if col.name in own and col.source == "value":
            out[col.name] = own[col.name]
            continue
        if col.source == "timestamp":
            # into `timestamp without time zone` (Quix's column): the UTC wall time
            zone = None if col.pg_type == "timestamp without time zone" else "UTC"
            array = pc.cast(batch.timestamps_ms(), pa.timestamp("ms", zone))
        elif col.source == "key":
            array = batch.keys()
        else:
            array = values.column(col.name).combine_chunks()
        if rows is not None:
            array = array.take(rows)
        text_column = col.pg_type.split("(")[0] in TEXT_TYPES
        if col.source == "key" and text_column and is_binary(array.type):
            array = key_texts(array, key_text_format)
        out[col.name] = array
    return out


def is_binary(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
    )


def key_texts(keys: pa.Array, key_text_format: str = "utf8") -> pa.Array:
    """Binary keys as the text a text ``__key`` column holds: ``utf8`` decodes them (the
    caller has refused the keys that are not UTF-8: :func:`non_utf8_rows`), ``hex`` gives
    PostgreSQL's bytea text, ``\\x6b31``, what Quix's PostgreSQLSink writes for a bytes key."""
    if key_text_format == "hex":
        texts = [None if v is None else "\\x" + v.hex() for v in keys.to_pylist()]
        return pa.array(texts, pa.string())
    return pc.cast(pc.cast(keys, pa.binary()), pa.string())


def non_utf8_rows(keys: pa.Array, rows: pa.Array | None) -> list[int]:
    """The rows (indices into the batch, of ``rows`` when given) whose binary key is not
    valid UTF-8."""
    taken = keys if rows is None else keys.take(rows)
    try:
        pc.cast(pc.cast(taken, pa.binary()), pa.string())
        return []
    except pa.ArrowInvalid:
        pass
    indices = range(len(keys)) if rows is None else rows.to_pylist()
    bad = []
    for row, raw in zip(indices, taken.to_pylist(), strict=True):
        try:
            if raw is not None:
                raw.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(int(row))
    return bad


def null_key_rows(
    batch: SinkBatch, columns: Sequence[Column], required: Sequence[str]
) -> dict[str, pa.Array]:
    """Per primary key column of ``required``: whether it is null in each row of the batch
    (every row, for a column missing from a JSON batch); such a row cannot be written."""
    by_name = {c.name: c for c in columns}
    out: dict[str, pa.Array] = {}
    for name in required:
        col = by_name.get(name)
        if col is None:
            out[name] = pa.array([True] * batch.num_rows, pa.bool_())
            continue
        if col.source == "timestamp":
            array = batch.timestamps_ms()
        elif col.source == "key":
            array = batch.keys()
        else:
            array = batch.values().column(name)
        out[name] = pc.is_null(array)
        if isinstance(out[name], pa.ChunkedArray):
            out[name] = out[name].combine_chunks()
    return out
