"""Pure logic of the row-level refusals of influxdb3, influxdb1 and iceberg: which lines a
server's answer names, which rows a table's required columns refuse."""

from __future__ import annotations

import json
import pickle
from types import SimpleNamespace

import pyarrow as pa
import pytest

from quixsinks.core.errors import DestinationError, RecordError
from quixsinks.sinks.influxdb1.client import Answer, numbered_parse_errors, translate
from quixsinks.sinks.influxdb3 import client as influxdb3_client
from quixsinks.sinks.influxdb3.points import _multiline
from quixsinks.sinks.influxdb3.wire import LineProtocol, LinesRefused, field_pieces

BODY = b"m v=1 1\nm v=2 2\nm v=3 3\n"


def test_a_1x_parse_error_names_the_line_by_its_text() -> None:
    message = "partial write: unable to parse 'm v=2 2': invalid field format dropped=1"
    assert numbered_parse_errors(message, BODY) == {2: "invalid field format"}


def test_a_1x_parse_error_is_found_behind_the_errors_own_prefix() -> None:
    """What the sink passes: the error's message, which starts with where it happened."""
    message = (
        "http://127.0.0.1:8086 database d: HTTP 400: partial write: unable to parse "
        "'m v=2 2': invalid field format dropped=1"
    )
    assert numbered_parse_errors(message, BODY) == {2: "invalid field format"}


def test_lines_holding_a_newline_inside_a_string_field_are_told_apart() -> None:
    """A string field may hold a raw newline: the server's line numbers then no longer
    match the rows, and the sink isolates the rows by halving instead."""
    lines = pa.array(["m v=1 1\n", 'm s="a\nb" 2\n', "m v=3 3\n"])
    assert not _multiline(lines, [0, 2])
    assert _multiline(lines, [0, 1, 2])


def test_every_1x_parse_error_must_be_found_to_name_lines() -> None:
    message = "unable to parse 'm v=2 2': bad\nunable to parse 'other 9': bad"
    assert numbered_parse_errors(message, BODY) is None


def test_a_1x_field_type_conflict_names_no_line() -> None:
    message = (
        'partial write: field type conflict: input field "v" on measurement "m" is type '
        "string, already exists as type float dropped=1"
    )
    assert numbered_parse_errors(message, BODY) is None
    assert type(translate(Answer(400, message), "db")) is RecordError


def test_a_1x_cardinality_limit_is_not_row_level() -> None:
    message = "partial write: max-series-per-database limit exceeded: (1000) dropped=3"
    error = translate(Answer(400, message), "db")
    assert isinstance(error, DestinationError)


def _influxdb3_error(status: int, body: object) -> Exception:
    response = SimpleNamespace(status=status, data=json.dumps(body).encode())
    error = Exception("refused")
    error.response = response  # type: ignore[attr-defined]
    return error


def test_influxdb3_lines_numbered_by_the_server_are_lines_refused() -> None:
    body = {
        "error": "partial write of line protocol occurred",
        "data": [{"line_number": 2, "error_message": "bad type", "original_line": "m v=2 2"}],
    }
    error = influxdb3_client.translate(_influxdb3_error(400, body), "db", retention_ok=True)
    assert isinstance(error, LinesRefused)
    assert error.lines == {2: "bad type"}


def test_influxdb3_a_refusal_without_line_numbers_is_for_the_whole_request() -> None:
    body = {"error": "partial write of line protocol occurred", "data": [{"error_message": "x"}]}
    error = influxdb3_client.translate(_influxdb3_error(400, body), "db", retention_ok=True)
    assert type(error) is RecordError


def test_influxdb3_a_422_is_a_retention_skip_only_when_it_says_retention() -> None:
    """InfluxDB 2.x answers 422 for other refused points too (a field type conflict):
    those are refusals for the rows, never points skipped as if out of retention."""
    retention = _influxdb3_error(422, {"error": "points beyond retention policy dropped=3"})
    assert influxdb3_client.translate(retention, "db", retention_ok=True) is None
    conflict = _influxdb3_error(422, {"error": "field type conflict: input field v"})
    assert type(influxdb3_client.translate(conflict, "db", retention_ok=True)) is RecordError


@pytest.mark.parametrize("status", [401, 429, 500, 503])
def test_influxdb3_server_and_auth_errors_are_never_row_level(status: int) -> None:
    error = influxdb3_client.translate(_influxdb3_error(status, {}), "db", retention_ok=True)
    assert not isinstance(error, RecordError)


def test_lines_refused_survives_pickling() -> None:
    error = pickle.loads(pickle.dumps(LinesRefused("refused", lines={3: "why"})))
    assert isinstance(error, LinesRefused)
    assert error.lines == {3: "why"}


def test_a_null_measurement_is_refused_for_its_row() -> None:
    protocol = LineProtocol(measurement=None, measurement_column="m", tags=(), fields=("v",))
    columns = {"m": pa.array(["a", None, "c"]), "v": pa.array([1, 2, 3])}
    with pytest.raises(RecordError) as raised:
        protocol.lines(columns, pa.array([1, 2, 3], pa.int64()), 3)
    assert raised.value.row == 1


def test_a_nested_field_is_refused_for_its_first_row_with_a_value() -> None:
    column = pa.array([None, {"x": 1}], pa.struct([("x", pa.int64())]))
    with pytest.raises(RecordError) as raised:
        field_pieces(column, ints_to_floats=False, invalid_floats="error", name="obj")
    assert raised.value.row == 1


def test_a_nested_field_null_in_every_row_is_left_out() -> None:
    column = pa.array([None, None], pa.struct([("x", pa.int64())]))
    [piece] = field_pieces(column, ints_to_floats=False, invalid_floats="error", name="obj")
    assert piece.null_count == 2


def test_iceberg_required_columns_refuse_the_rows_without_a_value() -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from quixsinks.sinks.iceberg.wire import keeping_required, required_nulls

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", LongType(), required=False),
        NestedField(3, "n", LongType(), required=True),
    )
    rows = pa.table({"id": [1, None, 3], "v": [None, None, 1], "n": [1, 2, None]})
    assert required_nulls(rows, schema) == {1: "id", 2: "n"}
    assert required_nulls(rows.drop_columns(["n"]), schema) == {0: "n", 1: "id", 2: "n"}
    kept = keeping_required(rows.schema, schema)
    assert [f.nullable for f in kept] == [False, True, False]
