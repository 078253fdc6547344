"""Property tests (hypothesis): parsers and encoders keep data, or refuse it clearly.

Kept fast (a few seconds in all): modest example counts, no deadline.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from quixsinks.core import arrow
from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.formats import CSVFormat, JSONFormat
from quixsinks.core.records import RecordSchema, parse_json_objects
from quixsinks.sinks.csvfile import CSVFileOptions
from quixsinks.sinks.file import FileOptions
from quixsinks.sinks.influxdb3 import InfluxDB3Options, LineProtocol
from quixsinks.sinks.influxdb3.wire import LINE_START
from quixsinks.sinks.postgresql import PostgreSQLOptions

# CI replays a fixed set of examples (no flaky runs); a developer's run explores new ones
FAST = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=os.environ.get("CI") == "true",
)

INT64 = st.integers(-(2**63), 2**63 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
TEXT = st.text(max_size=12)

# ----------------------------------------------------------------------------- JSON values


def kinds() -> st.SearchStrategy[Any]:
    """A JSON type: a scalar kind, a list of a kind, or an object of keys of kinds."""
    scalar = st.sampled_from(["int", "float", "bool", "str"])
    return st.recursive(
        scalar,
        lambda inner: st.one_of(
            st.tuples(st.just("list"), inner),
            st.tuples(st.just("object"), st.dictionaries(TEXT, inner, max_size=3)),
        ),
        max_leaves=6,
    )


def values_of(kind: Any) -> st.SearchStrategy[Any]:
    if kind == "int":
        return INT64
    if kind == "float":
        return FLOATS
    if kind == "bool":
        return st.booleans()
    if kind == "str":
        return TEXT
    if kind[0] == "list":
        return st.lists(st.none() | values_of(kind[1]), max_size=3)
    keys = list(kind[1].items())
    return st.fixed_dictionaries({}, optional={k: st.none() | values_of(v) for k, v in keys})


@st.composite
def json_rows(draw: Any) -> list[Any]:
    """Rows of JSON objects (or tombstones) whose keys keep one type each."""
    schema = draw(st.dictionaries(TEXT, kinds(), max_size=4))
    row = st.fixed_dictionaries(
        {}, optional={k: st.none() | values_of(v) for k, v in schema.items()}
    )
    return draw(st.lists(st.none() | row, min_size=1, max_size=6))


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


@FAST
@given(rows=json_rows(), indent=st.sampled_from([None, None, 1]))
def test_json_objects_parse_to_rows_equal_to_the_input(rows: list[Any], indent: Any) -> None:
    texts = [None if r is None else json.dumps(r, indent=indent) for r in rows]
    table = parse_json_objects(pa.array(texts, pa.string()), "value")
    assert table.num_rows == len(rows)
    parsed = table.to_pylist() if table.num_columns else [{} for _ in rows]
    assert [without_nulls(p) for p in parsed] == [without_nulls(r or {}) for r in rows]
    keys = {k for r in rows if r for k in r}
    assert set(table.column_names) == keys


# ----------------------------------------------------------------------------- line protocol


def _scan(text: str, stops: str) -> tuple[str, str]:
    """The raw text up to the first unescaped character of ``stops``, and the rest."""
    i = 0
    while i < len(text) and text[i] not in stops:
        i += 2 if text[i] == "\\" else 1
    return text[:i], text[i:]


def _unescape(raw: str, characters: str) -> str:
    return re.sub(r"\\([" + re.escape(characters) + "])", r"\1", raw)


def parse_line(line: str) -> tuple[str, dict[str, str], dict[str, Any], int]:
    """A reference line-protocol parser, after the InfluxDB line protocol spec: a backslash
    escapes the next character while scanning, and only the listed characters are
    unescaped (measurement: comma, space; tag and field keys, tag values: comma, equals,
    space; string field values: double quote, backslash)."""
    assert line.endswith("\n")
    assert not line.startswith("#")
    rest = line[:-1]
    raw, rest = _scan(rest, ", ")
    measurement = _unescape(raw, ", ")
    tags: dict[str, str] = {}
    while rest.startswith(","):
        raw_key, rest = _scan(rest[1:], "=")
        raw_value, rest = _scan(rest[1:], ", ")
        tags[_unescape(raw_key, ",= ")] = _unescape(raw_value, ",= ")
    assert rest.startswith(" ")
    fields: dict[str, Any] = {}
    rest = rest[1:]
    while True:
        raw_key, rest = _scan(rest, "=")
        rest = rest[1:]
        if rest.startswith('"'):
            i, out = 1, []
            while rest[i] != '"':
                if rest[i] == "\\" and rest[i + 1] in '"\\':
                    i += 1
                out.append(rest[i])
                i += 1
            value: Any = "".join(out)
            rest = rest[i + 1 :]
        else:
            raw_value, rest = _scan(rest, ", ")
            value = int(raw_value[:-1]) if raw_value.endswith("i") else float(raw_value)
        fields[_unescape(raw_key, ",= ")] = value
        if rest.startswith(","):
            rest = rest[1:]
            continue
        break
    assert rest.startswith(" ")
    return measurement, tags, fields, int(rest[1:])


def writable(text: str) -> bool:
    return "\n" not in text and not re.search(r"\\([\\,= ]|$)", text)


@FAST
@example(measurement="0", tag="", field_key="#", value="")  # a '#' key is fine mid-line
@given(
    measurement=st.text(min_size=1, max_size=10),
    tag=st.text(max_size=10),
    field_key=st.text(min_size=1, max_size=10),
    value=st.text(max_size=10),
)
def test_line_protocol_text_round_trips_or_is_refused(
    measurement: str, tag: str, field_key: str, value: str
) -> None:
    assume(field_key not in ("m", "t", "n"))  # a field named like another column is another case
    protocol = LineProtocol(
        measurement=None, measurement_column="m", tags=("t",), fields=(field_key, "n")
    )
    columns = {
        "m": pa.array([measurement]),
        "t": pa.array([tag]),
        field_key: pa.array([value]),
        "n": pa.array([7]),
    }
    # '#' or whitespace first: a comment, or a point of another measurement (LINE_START)
    ok = writable(measurement) and writable(tag) and not re.match(LINE_START, measurement)
    ok = ok and writable(field_key)
    try:
        lines, _ = protocol.lines(columns, pa.array([5], pa.int64()), 1)
    except (RecordError, OptionError):
        assert not ok
        return
    assert ok
    parsed = parse_line(lines[0].as_py())
    assert parsed == (measurement, {"t": tag} if tag else {}, {field_key: value, "n": 7}, 5)


# ----------------------------------------------------------------------------- formats

SCALARS = {
    "i": (pa.int64(), INT64),
    "f": (pa.float64(), FLOATS),
    "b": (pa.bool_(), st.booleans()),
    "s": (pa.string(), st.text(max_size=8)),
}


@st.composite
def tables(draw: Any) -> pa.Table:
    names = draw(st.lists(st.sampled_from(sorted(SCALARS)), min_size=1, max_size=4, unique=True))
    rows = draw(st.integers(1, 5))
    columns = {}
    for name in names:
        kind, values = SCALARS[name]
        columns[name] = pa.array(
            draw(st.lists(st.none() | values, min_size=rows, max_size=rows)), kind
        )
    columns["key"] = pa.array(draw(st.lists(st.text(max_size=6), min_size=rows, max_size=rows)))
    return pa.table(columns)


def batch_of(table: pa.Table) -> SinkBatch:
    return SinkBatch(table, RecordSchema.resolve(table.schema), WriteContext("s", 0))


@FAST
@given(table=tables())
def test_json_lines_round_trip_through_pyarrows_reader(table: pa.Table) -> None:
    values = table.drop_columns(["key"])
    schema = pa.schema(
        [("_timestamp", pa.int64()), ("_key", pa.string()), ("_value", pa.struct(values.schema))]
    )
    data = JSONFormat().serialize(batch_of(table))
    read = pa_json.read_json(
        io.BytesIO(data), parse_options=pa_json.ParseOptions(explicit_schema=schema)
    )
    assert read.column("_key").to_pylist() == table.column("key").to_pylist()
    assert read.column("_value").to_pylist() == values.to_pylist()


@FAST
@given(table=tables(), dialect=st.sampled_from(["excel", "unix"]))
def test_csv_round_trips_through_pyarrows_reader(table: pa.Table, dialect: str) -> None:
    fmt = CSVFormat(dialect=dialect)
    data = fmt.header() + fmt.serialize(batch_of(table))
    read = pa_csv.read_csv(
        io.BytesIO(data),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True),
        convert_options=pa_csv.ConvertOptions(
            column_types={"key": pa.string(), "value": pa.string()}, strings_can_be_null=False
        ),
    )
    assert read.column("key").to_pylist() == table.column("key").to_pylist()
    values = [json.loads(v) for v in read.column("value").to_pylist()]
    assert values == table.drop_columns(["key"]).to_pylist()


# ----------------------------------------------------------------------------- options

OPTION_CLASSES = [FileOptions, CSVFileOptions, PostgreSQLOptions, InfluxDB3Options]


@st.composite
def option_maps(draw: Any) -> tuple[type, dict[str, str]]:
    cls = draw(st.sampled_from(OPTION_CLASSES))
    names = [spec.name for spec in cls.specs()]
    spellings = st.sampled_from(names).map(lambda n: draw(st.sampled_from([n, n.upper()])))
    keys = st.one_of(spellings, st.text(max_size=8))
    texts = st.one_of(
        st.text(max_size=10),
        st.sampled_from(["true", "0", "-1", "1e9", "none", "json", "http://h", "a=b 'c"]),
    )
    return cls, draw(st.dictionaries(keys, texts, max_size=6))


@FAST
@given(case=option_maps())
def test_no_option_input_raises_anything_but_an_option_error(
    case: tuple[type, dict[str, str]],
) -> None:
    cls, options = case
    with contextlib.suppress(OptionError):  # anything else fails the test
        cls.from_options(options)


@pytest.mark.parametrize("cls", OPTION_CLASSES)
def test_option_classes_are_covered(cls: type) -> None:
    assert cls.specs()


# ---------------------------------------------------------------------- row concatenation

_cells = st.one_of(st.none(), st.binary(max_size=6))


@st.composite
def _row_pieces(draw: st.DrawFn) -> tuple[list[Any], int, bool]:
    """Pieces for concat_rows: sliced binary or string arrays (nulls or not) and bytes or
    str literals, in any order; the row count; whether the result is text."""
    rows = draw(st.integers(0, 6))
    text = draw(st.booleans())
    pieces: list[Any] = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            cut = draw(st.integers(0, 2))
            values = draw(st.lists(_cells, min_size=rows + cut, max_size=rows + cut))
            if text:
                values = [None if v is None else v.decode("latin-1") for v in values]
            array = pa.array(values, pa.string() if text else pa.binary()).slice(cut)
            pieces.append(array)
        else:
            literal = draw(st.binary(max_size=4))
            pieces.append(literal.decode("latin-1") if text else literal)
    return pieces, rows, text


def _expected_rows(pieces: list[Any], rows: int) -> list[Any]:
    out = []
    for row in range(rows):
        parts = [p[row].as_py() if isinstance(p, pa.Array) else p for p in pieces]
        out.append(None if any(v is None for v in parts) else type(parts[0])().join(parts))
    return out


@given(_row_pieces(), st.booleans())
def test_concat_rows_joins_every_row_with_or_without_numpy(
    case: tuple[list[Any], int, bool], without_numpy: bool
) -> None:
    pieces, rows, text = case
    with pytest.MonkeyPatch.context() as patch:
        if without_numpy:  # the join kernel's path, as where numpy is not installed
            patch.setattr(arrow, "_concat_by_take", lambda *args: None)
        result = arrow.concat_rows(pieces, rows)
    assert result.type == (pa.string() if text else pa.binary())
    assert result.to_pylist() == _expected_rows(pieces, rows)
