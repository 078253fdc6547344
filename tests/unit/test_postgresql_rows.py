"""The postgresql sink's row-level errors without a server: which SQLSTATEs are about a row,
which rows the sink refuses itself (NUL characters, null primary keys, unroutable rows),
and refusals applied once, after the write committed."""

from __future__ import annotations

from typing import Any, cast

import psycopg2
import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.errors import DestinationError, RecordError, RetryableError
from quixsinks.core.records import RecordSchema
from quixsinks.sinks.postgresql.client import row_level, translate
from quixsinks.sinks.postgresql.modes import Refused
from quixsinks.sinks.postgresql.schema import Column, column_plan
from quixsinks.sinks.postgresql.sink import _without_null_keys
from quixsinks.sinks.postgresql.wire import nul_rows, route


class _Coded(psycopg2.DatabaseError):
    def __init__(self, code: str, text: str = "") -> None:
        super().__init__(text or f"error {code}")
        self._code = code

    @property
    def pgcode(self) -> str:  # psycopg2's attribute is read-only
        return self._code


def batch_of(table: pa.Table, value_format: str | None = None) -> SinkBatch:
    records = RecordSchema.resolve(table.schema, value_format=value_format)
    return SinkBatch(table, records, WriteContext("s", 0))


@pytest.mark.parametrize("code", ["22001", "22P02", "22003", "22021", "23502", "23514", "23505"])
def test_data_and_integrity_classes_are_row_level_on_the_write_path(code: str) -> None:
    assert row_level(_Coded(code))
    assert type(translate(_Coded(code), "pg", rows=True)) is RecordError
    # elsewhere (DDL, the driver's commit) they cannot be traced to a row: the batch fails
    error = translate(_Coded(code), "pg")
    assert type(error) is DestinationError
    assert "Row-level errors" in error.message


@pytest.mark.parametrize("code", ["08006", "57P01", "53300", "40001", "57014", "28P01", "42601"])
def test_connection_and_server_errors_are_never_row_level(code: str) -> None:
    # the message text does not matter, only the SQLSTATE
    exc = _Coded(code, "ERROR: value too long for type character varying(5)")
    assert not row_level(exc)
    assert not isinstance(translate(exc, "pg", rows=True), RecordError)


def test_a_broken_connection_without_sqlstate_is_retryable_not_row_level() -> None:
    exc = psycopg2.OperationalError("invalid input syntax for type integer")
    assert not row_level(exc)
    assert type(translate(exc, "pg", rows=True)) is RetryableError


class _Recorder:
    def __init__(self) -> None:
        self.rows: list[int] = []

    def refuse(self, row: int, error: BaseException) -> None:
        self.rows.append(row)


def test_refused_rows_are_applied_once_after_the_write_in_row_order() -> None:
    recorder = _Recorder()
    early = Refused(cast(Any, recorder), fail=False)
    later = Refused(cast(Any, recorder), fail=False)
    later(5, RecordError("x"))
    early(7, RecordError("x"))
    early(1, RecordError("x"))
    assert recorder.rows == []  # nothing until the write committed
    early.apply(later)
    assert recorder.rows == [1, 5, 7]


def test_refused_under_fail_raises_at_once() -> None:
    batch = batch_of(pa.table({"id": [1, 2]}))
    with pytest.raises(RecordError, match="row 1 of the batch's slice"):
        Refused(batch, fail=True)(1, RecordError("bad"))


def test_nul_rows_finds_every_row_with_a_nul_in_text_or_json() -> None:
    table = pa.table(
        {
            "id": [0, 1, 2, 3],
            "s": ["ok", "a\x00b", None, "fine"],
            "doc": [{"k": "x"}, {"k": "y"}, {"k": "z\x00"}, {"k": "w"}],
        }
    )
    batch = batch_of(table)
    columns = [Column("id", "bigint", "value"), Column("s", "text", "value")]
    columns.append(Column("doc", "jsonb", "value"))
    rows = pa.array([0, 1, 2, 3], pa.int64())
    assert nul_rows(batch, columns, rows) == {1: "s", 2: "doc"}
    assert nul_rows(batch, columns, pa.array([0, 3], pa.int64())) == {}


def test_route_refuses_rows_naming_no_valid_table() -> None:
    names = pa.array([b"a", None, b"\xff", b"x" * 64, b"a", b"b"], pa.binary())
    batch = batch_of(pa.table({"id": range(6), "t": names}))
    refused: list[int] = []
    routed = route(batch, "t", lambda row, error: refused.append(row))
    assert sorted(refused) == [1, 2, 3]
    assert {name: rows.to_pylist() for name, rows in routed} == {"a": [0, 4], "b": [5]}


def test_rows_with_a_null_primary_key_are_refused_and_left_out() -> None:
    table = pa.table({"value": ['{"id": 1}', '{"id": null}', '{"id": 3}', '{"v": 4}']})
    batch = batch_of(table, "json")
    columns = column_plan(batch.values().schema, None, include_metadata=False)
    recorder = _Recorder()
    refused = Refused(cast(Any, recorder), fail=False)
    targets = _without_null_keys(batch, columns, ("id",), [("t", None)], refused)
    assert [(name, rows.to_pylist()) for name, rows in targets if rows is not None] == [
        ("t", [0, 2])
    ]
    assert [row for row, _ in refused.rows] == [1, 3]
    assert "primary key column 'id' is null in row 1" in str(refused.rows[0][1])
