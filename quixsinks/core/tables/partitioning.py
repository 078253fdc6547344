"""Partition specs of the table layer, and ``partition_by``: a small text syntax for them.

``day(ts), bucket(16, id), truncate(4, name), identity(city), city`` is parsed into
:class:`PartitionField` items (source column, transform, partition field name). Pure
Python: the transforms are built by :func:`to_transform` where pyiceberg is present, and
:func:`add_partition_fields` adds them to a new table's spec.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from quixsinks.core.errors import OptionError

__all__ = ["PartitionField", "add_partition_fields", "parse_partition_by", "to_transform"]

_NO_ARG = ("identity", "year", "month", "day", "hour", "void")
_ONE_ARG = ("bucket", "truncate")
_ITEM = re.compile(r"^\s*(?:(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?([^(),]+?)\s*\)|([^(),]+?))\s*$")


@dataclass(frozen=True)
class PartitionField:
    """One partition field: ``transform(source)`` (with ``width`` for bucket/truncate)."""

    source: str
    transform: str
    width: int | None = None

    @property
    def name(self) -> str:
        """The partition field's name, as Iceberg's Spark integration names them."""
        if self.transform == "identity":
            return self.source
        if self.width is not None:
            return f"{self.source}_{self.transform}_{self.width}"
        return f"{self.source}_{self.transform}"

    def __str__(self) -> str:
        if self.width is not None:
            return f"{self.transform}({self.width}, {self.source})"
        return f"{self.transform}({self.source})"


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return items


def parse_partition_by(text: str) -> tuple[PartitionField, ...]:
    """Parse ``partition_by``; OptionError naming the bad item and the syntax."""

    def bad(item: str, why: str) -> OptionError:
        return OptionError(
            f"iceberg: 'partition_by' item {item.strip()!r}: {why}. Write comma-separated "
            "transforms such as day(ts), bucket(16, id), truncate(4, name), identity(city) "
            "or a plain column name",
            option="partition_by",
            value=text,
        )

    fields: list[PartitionField] = []
    for item in _split(text):
        if not item.strip():
            raise bad(item, "empty item")
        match = _ITEM.match(item)
        if match is None:
            raise bad(item, "not a transform")
        name, width, source, plain = match.groups()
        if plain is not None:
            fields.append(PartitionField(plain.strip(), "identity"))
            continue
        name = name.lower()
        if name in _NO_ARG:
            if width is not None:
                raise bad(item, f"{name}() takes only a column")
            fields.append(PartitionField(source.strip(), name))
        elif name in _ONE_ARG:
            if width is None or int(width) < 1:
                raise bad(item, f"{name}() needs a positive width first, e.g. {name}(16, col)")
            fields.append(PartitionField(source.strip(), name, int(width)))
        else:
            raise bad(item, f"unknown transform {name!r} (known: {', '.join(_NO_ARG + _ONE_ARG)})")
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise OptionError(
            f"iceberg: 'partition_by' {text!r} names a partition field twice",
            option="partition_by",
            value=text,
        )
    return tuple(fields)


def to_transform(field: PartitionField) -> Any:
    """The pyiceberg transform of a parsed field."""
    from pyiceberg import transforms as t

    simple = {
        "identity": t.IdentityTransform,
        "year": t.YearTransform,
        "month": t.MonthTransform,
        "day": t.DayTransform,
        "hour": t.HourTransform,
        "void": t.VoidTransform,
    }
    if field.transform == "bucket":
        return t.BucketTransform(num_buckets=field.width or 1)
    if field.transform == "truncate":
        return t.TruncateTransform(width=field.width or 1)
    return simple[field.transform]()


def add_partition_fields(tx: Any, fields: Iterable[PartitionField]) -> None:
    """Add ``fields`` to the partition spec of a table being created in transaction ``tx``."""
    with tx.update_spec() as spec:
        for pf in fields:
            spec.add_field(pf.source, to_transform(pf), pf.name)
