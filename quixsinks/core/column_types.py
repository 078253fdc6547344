"""One type per column across the Parquet files of a directory, for JSON-parsed values.

The types of JSON values come from each batch's data (see ``quixsinks.core.records``),
so two micro-batches could give one key two types, and two Parquet files of one
directory would then disagree (``a: int64`` here, ``a: string`` there), which readers
of the directory refuse. :class:`ColumnTypes` keeps the rule:

* the first file written with a column (at any depth: ``a``, ``a.b``, ``a[]``) fixes
  that column's type in the directory; the record of it is a create-only file under
  ``_quixsinks/columns/``, so concurrent writers agree on one first writer;
* a later file must give the column the same type, or be widened to it: an all-null
  column takes the fixed type, int64 values go into a float64 column (the widening
  of integers and floats that also applies within a batch);
* anything else is a :class:`~quixsinks.core.errors.RecordError` naming the column and
  both types, before the file is published;
* a top-level column that is null in every row of a batch and has no fixed type yet is
  left out of that file (readers see null there, as for any missing column); nested
  fields and new keys may appear in later files (readers merge them).

Delete ``_quixsinks/columns/`` to let a directory start over (e.g. after overwrite).
"""

from __future__ import annotations

import pyarrow as pa

from .destinations import Destination
from .errors import RecordError

__all__ = ["ColumnTypes"]


def _leaves(name: str, t: pa.DataType) -> list[tuple[str, pa.DataType]]:
    """(path, type) of every non-nested position of a column."""
    if pa.types.is_struct(t):
        return [leaf for f in t for leaf in _leaves(f"{name}.{f.name}", f.type)]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _leaves(f"{name}[]", t.value_type)
    if pa.types.is_map(t):
        return [*_leaves(f"{name}{{key}}", t.key_type), *_leaves(f"{name}{{}}", t.item_type)]
    return [(name, t)]


def _substitute(name: str, t: pa.DataType, fixed: dict[str, pa.DataType]) -> pa.DataType:
    """``t`` with each leaf replaced by its fixed type where ours widens to it."""
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_substitute(f"{name}.{f.name}", f.type, fixed)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_substitute(f"{name}[]", t.value_type, fixed)))
    target = fixed.get(name)
    if target is not None and (
        pa.types.is_null(t) or (pa.types.is_int64(t) and pa.types.is_float64(target))
    ):
        return target
    return t


def _text(t: pa.DataType) -> bytes:
    return bytes(pa.schema([pa.field("t", t)]).serialize().to_pybytes())


def _type(data: bytes) -> pa.DataType:
    return pa.ipc.read_schema(pa.py_buffer(data)).field("t").type


class ColumnTypes:
    """The fixed column types of one directory (see the module docstring)."""

    def __init__(self, destination: Destination, prefix: str) -> None:
        self.destination = destination
        self.prefix = prefix.rstrip("/")

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path.encode('utf-8').hex()}.type"

    def fixed(self, path: str, t: pa.DataType) -> pa.DataType:
        """The type of ``path`` in the directory: ``t`` if we are the first to write it."""
        key = self._key(path)
        if self.destination.create_exclusive(key, _text(t)):
            return t
        return _type(self.destination.read_bytes(key))

    def conform(self, table: pa.Table, where: str) -> pa.Table:
        """``table`` with every column in its directory type; RecordError where it cannot be."""
        columns: dict[str, pa.ChunkedArray] = {}
        for field in table.schema:
            column = table.column(field.name)
            fixed: dict[str, pa.DataType] = {}
            for path, t in _leaves(field.name, field.type):
                if pa.types.is_null(t):
                    if self.destination.exists(self._key(path)):
                        fixed[path] = _type(self.destination.read_bytes(self._key(path)))
                    continue
                target = self.fixed(path, t)
                if target == t:
                    continue
                if pa.types.is_int64(t) and pa.types.is_float64(target):
                    fixed[path] = target
                    continue
                raise RecordError(
                    f"file: column {path!r} is {t} in this batch, but earlier Parquet files of "
                    f"{where} have it as {target}; the files of one directory keep one type per "
                    "column: make the producer consistent, or parse the value in Spark with "
                    "from_json and a schema (and value_format=columns)",
                    column=field.name,
                )
            if pa.types.is_null(field.type) and field.name not in fixed:
                continue  # null in every row, no type yet: left out of this file
            if fixed:
                column = column.cast(_substitute(field.name, field.type, fixed))
            columns[field.name] = column
        return pa.table(columns)
