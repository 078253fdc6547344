"""Specification of the record model (quixsinks.core.records): which column plays which part."""

from __future__ import annotations

import datetime as dt
import json
import pickle
from typing import Any

import pyarrow as pa
import pytest

from quixsinks.core.arrow import floor_time
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.records import RecordSchema, parse_json_objects

UTC = dt.UTC
KAFKA_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)
HEADERS = pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))


def schema(**types: pa.DataType) -> pa.Schema:
    return pa.schema(list(types.items()))


def resolve_error(schema: pa.Schema, **options: Any) -> OptionError:
    with pytest.raises(OptionError) as info:
        RecordSchema.resolve(schema, **options)
    return info.value


def parse(*rows: Any, type: pa.DataType | None = None) -> list[dict[str, Any]]:
    column = pa.array(rows, type or pa.string())
    return parse_json_objects(column, "value").to_pylist()  # type: ignore[no-any-return]


def parse_error(*rows: Any) -> RecordError:
    with pytest.raises(RecordError) as info:
        parse_json_objects(pa.array(rows, pa.string()), "value")
    return info.value


# ----------------------------------------------------------------------------- Kafka frames


def test_kafka_schema_is_recognised() -> None:
    assert RecordSchema.is_kafka(KAFKA_SCHEMA)


def test_kafka_columns_take_their_roles() -> None:
    records = RecordSchema.resolve(KAFKA_SCHEMA)
    assert records == RecordSchema(
        key="key",
        timestamp="timestamp",
        values=("value",),
        value_json=True,
        topic="topic",
        partition="partition",
        offset="offset",
        headers=None,
    )


def test_kafka_headers_are_metadata() -> None:
    records = RecordSchema.resolve(KAFKA_SCHEMA.append(HEADERS))
    assert (records.headers, records.values) == ("headers", ("value",))
    assert records.metadata_columns == ("topic", "partition", "offset", "headers")


def test_kafka_value_can_be_written_unparsed() -> None:
    records = RecordSchema.resolve(KAFKA_SCHEMA, value_format="columns")
    assert (records.values, records.value_json) == (("value",), False)


def test_kafka_frame_with_extra_columns_keeps_them_as_values_unparsed() -> None:
    records = RecordSchema.resolve(KAFKA_SCHEMA.append(pa.field("extra", pa.string())))
    assert (records.values, records.value_json) == (("value", "extra"), False)


def test_frame_missing_a_kafka_column_is_not_kafka() -> None:
    assert not RecordSchema.is_kafka(KAFKA_SCHEMA.remove(KAFKA_SCHEMA.get_field_index("offset")))


# ----------------------------------------------------------------------------- generic frames


def test_generic_frame_uses_key_and_timestamp_columns_by_default() -> None:
    records = RecordSchema.resolve(
        schema(id=pa.int64(), key=pa.string(), timestamp=pa.timestamp("ms"), a=pa.float64())
    )
    assert (records.key, records.timestamp, records.values) == ("key", "timestamp", ("id", "a"))
    assert (records.value_json, records.metadata_columns) == (False, ())


def test_generic_frame_without_a_key_column_has_no_key() -> None:
    assert RecordSchema.resolve(schema(a=pa.int64())).key is None


@pytest.mark.parametrize("kind", [pa.int64(), pa.int32(), pa.timestamp("us", tz="UTC")])
def test_timestamp_column_of_time_or_integer_type_is_the_timestamp(kind: pa.DataType) -> None:
    assert RecordSchema.resolve(schema(timestamp=kind, a=pa.int64())).timestamp == "timestamp"


@pytest.mark.parametrize("kind", [pa.string(), pa.float64(), pa.date32()])
def test_timestamp_column_of_another_type_is_a_value(kind: pa.DataType) -> None:
    records = RecordSchema.resolve(schema(timestamp=kind, a=pa.int64()))
    assert (records.timestamp, records.values) == (None, ("timestamp", "a"))


def test_kafka_like_columns_of_a_generic_frame_are_values() -> None:
    records = RecordSchema.resolve(schema(topic=pa.string(), offset=pa.int64()))
    assert (records.values, records.topic, records.offset) == (("topic", "offset"), None, None)


@pytest.mark.parametrize("none", ["none", "None", "NONE"])
def test_none_means_no_key_and_no_timestamp(none: str) -> None:
    records = RecordSchema.resolve(
        schema(key=pa.string(), timestamp=pa.int64(), a=pa.int64()),
        key_column=none,
        timestamp_column=none,
    )
    assert (records.key, records.timestamp) == (None, None)
    assert records.values == ("key", "timestamp", "a")


def test_explicit_key_and_timestamp_columns() -> None:
    records = RecordSchema.resolve(
        schema(id=pa.string(), at=pa.timestamp("us"), a=pa.int64()),
        key_column="id",
        timestamp_column="at",
    )
    assert (records.key, records.timestamp, records.values) == ("id", "at", ("a",))


def test_explicit_value_columns_keep_the_given_order() -> None:
    records = RecordSchema.resolve(
        schema(a=pa.int64(), b=pa.int64(), c=pa.int64()), value_columns=("c", "a")
    )
    assert records.values == ("c", "a")


def test_key_column_the_frame_lacks_lists_its_columns() -> None:
    error = resolve_error(schema(a=pa.int64(), b=pa.int64()), key_column="id")
    assert (error.option, error.value) == ("key_column", "id")
    assert list(error.allowed or ()) == ["a", "b"]


def test_timestamp_column_the_frame_lacks_is_an_error() -> None:
    error = resolve_error(schema(a=pa.int64()), timestamp_column="at")
    assert (error.option, error.value) == ("timestamp_column", "at")


def test_value_column_the_frame_lacks_is_an_error() -> None:
    error = resolve_error(schema(a=pa.int64()), value_columns=("a", "b"))
    assert (error.option, error.value) == ("value_columns", "b")


def test_string_timestamp_column_is_an_error() -> None:
    error = resolve_error(schema(at=pa.string(), a=pa.int64()), timestamp_column="at")
    assert (error.option, error.value) == ("timestamp_column", "at")


def test_json_value_format_needs_a_single_value_column() -> None:
    error = resolve_error(schema(a=pa.string(), b=pa.string()), value_format="json")
    assert error.option == "value_format"


def test_json_value_format_needs_a_text_column() -> None:
    error = resolve_error(schema(a=pa.int64()), value_format="json")
    assert error.option == "value_format"


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string(), pa.binary()])
def test_json_value_format_on_a_generic_text_column(kind: pa.DataType) -> None:
    records = RecordSchema.resolve(schema(payload=kind), value_format="json")
    assert (records.values, records.value_json) == (("payload",), True)


def test_frame_with_no_value_column_left_is_an_error() -> None:
    error = resolve_error(schema(key=pa.string(), timestamp=pa.int64()))
    assert error.option == "value_columns"


def test_record_schema_pickles() -> None:
    records = RecordSchema.resolve(KAFKA_SCHEMA.append(HEADERS))
    assert pickle.loads(pickle.dumps(records)) == records


# ----------------------------------------------------------------------------- column views


def timestamps_ms(array: pa.Array) -> list[int | None]:
    table = pa.table({"timestamp": array, "v": pa.nulls(len(array), pa.int64())})
    return RecordSchema.resolve(table.schema).timestamp_ms(table).to_pylist()  # type: ignore[no-any-return]


@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Paris"])
def test_microsecond_timestamps_floor_to_milliseconds(tz: str | None) -> None:
    stamps = pa.array([1_700_000_000_123_999, 1_700_000_000_123_000, None], pa.timestamp("us", tz))
    assert timestamps_ms(stamps) == [1_700_000_000_123, 1_700_000_000_123, None]


@pytest.mark.parametrize(
    ("unit", "value", "ms"),
    [
        ("s", 1_700_000_000, 1_700_000_000_000),
        ("ms", 5, 5),
        ("ns", 1_700_000_000_123_456_789, 1_700_000_000_123),
    ],
)
def test_timestamps_of_every_unit_become_milliseconds(unit: str, value: int, ms: int) -> None:
    assert timestamps_ms(pa.array([value], pa.timestamp(unit))) == [ms]


@pytest.mark.parametrize("unit", ["us", "ns"])
def test_times_in_a_daylight_saving_fall_back_hour_floor_in_utc(unit: str) -> None:
    """Spark hands Python timestamps in the session's zone; 02:30 on 2024-10-27 happens
    twice in Berlin. Flooring in local time raised "Local time is ambiguous" for every
    row of that hour, a task that failed on each replay."""
    first = 1_729_989_000_123_456  # 00:30:00.123456 UTC = 02:30 CEST
    second = first + 3_600_000_000  # 01:30 UTC = 02:30 CET
    scale = 1000 if unit == "ns" else 1
    stamps = pa.array([first * scale, second * scale], pa.timestamp(unit, "Europe/Berlin"))
    assert timestamps_ms(stamps) == [first // 1000, second // 1000]
    floored = floor_time(stamps, "s")
    assert floored.type == pa.timestamp("s", "Europe/Berlin")
    assert floored.cast(pa.int64()).to_pylist() == [first // 10**6, second // 10**6]


def test_timestamps_before_1970_floor_to_milliseconds() -> None:
    assert timestamps_ms(pa.array([-1, -1_500], pa.timestamp("us", "UTC"))) == [-1, -2]


@pytest.mark.parametrize("kind", [pa.int64(), pa.int32()])
def test_integer_timestamps_pass_through_as_milliseconds(kind: pa.DataType) -> None:
    result = timestamps_ms(pa.array([1_700_000_000, None], kind))
    assert result == [1_700_000_000, None]


def test_timestamp_ms_is_int64() -> None:
    table = pa.table({"timestamp": pa.array([1], pa.int32()), "v": [1]})
    assert RecordSchema.resolve(table.schema).timestamp_ms(table).type == pa.int64()


def test_no_timestamp_column_gives_null_milliseconds() -> None:
    table = pa.table({"v": [1, 2]})
    array = RecordSchema.resolve(table.schema).timestamp_ms(table)
    assert (array.type, array.to_pylist()) == (pa.int64(), [None, None])


def test_no_key_column_gives_null_keys() -> None:
    table = pa.table({"v": [1, 2]})
    assert RecordSchema.resolve(table.schema).key_array(table).to_pylist() == [None, None]


def test_value_table_selects_the_value_columns() -> None:
    table = pa.table({"key": ["k"], "a": [1], "b": ["x"]})
    records = RecordSchema.resolve(table.schema, value_columns=("b",))
    assert records.value_table(table).to_pylist() == [{"b": "x"}]


def test_value_table_parses_a_kafka_value() -> None:
    table = pa.table({"v": pa.array([b'{"a": 1}'], pa.binary())})
    records = RecordSchema.resolve(table.schema, value_format="json")
    assert records.value_table(table).to_pylist() == [{"a": 1}]


# ----------------------------------------------------------------------------- JSON values


def test_json_objects_become_columns() -> None:
    rows = parse('{"a": 1, "b": "x", "n": {"l": [1, 2]}}', '{"a": 2, "b": null, "n": null}')
    assert rows == [{"a": 1, "b": "x", "n": {"l": [1, 2]}}, {"a": 2, "b": None, "n": None}]


def test_json_bytes_are_parsed() -> None:
    assert parse(b'{"a": 1}', type=pa.binary()) == [{"a": 1}]


def test_json_fields_missing_from_a_row_are_null() -> None:
    assert parse('{"a": 1}', '{"b": 2}') == [{"a": 1, "b": None}, {"a": None, "b": 2}]


def test_null_json_rows_give_null_fields() -> None:
    assert parse('{"a": 1}', None) == [{"a": 1}, {"a": None}]


def test_empty_json_objects_keep_their_rows() -> None:
    table = parse_json_objects(pa.array(["{}", "{}"]), "value")
    assert (table.num_rows, table.num_columns) == (2, 0)


def test_all_null_json_rows_keep_their_rows() -> None:
    assert parse_json_objects(pa.array([None, None], pa.binary()), "value").num_rows == 2


def test_escaped_newline_in_a_json_string_is_a_newline() -> None:
    assert parse('{"s": "line1\\nline2"}', '{"s": "x"}') == [{"s": "line1\nline2"}, {"s": "x"}]


def test_raw_newline_between_json_tokens_still_parses() -> None:
    assert parse('{\n  "a": 1,\n  "b": "x"\n}', '{"a": 2}') == [
        {"a": 1, "b": "x"},
        {"a": 2, "b": None},
    ]


def test_raw_newline_inside_a_json_string_is_invalid_json() -> None:
    error = parse_error('{"a": 1}', '{"s": "line1\nline2"}')
    assert (error.column, error.row) == ("value", 1)


@pytest.mark.parametrize("row", ["[1, 2]", "42", '"text"', "true"])
def test_json_row_that_is_not_an_object_is_a_record_error(row: str) -> None:
    error = parse_error('{"a": 1}', row)
    assert (error.column, error.row) == ("value", 1)


def outcome(*rows: str) -> object:
    try:
        return parse(*rows)[-1]
    except RecordError as error:
        return ("RecordError", error.row)


def test_json_null_row_gets_the_same_verdict_whatever_the_other_rows() -> None:
    assert outcome('{"a": 1}', "null") == outcome('{\n"a": 1}', "null")


@pytest.mark.parametrize("row", ["{not json", "", "{'a': 1}", '{"a": 1} trailing'])
def test_invalid_json_row_is_a_record_error(row: str) -> None:
    error = parse_error('{"a": 1}', '{"a": 2}', row)
    assert (error.column, error.row) == ("value", 2)


def test_two_objects_in_one_row_are_a_record_error_even_beside_an_empty_row() -> None:
    error = parse_error('{"a": 1}{"a": 2}', "")
    assert error.row in (0, 1)


def test_json_strings_that_look_like_dates_stay_strings() -> None:
    assert parse('{"d": "2024-01-01", "t": "2024-01-01T10:00:00Z"}') == [
        {"d": "2024-01-01", "t": "2024-01-01T10:00:00Z"}
    ]


def test_json_field_of_changing_type_is_a_record_error() -> None:
    error = parse_error('{"a": 1}', '{"a": "x"}')
    assert error.column == "value"


# ----------------------------------------------------------------------------- JSON typing
# (the union of all rows' keys and types; see "The record model" in docs/index.md)

#: a row of several lines: the batch takes the exact per-row parser
MULTI_LINE = '{\n"z": 0}'


@pytest.mark.parametrize("first", [None, "null", "{}"])
def test_a_row_without_values_first_drops_no_key(first: str | None) -> None:
    rows = parse(first, '{"a": 1, "b": "x"}', MULTI_LINE)
    assert rows[1] == {"a": 1, "b": "x", "z": None}
    assert rows[0] == {"a": None, "b": None, "z": None}


@pytest.mark.parametrize("extra", [(), (MULTI_LINE,)], ids=["fast", "exact"])
def test_a_key_first_seen_in_a_later_row_is_kept(extra: tuple[str, ...]) -> None:
    rows = parse('{"a": 1}', '{"a": 2, "late": {"x": [1]}}', *extra)
    assert [r["late"] for r in rows[:2]] == [None, {"x": [1]}]


@pytest.mark.parametrize("extra", [(), (MULTI_LINE,)], ids=["fast", "exact"])
def test_integers_and_floats_in_one_key_widen_to_float64(extra: tuple[str, ...]) -> None:
    table = parse_json_objects(pa.array(['{"a": 1}', '{"a": 2.5}', *extra]), "value")
    assert table.schema.field("a").type == pa.float64()
    assert table.column("a").to_pylist()[:2] == [1.0, 2.5]


@pytest.mark.parametrize("extra", [(), (MULTI_LINE,)], ids=["fast", "exact"])
def test_date_like_strings_stay_strings_at_every_level(extra: tuple[str, ...]) -> None:
    row = '{"d": "2024-01-01 10:00:00", "s": {"t": "2024-01-01"}, "l": ["2024-01-01T00:00Z"]}'
    table = parse_json_objects(pa.array([row, row, *extra]), "value")
    assert table.schema.field("d").type == pa.string()
    assert table.to_pylist()[0] == {
        "d": "2024-01-01 10:00:00",
        "s": {"t": "2024-01-01"},
        "l": ["2024-01-01T00:00Z"],
        **({"z": None} if extra else {}),
    }


@pytest.mark.parametrize(
    ("rows", "key", "types"),
    [
        (['{"a": 1}', '{"a": "x"}'], "a", ("a string", "an integer")),
        (['{"a": {"b": 1}}', '{"a": 3}'], "a", ("an integer", "an object")),
        (['{"a": true}', '{"a": 1}'], "a", ("an integer", "a boolean")),
        (['{"s": {"b": [1]}}', '{"s": {"b": ["x"]}}'], "s.b[]", ("a string", "an integer")),
    ],
)
def test_a_key_of_two_types_is_a_record_error_naming_key_row_and_types(
    rows: list[str], key: str, types: tuple[str, str]
) -> None:
    error = parse_error('{"other": 0}', *rows)
    assert (error.column, error.row) == ("value", 2)
    assert f"key {key!r} holds {types[0]}, but row 1 has {types[1]}" in error.message


@pytest.mark.parametrize("number", ["9223372036854775808", "-9223372036854775809", "10" * 12])
def test_an_integer_beyond_64_bits_is_a_record_error_not_a_float(number: str) -> None:
    error = parse_error('{"a": 1}', '{"a": ' + number + "}")
    assert error.row == 1
    assert "does not fit in 64 bits" in error.message


def test_the_largest_64_bit_integers_are_exact() -> None:
    assert parse('{"a": 9223372036854775807}', '{"a": -9223372036854775808}') == [
        {"a": 2**63 - 1},
        {"a": -(2**63)},
    ]


def test_a_number_too_large_for_a_double_is_a_record_error() -> None:
    assert parse_error('{"a": 1.5}', '{"a": 1e400}').row == 1


@pytest.mark.parametrize("extra", [(), (MULTI_LINE,)], ids=["fast", "exact"])
def test_nan_and_infinities_as_python_writes_them_are_floats(extra: tuple[str, ...]) -> None:
    rows = parse('{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', *extra)
    values = [r["a"] for r in rows[:3]]
    assert values[0] != values[0]
    assert values[1:] == [float("inf"), float("-inf")]


def test_a_key_that_is_null_in_every_row_is_a_null_column() -> None:
    table = parse_json_objects(pa.array(['{"a": null}', "{}"]), "value")
    assert (table.schema.field("a").type, table.num_rows) == (pa.null(), 2)


def test_fast_and_exact_parsers_agree() -> None:
    rows = [
        '{"a": 1, "s": {"x": 1.5, "y": [1, 2]}, "t": "2024-01-01"}',
        None,
        '{"b": [[1], [2.5]], "s": {"z": "q"}, "a": null}',
        '{"a": 3, "e": {}, "l": []}',
    ]
    fast = parse_json_objects(pa.array(rows), "value")
    exact = parse_json_objects(pa.array([*rows, MULTI_LINE]), "value").slice(0, len(rows))
    assert fast.schema == exact.schema.remove(exact.schema.get_field_index("z"))
    assert fast.to_pylist() == exact.drop_columns(["z"]).to_pylist()


@pytest.mark.parametrize(
    "row", ['{"a": [null, 1, null, 2]}', '{"a": [null, {"x": 1}]}', '{"a": [null, null]}']
)
def test_arrays_starting_with_nulls_keep_their_elements_in_place(row: str) -> None:
    assert parse(row) == [json.loads(row)]
