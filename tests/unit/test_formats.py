"""Specification of the file formats (quixsinks.core.formats): what a reader gets back."""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import gzip
import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.errors import InvalidFormatError, RecordError
from quixsinks.core.formats import (
    CSV_DIALECTS,
    FORMAT_NAMES,
    PARQUET_COMPRESSIONS,
    CSVFormat,
    JSONFormat,
    ParquetFormat,
    json_column,
    json_objects,
    resolve_format,
)
from quixsinks.core.records import RecordSchema

UTC = dt.UTC
MOMENT = dt.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
MOMENT_MS = 1714566615123
PYTHON_DIALECTS: dict[str, type[csv.Dialect]] = {
    "excel": csv.excel,
    "excel-tab": csv.excel_tab,
    "unix": csv.unix_dialect,
}


def make_batch(table: pa.Table, **resolve: Any) -> SinkBatch:
    return SinkBatch(
        table, RecordSchema.resolve(table.schema, **resolve), WriteContext("sink", 1, 0, "a0")
    )


def values_batch(array: pa.Array, name: str = "x") -> SinkBatch:
    return make_batch(pa.table({name: array}))


def json_lines(data: bytes) -> list[dict[str, Any]]:
    # split on b"\n" only: str.splitlines would also split on U+2028 inside a value
    assert data == b"" or data.endswith(b"\n")
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def json_values(array: pa.Array) -> list[Any]:
    return [line["_value"]["x"] for line in json_lines(JSONFormat().serialize(values_batch(array)))]


def json_keys(keys: pa.Array) -> list[Any]:
    table = pa.table({"key": keys, "v": pa.array([1] * len(keys))})
    return [line["_key"] for line in json_lines(JSONFormat().serialize(make_batch(table)))]


def kafka_table(values: list[bytes | None], keys: list[bytes | None] | None = None) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "key": pa.array(
                keys if keys is not None else [b"k%d" % i for i in range(n)], pa.binary()
            ),
            "value": pa.array(values, pa.binary()),
            "topic": ["orders"] * n,
            "partition": pa.array([2] * n, pa.int32()),
            "offset": pa.array(range(100, 100 + n), pa.int64()),
            "timestamp": pa.array([MOMENT] * n, pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * n, pa.int32()),
        }
    )


def csv_rows(data: bytes, dialect: str = "excel") -> list[list[str]]:
    text = io.StringIO(data.decode("utf-8"), newline="")
    return list(csv.reader(text, dialect=PYTHON_DIALECTS[dialect]))


# ============================================================================= JSON


def test_json_line_has_timestamp_key_and_value() -> None:
    table = pa.table(
        {
            "key": ["k1"],
            "timestamp": pa.array([MOMENT], pa.timestamp("us", "UTC")),
            "a": [1],
            "b": ["x"],
        }
    )
    assert json_lines(JSONFormat().serialize(make_batch(table))) == [
        {"_timestamp": MOMENT_MS, "_key": "k1", "_value": {"a": 1, "b": "x"}}
    ]


def test_json_writes_one_line_per_row() -> None:
    data = JSONFormat().serialize(values_batch(pa.array(["a\nb", "c\rd", "e\u2028f"])))
    assert data.count(b"\n") == 3


def test_json_of_an_empty_batch_is_empty() -> None:
    assert JSONFormat().serialize(values_batch(pa.array([], pa.int64()))) == b""


TRICKY_STRINGS = [
    'say "hi"',
    "back\\slash",
    "line\nbreak",
    "carriage\rreturn",
    "tab\there",
    "ctrl\x01char",
    "nul\x00byte",
    "bell\x07 and \x1f",
    "\b\f",
    "emoji 🎉 and ünïcödé",
    "",
    "line sep \u2028",
    'mix "\\\n\t\x01',
    "/slash/",
    "del\x7f",
]


@pytest.mark.parametrize("text", TRICKY_STRINGS)
def test_json_string_value_round_trips(text: str) -> None:
    assert json_values(pa.array([text, "plain"])) == [text, "plain"]


@given(st.lists(st.one_of(st.none(), st.text()), max_size=8), st.integers(0, 3))
def test_json_text_of_any_strings_and_slices_parses_back(texts: list[str | None], cut: int) -> None:
    # the escape check scans the values' bytes: sliced arrays and null slots included
    column = pa.array(texts, pa.string()).slice(min(cut, len(texts)))
    assert [json.loads(v) for v in json_column(column).to_pylist()] == column.to_pylist()


def test_json_null_value_is_null() -> None:
    assert json_values(pa.array(["a", None])) == ["a", None]


@pytest.mark.parametrize("kind", [pa.int8(), pa.int32(), pa.int64(), pa.uint64()])
def test_json_integers_are_exact(kind: pa.DataType) -> None:
    info = {
        pa.int8(): (-128, 127),
        pa.int32(): (-(2**31), 2**31 - 1),
        pa.int64(): (-(2**63), 2**63 - 1),
        pa.uint64(): (0, 2**64 - 1),
    }[kind]
    assert json_values(pa.array([*info, None], kind)) == [*info, None]


def test_json_floats_round_trip() -> None:
    values = [1.5, 0.1, -2.25e-10, 1e20, 123456789.123456789, -0.0]
    assert json_values(pa.array(values, pa.float64())) == values


def test_json_non_finite_floats_are_null() -> None:
    values = [float("nan"), float("inf"), float("-inf"), 1.0, None]
    assert json_values(pa.array(values, pa.float64())) == [None, None, None, 1.0, None]


def test_json_booleans() -> None:
    assert json_values(pa.array([True, False, None])) == [True, False, None]


def test_json_utc_timestamp_is_iso_with_z() -> None:
    assert json_values(pa.array([MOMENT], pa.timestamp("us", "UTC"))) == [
        "2024-05-01T12:30:15.123456Z"
    ]


def test_json_naive_timestamp_is_iso_without_zone() -> None:
    naive = MOMENT.replace(tzinfo=None)
    assert json_values(pa.array([naive], pa.timestamp("us"))) == ["2024-05-01T12:30:15.123456"]


def test_json_timestamp_in_another_zone_is_written_in_utc() -> None:
    assert json_values(pa.array([MOMENT], pa.timestamp("us", "Europe/Paris"))) == [
        "2024-05-01T12:30:15.123456Z"
    ]


def test_json_dates_are_iso() -> None:
    assert json_values(pa.array([dt.date(2024, 2, 29), None])) == ["2024-02-29", None]


def test_json_decimals_are_exact() -> None:
    data = JSONFormat().serialize(
        values_batch(
            pa.array(
                [decimal.Decimal("12345678901234567890.123456789"), decimal.Decimal("-0.50")],
                pa.decimal128(38, 9),
            )
        )
    )
    decoded = [
        json.loads(line, parse_float=decimal.Decimal)["_value"]["x"] for line in data.splitlines()
    ]
    assert decoded == [decimal.Decimal("12345678901234567890.123456789"), decimal.Decimal("-0.5")]


def test_json_binary_values_are_base64() -> None:
    raw = bytes(range(256))
    assert json_values(pa.array([raw, None], pa.binary())) == [
        base64.b64encode(raw).decode("ascii"),
        None,
    ]


def test_json_lists_and_structs_are_nested_json() -> None:
    kind = pa.struct(
        [
            ("n", pa.int64()),
            ("tags", pa.list_(pa.string())),
            ("inner", pa.struct([("f", pa.float64())])),
        ]
    )
    value = {"n": 1, "tags": ['a"b', "c\nd"], "inner": {"f": 0.5}}
    assert json_values(pa.array([value, None], kind)) == [value, None]


def test_json_non_finite_floats_inside_structs_are_null() -> None:
    kind = pa.struct([("f", pa.float64()), ("l", pa.list_(pa.float64()))])
    value = {"f": float("nan"), "l": [1.0, float("inf")]}
    assert json_values(pa.array([value], kind)) == [{"f": None, "l": [1.0, None]}]


def test_json_maps_are_objects() -> None:
    kind = pa.map_(pa.string(), pa.int64())
    assert json_values(pa.array([[("a", 1), ("b", 2)]], kind)) == [{"a": 1, "b": 2}]


def test_json_dictionary_encoded_strings_are_plain_strings() -> None:
    encoded = pa.array(["a", "b", "a", None]).dictionary_encode()
    assert json_values(encoded) == ["a", "b", "a", None]


def test_json_value_column_names_are_escaped() -> None:
    batch = make_batch(pa.table({'we"ird\nname': [1]}))
    assert json_lines(JSONFormat().serialize(batch))[0]["_value"] == {'we"ird\nname': 1}


# ----------------------------------------------------------------------------- keys


def test_json_binary_keys_are_utf8_text() -> None:
    keys = pa.array(["clé 🎉".encode(), b"", None], pa.binary())
    assert json_keys(keys) == ["clé 🎉", "", None]


def test_json_invalid_utf8_key_bytes_are_replaced() -> None:
    assert json_keys(pa.array([b"ok\xff\xfe", b"fine"], pa.binary())) == ["ok\ufffd\ufffd", "fine"]


def test_json_string_keys_are_strings() -> None:
    assert json_keys(pa.array(['k"1', "k\\2"])) == ['k"1', "k\\2"]


def test_json_integer_keys_are_numbers() -> None:
    assert json_keys(pa.array([1, 2**62, None], pa.int64())) == [1, 2**62, None]


def test_json_without_key_or_timestamp_writes_nulls() -> None:
    line = json_lines(JSONFormat().serialize(values_batch(pa.array([1]))))[0]
    assert (line["_key"], line["_timestamp"]) == (None, None)


def test_json_integer_timestamp_passes_through() -> None:
    table = pa.table({"timestamp": pa.array([MOMENT_MS], pa.int64()), "v": [1]})
    assert json_lines(JSONFormat().serialize(make_batch(table)))[0]["_timestamp"] == MOMENT_MS


def test_json_kafka_value_is_parsed_into_the_value_object() -> None:
    lines = json_lines(JSONFormat().serialize(make_batch(kafka_table([b'{"a": 1, "s": "x"}']))))
    assert lines == [{"_timestamp": MOMENT_MS, "_key": "k0", "_value": {"a": 1, "s": "x"}}]


def test_json_kafka_tombstones_have_a_null_value() -> None:
    lines = json_lines(JSONFormat().serialize(make_batch(kafka_table([None, None]))))
    assert [line["_value"] for line in lines] == [None, None]


def test_json_kafka_values_are_the_producers_bytes_on_one_line() -> None:
    values = [b'{"b": -34, "a": 1e-9, "u": "\\u00fc"}', b'{"b":\r\n 2.5}\n']
    out = JSONFormat().serialize(make_batch(kafka_table(values)))
    assert out.count(b"\n") == 2
    assert b'"_value":{"b": -34, "a": 1e-9, "u": "\\u00fc"}}' in out
    assert b'"_value":{"b":   2.5} }' in out


# ----------------------------------------------------------------------------- options


def test_json_extensions() -> None:
    assert (JSONFormat().file_extension, JSONFormat(compress=True).file_extension) == (
        ".jsonl",
        ".jsonl.gz",
    )


def test_json_extension_is_not_doubled_when_already_gz() -> None:
    assert JSONFormat(file_extension=".json.gz", compress=True).file_extension == ".json.gz"


def test_compressed_json_gunzips_to_the_plain_output() -> None:
    batch = values_batch(pa.array(["a", "b"]))
    assert gzip.decompress(JSONFormat(compress=True).serialize(batch)) == (
        JSONFormat().serialize(batch)
    )


def test_appended_compressed_pieces_read_as_one_file() -> None:
    fmt = JSONFormat(compress=True)
    pieces = [fmt.serialize(values_batch(pa.array([text]))) for text in ("a", "b")]
    data = b"".join(pieces)
    assert [line["_value"]["x"] for line in json_lines(gzip.decompress(data))] == ["a", "b"]


def test_compressed_json_is_deterministic() -> None:
    batch = values_batch(pa.array(["a", "b"]))
    assert JSONFormat(compress=True).serialize(batch) == JSONFormat(compress=True).serialize(batch)


def test_custom_dumps_gets_the_record() -> None:
    seen: list[Any] = []

    def dumps(record: Any) -> str:
        seen.append(record)
        return "custom"

    table = pa.table(
        {"key": pa.array([b"k"], pa.binary()), "timestamp": pa.array([MOMENT_MS]), "a": [1]}
    )
    assert JSONFormat(dumps=dumps).serialize(make_batch(table)) == b"custom\n"
    assert seen == [{"_timestamp": MOMENT_MS, "_key": "k", "_value": {"a": 1}}]


def test_failing_custom_dumps_is_a_record_error_naming_the_row() -> None:
    def dumps(record: Any) -> str:
        if record["_value"]["a"] == 2:
            raise TypeError("cannot")
        return "{}"

    with pytest.raises(RecordError) as info:
        JSONFormat(dumps=dumps).serialize(values_batch(pa.array([1, 2]), "a"))
    assert info.value.row == 1


def test_json_is_appendable() -> None:
    assert (JSONFormat().appendable, JSONFormat().header()) == (True, b"")


# ============================================================================= Parquet


def read_parquet(data: bytes) -> pa.Table:
    return pq.read_table(io.BytesIO(data))


def test_parquet_round_trip() -> None:
    table = pa.table(
        {
            "key": ["k0", None],
            "timestamp": pa.array([MOMENT, None], pa.timestamp("us", "UTC")),
            "a": [1, 2],
            "b": ["x", None],
        }
    )
    result = read_parquet(ParquetFormat().serialize(make_batch(table)))
    assert result.column_names == ["_timestamp", "_key", "a", "b"]
    assert result.schema.field("_timestamp").type == pa.int64()
    assert result.to_pylist() == [
        {"_timestamp": MOMENT_MS, "_key": "k0", "a": 1, "b": "x"},
        {"_timestamp": None, "_key": None, "a": 2, "b": None},
    ]


def test_parquet_keeps_value_types() -> None:
    table = pa.table(
        {"d": pa.array([decimal.Decimal("1.50")], pa.decimal128(5, 2)), "l": pa.array([[1, 2]])}
    )
    result = read_parquet(ParquetFormat().serialize(make_batch(table)))
    assert (result.schema.field("d").type, result.column("l").to_pylist()) == (
        pa.decimal128(5, 2),
        [[1, 2]],
    )


def test_parquet_of_a_kafka_frame_has_the_parsed_value_columns() -> None:
    result = read_parquet(ParquetFormat().serialize(make_batch(kafka_table([b'{"a": 1}']))))
    assert result.to_pylist() == [{"_timestamp": MOMENT_MS, "_key": b"k0", "a": 1}]


@pytest.mark.parametrize("compression", PARQUET_COMPRESSIONS)
def test_parquet_compression_codec_is_used(compression: str) -> None:
    data = ParquetFormat(compression=compression).serialize(values_batch(pa.array([1, 2, 3])))
    codec = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(0).compression
    expected = "UNCOMPRESSED" if compression == "none" else compression.upper()
    assert codec == expected
    assert read_parquet(data).column("x").to_pylist() == [1, 2, 3]


def test_unknown_parquet_compression_is_an_invalid_format() -> None:
    with pytest.raises(InvalidFormatError) as info:
        ParquetFormat(compression="lzma")
    assert (info.value.option, info.value.value) == ("compression", "lzma")
    assert tuple(info.value.allowed or ()) == PARQUET_COMPRESSIONS


@pytest.mark.parametrize("name", ["_key", "_timestamp"])
def test_value_column_named_like_a_quix_column_is_a_record_error(name: str) -> None:
    with pytest.raises(RecordError) as info:
        ParquetFormat().serialize(values_batch(pa.array([1]), name))
    assert info.value.column == name


def test_parquet_is_not_appendable() -> None:
    assert (ParquetFormat().appendable, ParquetFormat().file_extension) == (False, ".parquet")


# ============================================================================= CSV


HEADER = ["key", "value", "timestamp", "topic", "partition", "offset"]


@pytest.mark.parametrize(
    ("dialect", "header"),
    [
        ("excel", b"key,value,timestamp,topic,partition,offset\r\n"),
        ("excel-tab", b"key\tvalue\ttimestamp\ttopic\tpartition\toffset\r\n"),
        ("unix", b'"key","value","timestamp","topic","partition","offset"\n'),
    ],
)
def test_csv_header_follows_the_dialect(dialect: str, header: bytes) -> None:
    assert CSVFormat(dialect=dialect).header() == header


@pytest.mark.parametrize("dialect", CSV_DIALECTS)
def test_csv_rows_follow_the_dialect_line_ending(dialect: str) -> None:
    data = CSVFormat(dialect=dialect).serialize(make_batch(kafka_table([b'{"a": 1}'])))
    ending = b"\n" if dialect == "unix" else b"\r\n"
    assert data.endswith(ending)
    assert not data.endswith(b"\r\r\n")


@pytest.mark.parametrize("dialect", CSV_DIALECTS)
def test_csv_kafka_rows_parse_back(dialect: str) -> None:
    fmt = CSVFormat(dialect=dialect)
    batch = make_batch(kafka_table([b'{"a": 1}', b'{"a": 2, "s": "x"}'], keys=[b"k0", None]))
    header, *rows = csv_rows(fmt.header() + fmt.serialize(batch), dialect)
    assert header == HEADER
    assert [[row[0], json.loads(row[1]), *row[2:]] for row in rows] == [
        ["k0", {"a": 1}, str(MOMENT_MS), "orders", "2", "100"],
        ["", {"a": 2, "s": "x"}, str(MOMENT_MS), "orders", "2", "101"],
    ]


@pytest.mark.parametrize("dialect", CSV_DIALECTS)
@pytest.mark.parametrize("text", ["a,b", 'say "hi"', "two\nlines", "cr\r\nlf", "tab\tx", ""])
def test_csv_awkward_text_round_trips(dialect: str, text: str) -> None:
    table = pa.table({"key": [text], "s": [text]})
    fmt = CSVFormat(dialect=dialect)
    [row] = csv_rows(fmt.serialize(make_batch(table)), dialect)
    assert (row[0], json.loads(row[1])) == (text, {"s": text})


def test_csv_generic_frame_has_empty_metadata() -> None:
    [row] = csv_rows(CSVFormat().serialize(values_batch(pa.array([1]))))
    assert row == ["", '{"x":1}', "", "", "", ""]


def test_csv_binary_key_is_utf8_text() -> None:
    table = pa.table({"key": pa.array(["clé".encode(), b"\xff"], pa.binary()), "v": [1, 2]})
    assert [row[0] for row in csv_rows(CSVFormat().serialize(make_batch(table)))] == [
        "clé",
        "\ufffd",
    ]


def test_csv_integer_key_is_its_number() -> None:
    table = pa.table({"key": pa.array([42]), "v": [1]})
    assert csv_rows(CSVFormat().serialize(make_batch(table)))[0][0] == "42"


def test_csv_custom_serializers() -> None:
    fmt = CSVFormat(
        key_serializer=lambda key: f"<{key!r}>",
        value_serializer=lambda value: "|".join(f"{k}={v}" for k, v in value.items()),
    )
    table = pa.table({"key": pa.array([b"k"], pa.binary()), "a": [1], "b": ["x"]})
    [row] = csv_rows(fmt.serialize(make_batch(table)))
    assert row[:2] == ["<b'k'>", "a=1|b=x"]


def test_csv_custom_key_serializer_alone_keeps_json_values() -> None:
    fmt = CSVFormat(key_serializer=str.upper)
    [row] = csv_rows(fmt.serialize(make_batch(pa.table({"key": ["k"], "a": [1]}))))
    assert (row[0], json.loads(row[1])) == ("K", {"a": 1})


def test_failing_serializer_is_a_record_error_naming_the_row() -> None:
    def value_serializer(value: Any) -> str:
        raise ValueError("nope")

    with pytest.raises(RecordError) as info:
        CSVFormat(value_serializer=value_serializer).serialize(values_batch(pa.array([1])))
    assert info.value.row == 0


def test_csv_of_an_empty_batch_is_empty() -> None:
    assert CSVFormat().serialize(values_batch(pa.array([], pa.int64()))) == b""


def test_csv_kafka_tombstones_have_a_null_value() -> None:
    rows = csv_rows(CSVFormat().serialize(make_batch(kafka_table([None]))))
    assert rows[0][1] == "null"  # as Quix's json.dumps(None)


def test_csv_kafka_values_are_the_producers_text() -> None:
    rows = csv_rows(CSVFormat().serialize(make_batch(kafka_table([b'{"b": -34,\n"a": 1e-9}']))))
    assert rows[0][1] == '{"b": -34,\n"a": 1e-9}'


def test_unknown_csv_dialect_is_an_invalid_format() -> None:
    with pytest.raises(InvalidFormatError) as info:
        CSVFormat(dialect="semicolon")
    assert (info.value.option, info.value.value) == ("dialect", "semicolon")
    assert tuple(info.value.allowed or ()) == CSV_DIALECTS


def test_csv_is_appendable() -> None:
    assert (CSVFormat().appendable, CSVFormat().file_extension) == (True, ".csv")


# ============================================================================= resolve_format


@pytest.mark.parametrize(
    ("name", "kind"),
    [("json", JSONFormat), ("PARQUET", ParquetFormat), ("Csv", CSVFormat)],
)
def test_resolve_format_by_name(name: str, kind: type) -> None:
    assert type(resolve_format(name)) is kind


def test_resolve_format_passes_options_on() -> None:
    assert resolve_format("json", compress=True) == JSONFormat(compress=True)


def test_resolve_format_passes_a_format_through() -> None:
    fmt = CSVFormat(dialect="unix")
    assert resolve_format(fmt) is fmt


def test_unknown_format_name_lists_the_known_ones() -> None:
    with pytest.raises(InvalidFormatError) as info:
        resolve_format("avro")
    assert (info.value.option, info.value.value) == ("format", "avro")
    assert tuple(info.value.allowed or ()) == FORMAT_NAMES == ("json", "parquet", "csv")


# ============================================================================= fidelity


def test_json_decimals_are_numbers_with_exact_digits_at_every_depth() -> None:
    kind = pa.struct([("d", pa.decimal128(38, 18)), ("l", pa.list_(pa.decimal128(10, 2)))])
    value = {
        "d": decimal.Decimal("-99999999999999999999.999999999999999999"),
        "l": [decimal.Decimal("1.50"), None],
    }
    for array in (pa.array([value], kind), pa.array([value["d"]], pa.decimal128(38, 18))):
        data = JSONFormat().serialize(values_batch(array))
        [line] = [json.loads(data, parse_float=decimal.Decimal)]
        numbers = line["_value"]["x"]
        assert numbers == (value if pa.types.is_struct(array.type) else value["d"])


def test_json_timestamps_read_the_same_at_every_depth() -> None:
    kind = pa.timestamp("us", "UTC")
    top = json_values(pa.array([MOMENT], kind))
    nested = json_values(pa.array([[MOMENT]], pa.list_(kind)))
    assert nested == [top] == [["2024-05-01T12:30:15.123456Z"]]


def test_json_float32_is_its_shortest_text_at_every_depth() -> None:
    top = json_values(pa.array([0.1], pa.float32()))
    nested = json_values(pa.array([{"f": 0.1}], pa.struct([("f", pa.float32())])))
    assert (top, nested) == ([0.1], [{"f": 0.1}])


def test_json_map_keys_are_the_text_of_their_json() -> None:
    kind = pa.map_(pa.int32(), pa.bool_())
    assert json_values(pa.array([[(1, True), (-2, None)]], kind)) == [{"1": True, "-2": None}]


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (pa.array([{"a": 1, "b": "x"}], pa.struct([("a", pa.int8()), ("b", pa.string())])), None),
        (pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int32())), None),
        (pa.array([[1, None]], pa.list_(pa.int64())), None),
        (pa.array([MOMENT], pa.timestamp("us", "UTC")), "2024-05-01T12:30:15.123456Z"),
    ],
)
def test_csv_keys_of_any_type_are_written_as_text(key: pa.Array, text: str | None) -> None:
    table = pa.table({"key": key, "v": [1]})
    [row] = csv_rows(CSVFormat().serialize(make_batch(table)))
    if text is None:
        assert json.loads(row[0]) == key.to_pylist()[0] or json.loads(row[0]) == dict(
            key.to_pylist()[0]
        )
    else:
        assert row[0] == text


def test_csv_custom_key_serializer_keeps_exact_decimal_values() -> None:
    fmt = CSVFormat(key_serializer=str)
    table = pa.table({"key": ["k"], "d": pa.array([decimal.Decimal("0.10")], pa.decimal128(5, 2))})
    [row] = csv_rows(fmt.serialize(make_batch(table)))
    assert row[1] == '{"d":0.10}'


@pytest.mark.parametrize("values", [["a", "b,c", None], ["line\nbreak", 'q"uote', None]])
@pytest.mark.parametrize("dialect", [csv.excel, csv.unix_dialect, csv.excel_tab])
def test_csv_rows_are_the_same_without_pyarrows_line_terminator_option(
    monkeypatch: pytest.MonkeyPatch, values: list[str | None], dialect: type[csv.Dialect]
) -> None:
    """pyarrow < 26 has no ``eol``: the fallback must give rows Python's csv reads back."""
    from quixsinks.core import formats

    numbers = [1, None, 3]
    table = pa.table({"s": values, "n": numbers})
    expected = [["" if v is None else str(v) for v in r] for r in zip(values, numbers, strict=True)]
    monkeypatch.setattr(formats, "_CSV_WRITER_EOL", False)
    data = formats.csv_bytes(table, dialect)
    raw = data if isinstance(data, bytes) else data.to_pybytes()
    assert raw.count(dialect.lineterminator.encode()) >= len(values)
    assert list(csv.reader(io.StringIO(raw.decode(), newline=""), dialect=dialect)) == expected


def test_tiny_decimals_are_json_digits_not_exponents() -> None:
    """pyarrow 15 casts -1E-18 to "-1.E-18"; JSON needs plain digits on every version."""
    table = pa.table(
        {
            "d": pa.array(
                [decimal.Decimal("-1E-18"), None, decimal.Decimal("5")], pa.decimal128(38, 18)
            )
        }
    )
    assert json_objects(table).to_pylist() == [
        '{"d":-0.000000000000000001}',
        '{"d":null}',
        '{"d":5.000000000000000000}',
    ]


# ============================================================================= quix_compat

AWKWARD = [
    b'{"b": "\\u00fc", "a": 2.5, "c": 1e-9}',
    b'{"a": -34, "a": 5, "d": "\xc3\xbc"}',
    None,
]


def test_quix_compat_json_lines_are_quix_writers_bytes() -> None:
    batch = make_batch(kafka_table(AWKWARD, [b"k1", None, b"k2"]))
    data = JSONFormat(quix_compat=True).serialize(batch)
    # Quix's jsonlines writer, compact: json.dumps(ensure_ascii=False), no spaces; the last
    # of repeated keys; a null key null (Quix writes its record object's repr)
    assert data == (
        b'{"_timestamp":%d,"_key":"k1","_value":{"b":"\xc3\xbc","a":2.5,"c":1e-09}}\n'
        b'{"_timestamp":%d,"_key":null,"_value":{"a":5,"d":"\xc3\xbc"}}\n'
        b'{"_timestamp":%d,"_key":"k2","_value":null}\n' % (MOMENT_MS, MOMENT_MS, MOMENT_MS)
    )


def test_quix_compat_parquet_key_is_a_string_column() -> None:
    batch = make_batch(kafka_table([b'{"a": 1}', b'{"a": 2}'], [b"sensor-1", None]))
    table = read_parquet(ParquetFormat(quix_compat=True).serialize(batch))
    assert table.schema.field("_key").type == pa.string()
    assert table.column("_key").to_pylist() == ["sensor-1", None]


def test_parquet_key_stays_binary_by_default() -> None:
    batch = make_batch(kafka_table([b'{"a": 1}'], [b"sensor-1"]))
    table = read_parquet(ParquetFormat().serialize(batch))
    assert table.schema.field("_key").type == pa.binary()
    assert table.column("_key").to_pylist() == [b"sensor-1"]


def test_quix_compat_csv_is_quix_csvsinks_bytes() -> None:
    batch = make_batch(kafka_table(AWKWARD, [b"k1", None, b"\xff\xfe"]))
    data = CSVFormat(quix_compat=True).serialize(batch)
    # key_serializer=str, value_serializer=json.dumps, Python's csv (excel) quoting
    assert data == (
        b'b\'k1\',"{""b"": ""\\u00fc"", ""a"": 2.5, ""c"": 1e-09}",'
        b"%d,orders,2,100\r\n"
        b'None,"{""a"": 5, ""d"": ""\\u00fc""}",%d,orders,2,101\r\n'
        b"b'\\xff\\xfe',null,%d,orders,2,102\r\n" % (MOMENT_MS, MOMENT_MS, MOMENT_MS)
    )


def test_quix_compat_csv_keeps_a_custom_serializer() -> None:
    fmt = CSVFormat(quix_compat=True, key_serializer=lambda key: key.decode().upper())
    [row] = csv_rows(fmt.serialize(make_batch(kafka_table([b'{"a":1}'], [b"k"]))))
    assert row[:2] == ["K", '{"a": 1}']


def test_value_serializer_gets_each_messages_own_object() -> None:
    seen: list[Any] = []

    def serializer(value: Any) -> str:
        seen.append(value)
        return json.dumps(value)

    batch = make_batch(kafka_table([b'{"a": 1}', b'{"a": 2.5, "b": 1}', None]))
    CSVFormat(value_serializer=serializer).serialize(batch)
    assert seen == [{"a": 1}, {"a": 2.5, "b": 1}, None]
    assert isinstance(seen[0]["a"], int)


def test_quix_compat_json_writes_value_columns_with_the_built_in_encoding() -> None:
    table = pa.table({"key": ["k"], "d": pa.array([decimal.Decimal("1.50")], pa.decimal128(10, 2))})
    [line] = json_lines(JSONFormat(quix_compat=True).serialize(make_batch(table)))
    assert line == {"_timestamp": None, "_key": "k", "_value": {"d": 1.5}}
    data = JSONFormat(quix_compat=True).serialize(make_batch(table))
    assert data == b'{"_timestamp":null,"_key":"k","_value":{"d":1.50}}\n'


def test_quix_compat_csv_writes_value_columns_with_the_built_in_encoding() -> None:
    table = pa.table(
        {"key": [b"k"], "d": pa.array([decimal.Decimal("1.50")], pa.decimal128(10, 2))}
    )
    [row] = csv_rows(CSVFormat(quix_compat=True).serialize(make_batch(table)))
    assert row[:2] == ["b'k'", '{"d":1.50}']
