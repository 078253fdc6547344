"""Vectorised line protocol: escaping, types, nulls, times (no server)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from quixsinks.core.errors import OptionError, RecordError
from quixsinks.sinks.influxdb3 import InfluxDB3Options, LineProtocol
from quixsinks.sinks.influxdb3.wire import field_pieces, timestamps

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)


def render(
    protocol: LineProtocol, columns: dict[str, list[object]], times: list[int] | None = None
) -> tuple[list[str], list[int]]:
    arrays = {k: pa.array(v) for k, v in columns.items()}
    rows = len(next(iter(arrays.values())))
    stamps = pa.array(times if times is not None else [1] * rows, pa.int64())
    lines, without = protocol.lines(arrays, stamps, rows)
    return lines.to_pylist(), without


def lp(**kwargs: object) -> LineProtocol:
    base: dict[str, object] = {
        "measurement": "m",
        "measurement_column": None,
        "tags": (),
        "fields": (),
    }
    return LineProtocol(**{**base, **kwargs})  # type: ignore[arg-type]


def test_field_types_are_written_with_their_suffixes() -> None:
    lines, _ = render(
        lp(fields=("i", "f", "b", "s")), {"i": [3], "f": [1.5], "b": [True], "s": ["x"]}, [7]
    )
    assert lines == ['m i=3i,f=1.5,b=true,s="x" 7\n']


def test_unsigned_integers_use_u() -> None:
    protocol = lp(fields=("u",))
    lines, _ = protocol.lines({"u": pa.array([2**64 - 1], pa.uint64())}, pa.array([1]), 1)
    assert lines.to_pylist() == ["m u=18446744073709551615u 1\n"]


def test_ints_can_be_written_as_floats() -> None:
    lines, _ = render(lp(fields=("i",), ints_to_floats=True), {"i": [3]})
    assert lines == ["m i=3 1\n"]


def test_tags_are_sorted_and_escaped() -> None:
    lines, _ = render(
        lp(measurement="my m,x", tags=("zone", "a b"), fields=("v",)),
        {"zone": ["eu,west=1"], "a b": ["p q"], "v": [1]},
    )
    assert lines == ["my\\ m\\,x,a\\ b=p\\ q,zone=eu\\,west\\=1 v=1i 1\n"]


def test_string_fields_escape_quotes_and_backslashes() -> None:
    lines, _ = render(lp(fields=("s",)), {"s": ['say "hi" \\o/']})
    assert lines == ['m s="say \\"hi\\" \\\\o/" 1\n']


def test_null_fields_and_empty_tags_are_left_out() -> None:
    lines, _ = render(
        lp(tags=("t",), fields=("a", "b")), {"t": ["", None], "a": [None, 1], "b": [2, None]}
    )
    assert lines == ["m b=2i 1\n", "m a=1i 1\n"]


def test_rows_without_any_field_have_no_line_and_are_named() -> None:
    lines, skipped = render(lp(fields=("a",)), {"a": [1, None, 3]}, [1, 2, 3])
    assert lines == ["m a=1i 1\n", "m a=3i 3\n"]
    assert skipped == [1]


def test_nan_is_an_error_by_default() -> None:
    with pytest.raises(RecordError, match="'f' is nan in row 1"):
        render(lp(fields=("f",)), {"f": [1.0, float("nan")]})


def test_nan_and_infinity_can_be_dropped() -> None:
    lines, skipped = render(
        lp(fields=("f", "g"), invalid_floats="drop"), {"f": [float("inf"), 2.0], "g": [1, None]}
    )
    assert lines == ["m g=1i 1\n", "m f=2 1\n"]
    assert skipped == []


def test_a_newline_in_a_tag_value_is_a_record_error() -> None:
    with pytest.raises(RecordError, match="newline"):
        render(lp(tags=("t",), fields=("v",)), {"t": ["a\nb"], "v": [1]})


def test_measurement_from_a_column() -> None:
    lines, _ = render(
        lp(measurement=None, measurement_column="kind", fields=("v",)),
        {"kind": ["cpu", "disk io"], "v": [1, 2]},
    )
    assert lines == ["cpu v=1i 1\n", "disk\\ io v=2i 1\n"]


def test_null_time_is_a_record_error() -> None:
    protocol = lp(fields=("v",))
    with pytest.raises(RecordError, match="row 1 has no time"):
        protocol.lines({"v": pa.array([1, 2])}, pa.array([1, None], pa.int64()), 2)


@pytest.mark.parametrize(
    ("precision", "expected"),
    [
        ("ns", 1714564800123456000),
        ("us", 1714564800123456),
        ("ms", 1714564800123),
        ("s", 1714564800),
    ],
)
def test_timestamps_convert_exactly_to_every_precision(precision: str, expected: int) -> None:
    column = pa.array([T0], pa.timestamp("us", "UTC"))
    assert timestamps(column, precision, name="ts").to_pylist() == [expected]  # type: ignore[arg-type]


def test_timestamps_before_1970_floor() -> None:
    column = pa.array([-1], pa.timestamp("us", "UTC"))
    assert timestamps(column, "ms", name="ts").to_pylist() == [-1]


@pytest.mark.parametrize("precision", ["ms", "s"])
def test_times_in_a_daylight_saving_fall_back_hour_are_written(precision: str) -> None:
    """02:30 on 2024-10-27 happens twice in Berlin (Spark hands Python the session's
    zone): both are floored in UTC, not refused as ambiguous local times."""
    first = 1_729_989_000_123_456  # 02:30 CEST
    column = pa.array([first, first + 3_600_000_000], pa.timestamp("us", "Europe/Berlin"))
    scale = 1000 if precision == "ms" else 1_000_000
    expected = [first // scale, (first + 3_600_000_000) // scale]
    assert timestamps(column, precision, name="ts").to_pylist() == expected  # type: ignore[arg-type]


def test_integer_times_must_match_the_precision_digits() -> None:
    good = pa.array([1714564800123], pa.int64())
    assert timestamps(good, "ms", name="t").to_pylist() == [1714564800123]
    with pytest.raises(RecordError, match="13 digits"):
        timestamps(pa.array([1714564800], pa.int64()), "ms", name="t")


def test_a_string_time_column_is_an_option_error() -> None:
    with pytest.raises(OptionError, match="must be a timestamp or an integer"):
        timestamps(pa.array(["2024-01-01"]), "ms", name="t")


def test_struct_values_of_a_field_are_a_record_error() -> None:
    protocol = lp(fields=("st",))
    with pytest.raises(RecordError, match="cannot be a field"):
        protocol.lines({"st": pa.array([{"a": 1}])}, pa.array([1]), 1)


BASE = {"host": "http://127.0.0.1:1", "database": "db", "measurement": "m"}


def test_tag_that_is_also_a_field_is_an_option_error() -> None:
    with pytest.raises(OptionError, match="both a tag and a field"):
        InfluxDB3Options.from_options({**BASE, "tags_keys": "a,b", "fields_keys": "b"})


def test_empty_measurement_is_an_option_error() -> None:
    with pytest.raises(OptionError, match="'measurement'"):
        InfluxDB3Options.from_options({**BASE, "measurement": "  "})


def test_unknown_precision_is_an_option_error() -> None:
    with pytest.raises(OptionError) as error:
        InfluxDB3Options.from_options({**BASE, "time_precision": "minutes"})
    assert error.value.allowed == ("ns", "us", "ms", "s")


def test_time_setter_is_accepted_for_time_key() -> None:
    assert InfluxDB3Options.from_options({**BASE, "time_setter": "ts"}).time_key == "ts"


def test_token_is_redacted_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFLUXDB_TOKEN", "tok-secret")
    options = InfluxDB3Options.from_options(BASE)
    assert options.token == "tok-secret"
    assert "tok-secret" not in repr(options)


# ----------------------------------------------------------------------------- fidelity


@pytest.mark.parametrize("value", ["ends\\", "a\\,b", "a\\ b", "a\\=b", "two\\\\"])
def test_a_tag_value_with_an_ambiguous_backslash_is_a_record_error(value: str) -> None:
    with pytest.raises(RecordError, match="backslash") as error:
        render(lp(tags=("t",), fields=("v",)), {"t": ["ok", value], "v": [1, 2]})
    assert error.value.row == 1


def test_a_backslash_before_an_ordinary_character_passes_through() -> None:
    lines, _ = render(lp(tags=("t",), fields=("v",)), {"t": ["C:\\temp"], "v": [1]})
    assert lines == ["m,t=C:\\temp v=1i 1\n"]


@pytest.mark.parametrize("name", ["#cpu", "\t#cpu", "\tcpu", " cpu", "\x00cpu"])
def test_a_measurement_column_starting_with_a_hash_or_whitespace_is_a_record_error(
    name: str,
) -> None:
    """InfluxDB reads '#' as a comment and drops leading whitespace and NUL: the point
    would be lost or land in measurement 'cpu'."""
    protocol = lp(measurement=None, measurement_column="kind", fields=("v",))
    with pytest.raises(RecordError, match="comment") as error:
        render(protocol, {"kind": ["cpu", name], "v": [1, 2]})
    assert error.value.row == 1


@pytest.mark.parametrize("name", ["#m", "m\\", "a\\ b", "\tm", " m"])
def test_a_measurement_option_that_cannot_be_written_is_an_option_error(name: str) -> None:
    with pytest.raises(OptionError, match="unambiguously"):
        render(lp(measurement=name, fields=("v",)), {"v": [1]})


@pytest.mark.parametrize("precision", ["ns", "us", "ms", "s"])
def test_a_time_past_2262_is_a_record_error_in_every_precision(precision: str) -> None:
    late = dt.datetime(2262, 4, 12, tzinfo=dt.UTC)
    column = pa.array([T0, late], pa.timestamp("us", "UTC"))
    with pytest.raises(RecordError, match="outside what InfluxDB can store") as error:
        timestamps(column, precision, name="ts")  # type: ignore[arg-type]
    assert error.value.row == 1


def test_a_time_before_1677_is_a_record_error() -> None:
    early = dt.datetime(1677, 9, 20, tzinfo=dt.UTC)
    with pytest.raises(RecordError, match="outside"):
        timestamps(pa.array([early], pa.timestamp("us", "UTC")), "ns", name="ts")


def test_the_last_storable_nanosecond_is_written_exactly() -> None:
    column = pa.array([2**63 - 1], pa.timestamp("ns", "UTC"))
    assert timestamps(column, "ns", name="ts").to_pylist() == [2**63 - 1]


def test_an_integer_millisecond_time_past_2262_is_a_record_error() -> None:
    with pytest.raises(RecordError, match="outside"):
        timestamps(pa.array([9_999_999_999_999], pa.int64()), "ms", name="t")


def test_decimals_are_floats_or_exact_strings() -> None:
    value = pa.array([decimal.Decimal("12345678901234567.891")], pa.decimal128(38, 3))
    as_float, _ = lp(fields=("d",)).lines({"d": value}, pa.array([1]), 1)
    as_text, _ = lp(fields=("d",), decimals="string").lines({"d": value}, pa.array([1]), 1)
    assert as_float.to_pylist() == ["m d=1.2345678901234568e+16 1\n"]
    assert as_text.to_pylist() == ['m d="12345678901234567.891" 1\n']


def test_a_field_null_in_every_row_is_left_out() -> None:
    protocol = lp(fields=("v", "n"))
    lines, _ = protocol.lines({"v": pa.array([1]), "n": pa.nulls(1)}, pa.array([1]), 1)
    assert lines.to_pylist() == ["m v=1i 1\n"]


def test_decimal_fields_are_the_nearest_double() -> None:
    """pyarrow's decimal-to-float cast is one unit in the last place off for about one
    value in eight of decimal(10,2) (56834724.12 became 56834724.120000005)."""
    values = [decimal.Decimal("56834724.12"), decimal.Decimal("0.10"), decimal.Decimal("-1.05")]
    column = pa.array(values, pa.decimal128(10, 2))
    pieces = field_pieces(
        column, ints_to_floats=False, invalid_floats="error", name="d", decimals="float"
    )
    assert [float(t) for t in pieces[0].to_pylist()] == [float(v) for v in values]
