"""One type per column across a directory's Parquet files (quixsinks.core.column_types)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from quixsinks.core.column_types import ColumnTypes
from quixsinks.core.destinations import LocalDestination
from quixsinks.core.errors import RecordError


@pytest.fixture
def types(tmp_path: Path) -> ColumnTypes:
    return ColumnTypes(LocalDestination(str(tmp_path)), "_quixsinks/columns")


def test_the_first_file_fixes_a_type_and_a_later_other_type_is_an_error(
    types: ColumnTypes,
) -> None:
    types.conform(pa.table({"a": [1]}), "out")
    with pytest.raises(RecordError, match="'a' is string in this batch, but earlier") as error:
        types.conform(pa.table({"a": ["x"]}), "out")
    assert error.value.column == "a"


def test_a_nested_field_keeps_its_type(types: ColumnTypes) -> None:
    types.conform(pa.table({"s": [{"b": [1]}]}), "out")
    with pytest.raises(RecordError, match=r"'s\.b\[\]' is string"):
        types.conform(pa.table({"s": [{"b": ["x"]}]}), "out")


def test_new_keys_and_nested_fields_may_appear(types: ColumnTypes) -> None:
    types.conform(pa.table({"s": [{"b": 1}]}), "out")
    later = types.conform(pa.table({"s": [{"b": 2, "c": "x"}], "new": [True]}), "out")
    assert later.to_pylist() == [{"s": {"b": 2, "c": "x"}, "new": True}]


def test_integers_widen_into_a_float_column(types: ColumnTypes) -> None:
    types.conform(pa.table({"a": [1.5], "l": [[0.5]]}), "out")
    later = types.conform(pa.table({"a": [2], "l": [[3]]}), "out")
    assert later.schema == pa.schema([("a", pa.float64()), ("l", pa.list_(pa.float64()))])


def test_a_float_in_an_integer_column_is_an_error(types: ColumnTypes) -> None:
    types.conform(pa.table({"a": [1]}), "out")
    with pytest.raises(RecordError, match="'a' is double"):
        types.conform(pa.table({"a": [2.5]}), "out")


def test_null_columns_take_the_fixed_type_or_are_left_out(types: ColumnTypes) -> None:
    first = types.conform(pa.table({"a": pa.nulls(1), "b": [1]}), "out")
    assert first.column_names == ["b"]
    later = types.conform(pa.table({"b": pa.nulls(2)}), "out")
    assert later.schema.field("b").type == pa.int64()


def test_adopted_types_become_the_directorys(tmp_path: Path) -> None:
    types = ColumnTypes(LocalDestination(str(tmp_path)), "_quixsinks/columns")
    assert types.is_empty()
    quix_files = [
        pa.schema([("_key", pa.string()), ("temp", pa.int64()), ("site", pa.string())]),
        pa.schema([("temp", pa.float64()), ("obj", pa.struct([("x", pa.int64())]))]),
        pa.schema([("site", pa.int64()), ("gone", pa.null())]),
    ]
    types.adopt(quix_files, exclude=("_key",))
    fresh = ColumnTypes(LocalDestination(str(tmp_path)), "_quixsinks/columns")
    assert not fresh.is_empty()
    assert fresh.fixed("temp", pa.int64()) == pa.float64()  # int64 and float64: float64
    assert fresh.fixed("site", pa.int64()) == pa.string()  # a conflict: the first file's
    assert fresh.fixed("obj.x", pa.float64()) == pa.int64()
    assert fresh.fixed("gone", pa.string()) == pa.string()  # null: no type taken
    assert fresh.fixed("_key", pa.binary()) == pa.binary()  # excluded
