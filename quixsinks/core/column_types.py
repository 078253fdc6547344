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

The record of a column is named after its path: the path's UTF-8 bytes in hex while that
stays a short file name (up to :data:`MAX_HEX_PATH_BYTES` bytes of path, the names
earlier releases wrote), else a SHA-256 digest of the path, so a JSON field name of any
length never makes a file name too long (a longer hex record written to an object store
by an earlier release is still found).

:meth:`ColumnTypes.refusals` finds the rows of a batch that hold a value of a column whose
type changed against the directory's, so a sink refuses just those rows (``on_error``)
and writes the others in one file.

:meth:`ColumnTypes.adopt` records the types of Parquet files another writer left in the
directory (Quix Streams' ``FileSink``) before quixsinks writes its first file there, so
that ours take the same types.

Delete ``_quixsinks/columns/`` to let a directory start over (e.g. after overwrite).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from .destinations import Destination, LocalDestination
from .errors import QuixSinksError, RecordError

__all__ = ["MAX_HEX_PATH_BYTES", "ColumnTypes", "TypeChangeError", "rows_holding"]

#: Longest column path (UTF-8 bytes) whose record is named by its hex: 2 * 106 + len(".type")
#: plus a local destination's temporary suffix (37) is 254, within a 255-byte file name.
MAX_HEX_PATH_BYTES = 106
#: Object store keys are at most 1024 bytes: no longer legacy record can exist.
_MAX_KEY_BYTES = 1024


class TypeChangeError(RecordError):
    """A column's type in a batch differs from the one fixed for its directory (and cannot
    be widened to it). ``path`` is the column position (``a``, ``a.b``, ``a[]``)."""

    row: int | None = None

    def __init__(self, message: str, *, column: str | None = None, path: str = "") -> None:
        QuixSinksError.__init__(self, message, column=column, path=path)
        self.column = column
        self.row = None
        self.path = path


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


def rows_holding(column: pa.ChunkedArray | pa.Array, name: str, path: str) -> pa.Array:
    """The indices (int64, ascending) of the rows of ``column`` (named ``name``) that hold
    a non-null value at ``path`` (``name``, ``name.b``, ``name[]``, as :func:`_leaves` names
    positions); every row with a non-null ``column`` where ``path`` cannot be followed."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    rows = pa.array(range(len(array)), pa.int64())
    rest = path[len(name) :] if path.startswith(name) else None
    while rest:
        t = array.type
        if rest.startswith(".") and pa.types.is_struct(t):
            child = next(
                (
                    f.name
                    for f in t
                    if rest == f".{f.name}"
                    or rest.startswith(f".{f.name}.")
                    or rest.startswith(f".{f.name}[")
                ),
                None,
            )
            if child is None:
                break
            # flatten() carries the struct's own nulls into its fields
            array = array.flatten()[t.get_field_index(child)]
            rest = rest[len(child) + 1 :]
        elif rest.startswith("[]") and (pa.types.is_list(t) or pa.types.is_large_list(t)):
            rows = pc.take(rows, pc.list_parent_indices(array))
            array = array.flatten()
            rest = rest[2:]
        else:
            break
    held = pc.filter(rows, pc.is_valid(array))
    return pc.unique(held) if len(held) else held


class ColumnTypes:
    """The fixed column types of one directory (see the module docstring)."""

    def __init__(self, destination: Destination, prefix: str) -> None:
        self.destination = destination
        self.prefix = prefix.rstrip("/")
        # types once known never change: one lookup per path per instance (a write)
        self._known: dict[str, pa.DataType] = {}

    def _key(self, path: str) -> str:
        raw = path.encode("utf-8")
        if len(raw) <= MAX_HEX_PATH_BYTES:
            return f"{self.prefix}/{raw.hex()}.type"
        return f"{self.prefix}/sha256-{hashlib.sha256(raw).hexdigest()}.type"

    def _legacy_key(self, path: str) -> str | None:
        """Where an earlier release kept a long path's record (on an object store; on a
        local disk such a name was too long to exist), None where it cannot be."""
        raw = path.encode("utf-8")
        if len(raw) <= MAX_HEX_PATH_BYTES or isinstance(self.destination, LocalDestination):
            return None
        key = f"{self.prefix}/{raw.hex()}.type"
        return key if len(key.encode()) <= _MAX_KEY_BYTES else None

    def _recorded(self, path: str) -> pa.DataType | None:
        """The type recorded for ``path``, None when none is."""
        if path in self._known:
            return self._known[path]
        for key in (self._key(path), self._legacy_key(path)):
            if key is not None and self.destination.exists(key):
                self._known[path] = _type(self.destination.read_bytes(key))
                return self._known[path]
        return None

    def fixed(self, path: str, t: pa.DataType) -> pa.DataType:
        """The type of ``path`` in the directory: ``t`` if we are the first to write it."""
        if path not in self._known:
            self._known[path] = self._fix(path, t)
        return self._known[path]

    def _fix(self, path: str, t: pa.DataType) -> pa.DataType:
        legacy = self._legacy_key(path)
        if legacy is not None and self.destination.exists(legacy):
            return _type(self.destination.read_bytes(legacy))
        key = self._key(path)
        if self.destination.create_exclusive(key, _text(t)):
            return t
        return _type(self.destination.read_bytes(key))

    def _conflicts(
        self, field: pa.Field, where: str
    ) -> tuple[dict[str, pa.DataType], list[TypeChangeError]]:
        """The widenings a column needs, and the positions whose type cannot be widened."""
        fixed: dict[str, pa.DataType] = {}
        errors: list[TypeChangeError] = []
        for path, t in _leaves(field.name, field.type):
            if pa.types.is_null(t):
                recorded = self._recorded(path)
                if recorded is not None:
                    fixed[path] = recorded
                continue
            target = self.fixed(path, t)
            if target == t:
                continue
            if pa.types.is_int64(t) and pa.types.is_float64(target):
                fixed[path] = target
                continue
            errors.append(
                TypeChangeError(
                    f"column {path!r} is {t} in this batch, but earlier Parquet files of {where} "
                    f"have it as {target}; the files of one directory keep one type per column: "
                    "make the producer consistent, or parse the value in Spark with "
                    "from_json and a schema (and value_format=columns)",
                    column=field.name,
                    path=path,
                )
            )
        return fixed, errors

    def is_empty(self) -> bool:
        """Whether no column has a type recorded yet (no file of ours was written)."""
        return not self.destination.list(self.prefix)

    def adopt(self, schemas: Iterable[pa.Schema], *, exclude: Collection[str] = ()) -> None:
        """Record the column types of files already in the directory (another writer's),
        columns in ``exclude`` left out. Where those files disagree, int64 and float64 make
        float64 (as our widening does) and otherwise the first file's type is taken (the
        directory's readers see that conflict already)."""
        found: dict[str, pa.DataType] = {}
        for schema in schemas:
            for field in schema:
                if field.name in exclude:
                    continue
                for path, t in _leaves(field.name, field.type):
                    if pa.types.is_null(t):
                        continue
                    known = found.setdefault(path, t)
                    if pa.types.is_int64(known) and pa.types.is_float64(t):
                        found[path] = t
        for path, t in found.items():
            self.fixed(path, t)

    def refusals(
        self, table: pa.Table, where: str, *, exclude: Collection[str] = ()
    ) -> list[tuple[int, TypeChangeError]]:
        """The rows of ``table`` that hold a value of a column (``exclude`` left out) whose
        type cannot be made the directory's, each with its error, in row order; the
        other rows conform. Records the types of columns new to the directory."""
        refused: dict[int, TypeChangeError] = {}
        for field in table.schema:
            if field.name in exclude:
                continue
            _, errors = self._conflicts(field, where)
            for error in errors:
                held = rows_holding(table.column(field.name), field.name, error.path)
                for row in held.to_pylist():
                    refused.setdefault(row, error)
        return sorted(refused.items())

    def conform(self, table: pa.Table, where: str) -> pa.Table:
        """``table`` with every column in its directory type; a TypeChangeError (a
        RecordError) where it cannot be."""
        columns: dict[str, pa.ChunkedArray] = {}
        for field in table.schema:
            column = table.column(field.name)
            fixed, errors = self._conflicts(field, where)
            if errors:
                raise errors[0]
            if pa.types.is_null(field.type) and field.name not in fixed:
                continue  # null in every row, no type yet: left out of this file
            if fixed:
                column = column.cast(_substitute(field.name, field.type, fixed))
            columns[field.name] = column
        return pa.table(columns)
