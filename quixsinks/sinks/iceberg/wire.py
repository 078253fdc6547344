"""Arrow to Iceberg data files: the rows a table gets, their types, the data files.

* :func:`check_types`: types Iceberg cannot hold fail before any data moves;
* :data:`QUIX_LAYOUT`: Quix IcebergSink's default partitioning;
* :func:`write_data_files`: Parquet data files (field ids, split by partition) of a batch,
  uncommitted (the driver commits them);
* Quix's row layout for JSON values, below.

Quix's row layout for JSON values: ``_key``, ``_timestamp`` + the parsed value columns.

When core's record model parses a JSON value column (Spark's Kafka source schema with
``value_format=auto``, or ``value_format=json``), the rows written to the table are Quix
IcebergSink's: ``_key`` (the record key as text), ``_timestamp`` (the record time) and
one column per JSON key, parsed by core's parser (:mod:`quixsinks.core.records`). The
Kafka metadata columns (topic, partition, offset, headers, timestampType) are not written,
as in Quix.

The value columns are only known per batch, on the executors. :func:`conform_schema`
reconciles a batch's parsed types with the table's schema before the sink evolves it:

* a key whose values are all null in this batch (JSON ``null``, or no row has it) has no
  type yet: it takes the table's type when the table has that column, and is otherwise
  left out of this batch's files (every value of it is null; the column is added by the
  first batch that has a value for it). The same holds inside objects and arrays;
* an integer key of a column the table holds as double is written as double (core's
  parser widens int and float in one key to double within a batch; this does the same
  across batches);
* a timestamp with a zone (``_timestamp``, the record time) going into a column the table
  holds as ``timestamp`` without zone (a table Quix's IcebergSink created) is written as
  its UTC wall time: the same instant, read as UTC.

Anything else the table cannot take (a string in a bigint column) fails the schema
evolution with the column named.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_true
from quixsinks.core.batch import SinkBatch
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.records import RecordSchema
from quixsinks.core.tables.partitioning import PartitionField

__all__ = [
    "KEY",
    "QUIX_LAYOUT",
    "TIMESTAMP",
    "check_types",
    "conform_schema",
    "keeping_required",
    "layout_schema",
    "layout_table",
    "nullable",
    "required_nulls",
    "write_data_files",
]

KEY = "_key"
TIMESTAMP = "_timestamp"
#: Quix IcebergSink's default layout: by key, then by day of the record time
QUIX_LAYOUT = (PartitionField(KEY, "identity"), PartitionField(TIMESTAMP, "day"))


def nullable(schema: pa.Schema) -> pa.Schema:
    """Every top-level column optional: streaming input may hold nulls later."""
    return pa.schema([f.with_nullable(True) for f in schema])


def keeping_required(schema: pa.Schema, table_schema: Any) -> pa.Schema:
    """``schema`` with the table's required top-level columns non-nullable, so that a
    schema union never relaxes them (their nulls are refused per row instead)."""
    required = {f.name for f in table_schema.fields if f.required}
    return pa.schema([f.with_nullable(False) if f.name in required else f for f in schema])


def check_types(schema: pa.Schema) -> None:
    """Types Iceberg cannot hold fail before any data moves, naming the column."""

    def refuse(name: str, why: str) -> OptionError:
        return OptionError(f"iceberg: column {name!r} {why}", option="columns", value=name)

    def check(name: str, t: pa.DataType) -> None:
        if pa.types.is_unsigned_integer(t):
            raise refuse(
                name,
                f"has type {t}; Iceberg has no unsigned integers: cast it to a wider signed "
                "type (e.g. bigint) first",
            )
        if pa.types.is_null(t):
            raise refuse(
                name,
                "has no type (NullType, e.g. lit(None)); cast it to the type the column "
                "should have",
            )
        if pa.types.is_map(t):
            if pa.types.is_nested(t.key_type):
                raise refuse(
                    name,
                    f"is a map with {t.key_type} keys; this sink writes maps with primitive "
                    "keys only",
                )
            check(f"{name}.value", t.item_type)
        elif pa.types.is_struct(t):
            for child in t:
                check(f"{name}.{child.name}", child.type)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            check(f"{name}.element", t.value_type)

    for f in schema:
        check(f.name, f.type)


def write_data_files(
    metadata: Any, rows: pa.Table, io: Any, *, table_name: str, batch: SinkBatch
) -> list[Any]:
    """The data files of ``rows`` (their ``DataFile`` entries: small, picklable), written
    with the table's ``metadata`` through ``io``; rows the table refuses are a RecordError."""
    from quixsinks.core.tables.pyiceberg_compat import write_data_files as write

    try:
        return write(metadata, rows, io)
    except (ValueError, TypeError) as exc:
        raise RecordError(
            f"iceberg: batch {batch.batch_id} partition {batch.partition_id} cannot be "
            f"written to {table_name}: {exc}"
        ) from exc


def required_nulls(rows: pa.Table, table_schema: Any) -> dict[int, str]:
    """The rows (indices) with no value in a required top-level column of the table, each
    with the first such column (a column the rows lack is null in every row)."""
    found: dict[int, str] = {}
    for field in table_schema.fields:
        if not field.required:
            continue
        if field.name not in rows.column_names:
            missing: list[int] = list(range(rows.num_rows))
        else:
            column = rows.column(field.name)
            if not column.null_count:
                continue
            missing = pc.indices_nonzero(pc.is_null(column)).to_pylist()
        for row in missing:
            found.setdefault(row, field.name)
    return found


def _key_type(t: pa.DataType) -> pa.DataType:
    """``_key`` holds text (Quix's StringType): binary keys are decoded as UTF-8."""
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t):
        return pa.string()
    if pa.types.is_large_string(t):
        return pa.string()
    return t


def _timestamp_type(t: pa.DataType) -> pa.DataType:
    """``_timestamp``: a timestamp column as it is (microseconds), integer milliseconds as a
    UTC timestamp."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", t.tz)
    return pa.timestamp("us", "UTC")


def layout_schema(schema: pa.Schema, records: RecordSchema) -> pa.Schema:
    """The columns of Quix's layout known at planning: ``_key`` and ``_timestamp`` (the
    value columns come from each batch's JSON)."""
    fields = []
    if records.key is not None:
        fields.append(pa.field(KEY, _key_type(schema.field(records.key).type)))
    if records.timestamp is not None:
        fields.append(pa.field(TIMESTAMP, _timestamp_type(schema.field(records.timestamp).type)))
    return pa.schema(fields)


def _keys(batch: SinkBatch) -> pa.Array:
    keys = batch.keys()
    target = _key_type(keys.type)
    if keys.type == target:
        return keys
    try:
        return keys.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        bad = next((i for i, k in enumerate(keys.to_pylist()) if not _is_utf8(k)), None)
        where = (
            f"row {bad} of batch {batch.batch_id} has a key"
            if bad is not None
            else (f"the keys of batch {batch.batch_id} ({exc}) are")
        )
        raise RecordError(
            f"iceberg: {where} that is not UTF-8 text; _key holds text (Quix's layout): "
            "select the key as text yourself (e.g. hex(key) AS key or base64(key) AS key), "
            "or set value_format=columns to write the columns as they are",
            column=batch.records.key,
            row=bad,
        ) from None


def _is_utf8(key: Any) -> bool:
    if not isinstance(key, bytes):
        return True
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _timestamps(batch: SinkBatch) -> pa.Array:
    records = batch.records
    assert records.timestamp is not None
    column = batch.table.column(records.timestamp).combine_chunks()
    target = _timestamp_type(column.type)
    if pa.types.is_timestamp(column.type):
        return column.cast(target)
    millis = batch.timestamps_ms()
    return millis.cast(pa.timestamp("ms", "UTC")).cast(target)


def layout_table(batch: SinkBatch) -> pa.Table:
    """The batch's rows in Quix's layout: ``_key``, ``_timestamp`` + the parsed JSON keys.

    A JSON key named ``_key`` or ``_timestamp`` would collide with the record's own: the
    batch fails naming it (never one value silently replacing the other).
    """
    records = batch.records
    values = _untyped_when_empty(batch.values())
    own = [n for n, c in ((KEY, records.key), (TIMESTAMP, records.timestamp)) if c is not None]
    for name in own:
        if name not in values.column_names:
            continue
        row = first_true(pc.is_valid(values.column(name)))
        if row is None:  # no row of this slice has the key
            values = values.drop_columns([name])
            continue
        raise RecordError(
            f"iceberg: the JSON value has a key {name!r} (row {row}), which Quix's layout "
            f"uses for the record's own {name[1:]}; rename it in the producer, or set "
            "value_format=columns to write the value unparsed",
            column=name,
            row=row,
        )
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    if records.key is not None:
        columns[KEY] = _keys(batch)
    if records.timestamp is not None:
        columns[TIMESTAMP] = _timestamps(batch)
    for name in values.column_names:
        columns[name] = values.column(name)
    if not columns:
        return values
    return pa.table(columns)


def _untyped_when_empty(values: pa.Table) -> pa.Table:
    """A column null in every row typed null: a slice of a batch keeps the types of the
    whole batch's JSON, and a type only the other rows gave must not decide (the column
    then takes the table's type, or is left out)."""
    for index, name in enumerate(values.column_names):
        column = values.column(index)
        if len(column) and column.null_count == len(column) and not pa.types.is_null(column.type):
            values = values.set_column(index, name, pa.nulls(len(column)))
    return values


def _field_type(existing: Any, name: str) -> Any:
    """The type of ``existing``'s (an Iceberg struct) field ``name``, or None."""
    if existing is None or not getattr(existing, "is_struct", False):
        return None
    for f in existing.fields:
        if f.name == name:
            return f.field_type
    return None


def _arrow(iceberg_type: Any) -> pa.DataType:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(iceberg_type, include_field_ids=False)


def conform_type(t: pa.DataType, existing: Any) -> pa.DataType | None:
    """``t`` made to fit the table's type ``existing`` (None: the table lacks it), or None
    when it has no type to add (null everywhere); see the module docstring."""
    from pyiceberg.types import DoubleType, ListType, TimestampType

    if pa.types.is_null(t):
        return None if existing is None else _arrow(existing)
    if pa.types.is_struct(t):
        children = []
        for child in t:
            conformed = conform_type(child.type, _field_type(existing, child.name))
            if conformed is not None:
                children.append(child.with_type(conformed))
        if not children:
            return None if existing is None else _arrow(existing)
        return pa.struct(children)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = existing.element_type if isinstance(existing, ListType) else None
        item = conform_type(t.value_type, element)
        if item is None:
            return None if existing is None else _arrow(existing)
        return pa.list_(t.value_field.with_type(item))
    if pa.types.is_int64(t) and isinstance(existing, DoubleType):
        return pa.float64()
    if pa.types.is_timestamp(t) and t.tz is not None and isinstance(existing, TimestampType):
        return pa.timestamp("us")  # a zone-less column (Quix's _timestamp): the UTC wall time
    return t


def conform_schema(schema: pa.Schema, table_schema: Any) -> pa.Schema:
    """The batch's columns as they will be written against the table's current schema
    (columns without a type dropped, integers of double columns widened)."""
    struct = table_schema.as_struct()
    fields = []
    for f in schema:
        conformed = conform_type(f.type, _field_type(struct, f.name))
        if conformed is not None:
            fields.append(f.with_type(conformed).with_nullable(True))
    return pa.schema(fields)
