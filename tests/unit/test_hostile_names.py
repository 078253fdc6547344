"""Hostile names and values: every escaping, quoting and encoding function, as properties.

Where the destination's syntax can be read back without its server (line protocol, hive
paths, BigQuery backtick identifiers, Redis key templates), the encoded form is parsed back
and must give the original; everything refused is refused with an OptionError or a
RecordError that names the problem. The real servers are in
tests/integration/test_hostile_names.py.
"""

from __future__ import annotations

import re
import string
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.delivery import DedupeIds
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.formats import decode_utf8_strict
from quixsinks.sinks.bigquery.options import BigQueryOptions, split_table_id
from quixsinks.sinks.bigquery.schema import check_column_name, quote
from quixsinks.sinks.iceberg.options import IcebergOptions
from quixsinks.sinks.influxdb3 import LineProtocol
from quixsinks.sinks.influxdb3.wire import LINE_START
from quixsinks.sinks.kinesis.options import KinesisOptions
from quixsinks.sinks.postgresql.options import PostgreSQLOptions
from quixsinks.sinks.postgresql.schema import column_plan, identifier_problem
from quixsinks.sinks.pubsub import PubSubOptions, PubSubSink
from quixsinks.sinks.pubsub.wire import (
    MAX_ATTRIBUTES,
    MAX_ORDERING_KEY_BYTES,
    MAX_VALUE_BYTES,
    name_problem,
)
from quixsinks.sinks.redis import RedisOptions, RedisSink
from quixsinks.sinks.redis.options import template_separators
from quixsinks.sinks.tsdatalake import TSDataLakeOptions
from quixsinks.sinks.tsdatalake.wire import (
    MAX_SEGMENT_BYTES,
    NULL_PARTITION,
    Layout,
    decode_segment,
    encode_value,
)

#: the metacharacters of every sink's syntax, and the characters that break parsers
NASTY = ",= \"'\\\n\r\t\x00`:/.%#;{}[]*$\x1b\u2028\u00a0\u0430\u202e\ufeff"
#: text made mostly of them (no lone surrogates: they are not UTF-8)
nasty_text = st.text(
    alphabet=st.sampled_from(NASTY) | st.characters(exclude_categories=("Cs",)), max_size=40
)
#: the nastiest names the integration tests send too
NASTIEST = [
    'a,b=c d"e',
    "back\\slash",
    "tab\there",
    "quote'single",
    "semi;colon -- drop",
    "ümlaut_名前_🙂",
    "\u0430dmin",  # a Cyrillic letter that looks like a Latin 'a'
    "..",
    "../../etc",
    "%2e%2e",
    "x" * 63,
]


# ---------------------------------------------------------------- line protocol


def _read_escaped(text: str, i: int, stops: str, escapable: str) -> tuple[str, int]:
    """Read up to an unescaped character of ``stops``; ``\\`` escapes ``escapable`` (a
    backslash before anything else is itself)."""
    out: list[str] = []
    while i < len(text) and text[i] not in stops:
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in escapable:
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out), i


def parse_line(line: str) -> tuple[str, dict[str, str], dict[str, Any], int]:
    """One line of line protocol read back by the rules of the InfluxDB reference (an
    independent reader: measurement, tags, fields, time)."""
    assert line.endswith("\n")
    line = line[:-1]
    measurement, i = _read_escaped(line, 0, ", ", ", ")
    tags: dict[str, str] = {}
    while line[i] == ",":
        key, i = _read_escaped(line, i + 1, "=", ",= ")
        value, i = _read_escaped(line, i + 1, ", ", ",= ")
        tags[key] = value
    assert line[i] == " "
    fields: dict[str, Any] = {}
    while True:
        key, i = _read_escaped(line, i + 1, "=", ",= ")
        i += 1
        if line[i] == '"':
            value, i = _read_escaped(line, i + 1, '"', '"\\')
            fields[key] = value
            i += 1
        else:
            raw, i = _read_escaped(line, i, ", ", "")
            fields[key] = int(raw[:-1]) if raw.endswith("i") else float(raw)
        if line[i] == " ":
            break
    return measurement, tags, fields, int(line[i + 1 :])


def lines_for(measurement: str, tags: dict[str, str], fields: dict[str, Any]) -> list[str]:
    protocol = LineProtocol(
        measurement=measurement,
        measurement_column=None,
        tags=tuple(tags),
        fields=tuple(fields),
    )
    arrays = {k: pa.array([v]) for k, v in {**tags, **fields}.items()}
    lines, _ = protocol.lines(arrays, pa.array([7], pa.int64()), 1)
    return lines.to_pylist()  # type: ignore[no-any-return]


@settings(max_examples=300, deadline=None)
@given(
    measurement=nasty_text.filter(bool),
    tag_key=nasty_text.filter(bool),
    tag_value=nasty_text.filter(bool),
    field_key=nasty_text.filter(bool),
    text=nasty_text,
)
@example(
    measurement="cpu, load",
    tag_key="host name",
    tag_value='a,b=c d"e',
    field_key="f=x",
    text='say "hi" \\ \n bye',
)
def test_line_protocol_reads_back_as_written_or_is_refused(
    measurement: str, tag_key: str, tag_value: str, field_key: str, text: str
) -> None:
    assume(len({tag_key, field_key, "n"}) == 3)
    # a tag or field named 'time' is refused for its own reason (InfluxDB's time column)
    assume("time" not in (tag_key, field_key))
    names = (measurement, tag_key, field_key, tag_value)
    # what has no unambiguous form: a newline, a '#' or whitespace starting the line, or a
    # backslash a parser could read as an escape, in a name or a tag value
    refused = bool(re.match(LINE_START, measurement)) or any(
        "\n" in n or re.search(r"\\([\\,= ]|$)", n) for n in names
    )
    fields = {field_key: text, "n": 5}
    if refused:
        with pytest.raises((OptionError, RecordError), match=r"newline|backslash|'#' or white"):
            lines_for(measurement, {tag_key: tag_value}, fields)
        return
    [line] = lines_for(measurement, {tag_key: tag_value}, fields)
    assert parse_line(line) == (measurement, {tag_key: tag_value}, fields, 7)


def test_a_tag_value_that_is_not_utf8_is_a_record_error_naming_the_row() -> None:
    protocol = LineProtocol(measurement="m", measurement_column=None, tags=("t",), fields=("v",))
    columns = {"t": pa.array([b"ok", b"\xff\xfe"], pa.binary()), "v": pa.array([1, 2])}
    with pytest.raises(RecordError, match=r"'t' holds bytes that are not UTF-8 text in row 1"):
        protocol.lines(columns, pa.array([1, 2], pa.int64()), 2)


@given(st.binary(max_size=20))
def test_strict_utf8_decoding_keeps_text_and_refuses_the_rest(raw: bytes) -> None:
    column = pa.array([b"fine", raw], pa.binary())
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(RecordError, match="row 1"):
            decode_utf8_strict(column, "x")
        return
    assert decode_utf8_strict(column, "x").to_pylist() == ["fine", text]


# ---------------------------------------------------------------- hive partition paths


@settings(max_examples=300)
@given(nasty_text)
@example("..")
@example(".")
@example("a/b")
@example("%2F")
@example("__None__")
@example("=")
@example("\x00")
def test_hive_values_read_back_as_themselves_and_never_leave_their_directory(
    value: str,
) -> None:
    encoded = encode_value(value)
    # the empty text is the null partition (Spark cannot read a `c=` folder)
    assert decode_segment(encoded) == (value or None)
    segment = f"c={encoded}"
    assert "/" not in segment
    assert "\\" not in segment
    assert all(c.isprintable() for c in segment)
    assert segment not in (".", "..")


def test_a_value_that_reads_like_the_null_partition_stays_a_value() -> None:
    assert encode_value(NULL_PARTITION) != NULL_PARTITION
    assert decode_segment(encode_value(NULL_PARTITION)) == NULL_PARTITION
    assert decode_segment(NULL_PARTITION) is None


def test_hive_directories_read_back_by_pyarrow(tmp_path: Any) -> None:
    values = ["a/b", "..", "50%", "x=y", "sp ace", "tab\t", "ü", NULL_PARTITION, "+plus"]
    table = pa.table({"c": values, "v": list(range(len(values)))})
    layout = Layout(hive_columns=("c",), timestamp_column=None)
    import pyarrow.parquet as pq

    for path, rows in layout.split(table):
        (tmp_path / path).mkdir(parents=True)
        pq.write_table(rows, tmp_path / path / "part.parquet")
    read = ds.dataset(tmp_path, partitioning="hive").to_table().to_pylist()
    assert sorted((r["v"], r["c"]) for r in read) == sorted(enumerate(values))


@given(st.integers(min_value=1, max_value=400), st.sampled_from(["x", "é", "/", "名"]))
def test_a_partition_directory_over_255_bytes_is_refused_naming_column_and_row(
    length: int, character: str
) -> None:
    value = character * length
    table = pa.table({"c": ["short", value], "v": [1, 2]})
    layout = Layout(hive_columns=("c",), timestamp_column=None)
    if len(f"c={encode_value(value)}".encode()) <= MAX_SEGMENT_BYTES:
        assert len(dict(layout.split(table))) == 2
        return
    with pytest.raises(RecordError, match=r"hive column 'c' has the value .* in row 1") as error:
        list(layout.split(table))
    assert error.value.column == "c"
    assert error.value.row == 1


@pytest.mark.parametrize("name", ["events\n", "ev/ents", "..", ".hidden", "_x", "a" * 256])
def test_tsdatalake_refuses_table_names_that_leave_the_path(name: str) -> None:
    with pytest.raises(OptionError, match="'table_name'") as error:
        TSDataLakeOptions.from_options({"path": "/tmp/lake", "table_name": name})
    assert error.value.value == name


# ---------------------------------------------------------------- PostgreSQL identifiers


@given(nasty_text)
@example("x" * 64)
@example("é" * 32)
@example("")
def test_postgresql_identifiers_are_refused_exactly_when_postgresql_would_change_them(
    name: str,
) -> None:
    changed = len(name.encode()) > 63 or not name or "\x00" in name
    assert (identifier_problem(name) is not None) == changed
    schema = pa.schema([pa.field(name, pa.int64())])
    if changed:
        with pytest.raises(OptionError, match="PostgreSQL cannot keep") as error:
            column_plan(schema, None, include_metadata=False)
        assert error.value.value == name
    else:
        [column] = column_plan(schema, None, include_metadata=False)
        assert column.name == name  # quoted by psycopg2.sql.Identifier, never altered


def test_a_64_byte_column_name_fails_naming_the_column_and_the_limit() -> None:
    name = "é" * 32  # 64 bytes, 32 characters
    with pytest.raises(OptionError, match=r"64 bytes long; PostgreSQL keeps only the first 63"):
        column_plan(pa.schema([pa.field(name, pa.string())]), None, include_metadata=True)


@pytest.mark.parametrize("option", ["table_name", "schema_name"])
def test_postgresql_table_and_schema_names_over_63_bytes_are_option_errors(option: str) -> None:
    given_options = {"dbname": "d", "table_name": "t", option: "ü" * 32}
    with pytest.raises(OptionError, match="63") as error:
        PostgreSQLOptions.from_options(given_options)
    assert error.value.option == option


# ---------------------------------------------------------------- BigQuery


def unquote_backticks(text: str) -> str:
    """A backtick-quoted BigQuery identifier read back (GoogleSQL's escapes)."""
    assert text.startswith("`")
    assert text.endswith("`")
    body, out, i = text[1:-1], [], 0
    while i < len(body):
        assert body[i] != "`", "an unescaped backtick inside"
        if body[i] == "\\":
            out.append(body[i + 1])
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


@given(nasty_text)
def test_bigquery_quoted_identifiers_read_back_as_the_name(name: str) -> None:
    assert unquote_backticks(quote(name)) == name


@given(nasty_text)
def test_bigquery_column_names_with_a_backtick_backslash_or_control_are_refused(
    name: str,
) -> None:
    bad = (
        not name
        or len(name) > 300
        or any(c in name for c in "`\\\n\r\t\x00")
        or not name.isprintable()
        or name.lower().startswith(
            ("_table_", "_file_", "_partition", "_row_timestamp", "__root__")
        )
    )
    if bad:
        with pytest.raises(OptionError):
            check_column_name(name)
    else:
        check_column_name(name)


def bigquery(**extra: str) -> BigQueryOptions:
    return BigQueryOptions.from_options(
        {"project_id": "p", "dataset_id": "d", "table_name": "t", **extra}
    )


@pytest.mark.parametrize("project", ["example.com:my-project", "google.com:p-1", "my-project"])
def test_bigquery_domain_scoped_projects_are_accepted_and_split_right(project: str) -> None:
    opts = bigquery(project_id=project, dataset_id="ds_1", table_name="events")
    assert split_table_id(opts.table_path) == (project, "ds_1", "events")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("project_id", "proj\n"),
        ("project_id", "a.b"),
        ("project_id", "proj`; DROP"),
        ("project_id", "1proj"),
        ("dataset_id", "ds\n"),
        ("dataset_id", "ds.x"),
        ("table_name", "events\n"),
        ("table_name", "ev`ents"),
        ("table_name", "ev.ents"),
        ("table_name", "a/b"),
    ],
)
def test_bigquery_refuses_names_it_cannot_take_naming_the_option(option: str, value: str) -> None:
    with pytest.raises(OptionError, match=f"option '{option}'") as error:
        bigquery(**{option: value})
    assert error.value.option == option
    assert error.value.value == value


def test_a_bigquery_table_name_leaves_room_for_its_staging_table() -> None:
    assert bigquery(table_name="t" * 1013).table_name
    with pytest.raises(OptionError, match="at most 1013"):
        bigquery(table_name="t" * 1014)
    assert bigquery(table_name="t" * 1024, write_mode="direct").table_name
    with pytest.raises(OptionError, match="1026 bytes"):
        bigquery(table_name="é" * 513, write_mode="direct")


# ---------------------------------------------------------------- Redis key templates


def redis_keys(template: str, columns: dict[str, list[Any]]) -> list[bytes]:
    sink = RedisSink(RedisOptions.from_options({"key_template": template}))
    table = pa.table({**columns, "v": [1] * len(next(iter(columns.values())))})
    sink.prepare(table.schema)
    assert sink.records is not None
    batch = SinkBatch(table, sink.records, WriteContext("s", 0))
    _, keys, _ = sink.encoder.keyed(batch)
    return keys.to_pylist()  # type: ignore[no-any-return]


def parse_key(template: str, key: str) -> dict[str, str]:
    """A key read back by its template: each column but the last ends before the first
    separator character that follows it."""
    seps = template_separators(template)
    pattern = ""
    parsed = [(literal, name) for literal, name, _, _ in string.Formatter().parse(template)]
    names = [n for _, n in parsed if n]
    for literal, name in parsed:
        pattern += re.escape(literal)
        if name:
            stop = seps.get(name)
            pattern += f"(?P<{name}>[^{re.escape(stop)}]*)" if stop else f"(?P<{name}>.*)"
    match = re.fullmatch(pattern, key, re.DOTALL)
    assert match is not None
    return {n: match.group(n) for n in names}


@settings(max_examples=200, deadline=None)
@given(
    city=nasty_text,
    site=nasty_text,
    sensor=nasty_text,
    template=st.sampled_from(
        ["sensor:{city}:{site}:{sensor}", "{city}/{site}|{sensor}", "x{city}-_{site}::{sensor}"]
    ),
)
def test_redis_keys_read_back_to_their_columns_or_are_refused(
    city: str, site: str, sensor: str, template: str
) -> None:
    row = {"city": city, "site": site, "sensor": sensor}
    seps = template_separators(template)
    clash = [n for n, s in seps.items() if any(c in row[n] for c in s)]
    columns = {k: [v] for k, v in row.items()}
    if clash:
        with pytest.raises(RecordError, match=rf"of {{{clash[0]}}} \(row 0\) holds") as error:
            redis_keys(template, columns)
        assert error.value.column == clash[0]
        return
    [key] = redis_keys(template, columns)
    assert parse_key(template, key.decode()) == row


def test_two_rows_that_would_build_one_key_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(RecordError, match=r"the value 'a:b' of \{city\} \(row 1\) holds ':'"):
        redis_keys("s:{city}:{id}", {"city": ["a", "a:b"], "id": ["b:c", "c"]})


@pytest.mark.parametrize("template", ["{a}{b}", "{a}x{b}", "k:{a}42{b}"])
def test_redis_templates_with_no_separator_between_columns_are_option_errors(
    template: str,
) -> None:
    with pytest.raises(OptionError, match="put a punctuation character") as error:
        RedisOptions.from_options({"key_template": template})
    assert error.value.option == "key_template"


def test_redis_keys_carry_any_bytes_as_resp_bulk_strings() -> None:
    keys = redis_keys("k:{a}", {"a": ["\r\n*3\r\n$3\r\nDEL", "\x00", "ü"]})
    assert keys == [b"k:\r\n*3\r\n$3\r\nDEL", b"k:\x00", "k:ü".encode()]


# ---------------------------------------------------------------- Pub/Sub attributes


def pubsub_sink(table: pa.Table, **extra: str) -> PubSubSink:
    sink = PubSubSink(
        PubSubOptions.from_options({"project_id": "p", "topic_id": "events", **extra})
    )
    sink.prepare(table.schema)
    return sink


def build(sink: PubSubSink, table: pa.Table, ordered: bool) -> None:
    assert sink.records is not None
    batch = SinkBatch(table, sink.records, WriteContext("s", 0, partition_id=0))
    if ordered:
        sink.messages(batch, DedupeIds("s", 0, 0))
    else:
        sink.frames(batch, DedupeIds("s", 0, 0))


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(min_value=MAX_VALUE_BYTES - 3, max_value=MAX_VALUE_BYTES + 3),
    character=st.sampled_from(["a", "é", "🙂"]),
    ordered=st.booleans(),
)
def test_pubsub_attribute_values_over_1024_bytes_are_refused_naming_row_and_attribute(
    size: int, character: str, ordered: bool
) -> None:
    value = (character * size)[: max(1, size // len(character.encode()))]
    nbytes = len(value.encode())
    table = pa.table({"k": ["a", "b"], "site": ["x", value], "v": [1, 2]})
    extra = {"ordering_key_column": "k"} if ordered else {}
    sink = pubsub_sink(table, attributes_columns="site", key_column="k", **extra)
    if nbytes <= MAX_VALUE_BYTES:
        build(sink, table, ordered)
        return
    with pytest.raises(RecordError, match=r"attribute 'site' of row 1 is \d+ bytes") as error:
        build(sink, table, ordered)
    assert error.value.row == 1


@pytest.mark.parametrize("ordered", [False, True])
def test_pubsub_map_attributes_are_checked_for_names_count_and_bytes(ordered: bool) -> None:
    cases = [
        ({"googlish": "x"}, "starts with 'goog'"),
        ({"n" * 257: "x"}, "is 257 bytes"),
        # _key, 100 from the map and the dedupe attribute
        ({f"a{i}": "x" for i in range(MAX_ATTRIBUTES)}, "row 1 has 102 attributes"),
        ({"bin": "ü" * 600}, "is 1200 bytes"),
    ]
    for attributes, match in cases:
        table = pa.table(
            {
                "k": ["a", "b"],
                "attrs": pa.array(
                    [[("ok", "1")], list(attributes.items())], pa.map_(pa.string(), pa.string())
                ),
                "v": [1, 2],
            }
        )
        extra = {"ordering_key_column": "k"} if ordered else {}
        sink = pubsub_sink(table, attributes_columns="attrs", key_column="k", **extra)
        with pytest.raises(RecordError, match=match) as error:
            build(sink, table, ordered)
        assert error.value.row == 1


def test_pubsub_ordering_keys_over_1024_bytes_are_refused() -> None:
    table = pa.table({"k": ["a", "é" * 513], "v": [1, 2]})
    sink = pubsub_sink(table, ordering_key_column="k", key_column="k")
    with pytest.raises(RecordError, match=r"ordering key of row 1 .* is 1026 bytes") as error:
        build(sink, table, True)
    assert error.value.row == 1
    assert MAX_ORDERING_KEY_BYTES == 1024


@pytest.mark.parametrize("ordered", [False, True])
def test_pubsub_header_bytes_that_are_not_utf8_are_refused_not_replaced(ordered: bool) -> None:
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    table = pa.table(
        {
            "key": pa.array([b"k1", b"k2"], pa.binary()),
            "value": pa.array([b"{}", b"{}"], pa.binary()),
            "topic": ["t", "t"],
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([41, 42], pa.int64()),
            "timestamp": pa.array([1000, 2000], pa.timestamp("ms")),
            "timestampType": pa.array([0, 0], pa.int32()),
            "headers": pa.array(
                [[{"key": "h", "value": b"ok"}], [{"key": "h", "value": b"\xff"}]],
                pa.list_(header),
            ),
        }
    )
    sink = pubsub_sink(table, **({"ordering_key_column": "topic"} if ordered else {}))
    with pytest.raises(RecordError, match=r"attribute 'h' of row 1 holds bytes that are not UTF-8"):
        build(sink, table, ordered)


@given(nasty_text)
def test_pubsub_attribute_names_are_refused_exactly_by_pubsubs_rules(name: str) -> None:
    bad = not name or len(name.encode()) > 256 or name.startswith("goog")
    assert (name_problem(name) is not None) == bad


def test_pubsub_attribute_columns_with_names_pubsub_refuses_are_option_errors() -> None:
    table = pa.table({"goog_x": ["a"], "v": [1]})
    with pytest.raises(OptionError, match="starts with 'goog'") as error:
        pubsub_sink(table, attributes_columns="goog_x")
    assert error.value.option == "attributes_columns"


# ---------------------------------------------------------------- Kinesis, Iceberg


@pytest.mark.parametrize("name", ["events\n", "a/b", "a b", "x" * 129, "ü"])
def test_kinesis_stream_names_outside_the_pattern_are_option_errors(name: str) -> None:
    with pytest.raises(OptionError, match=r"stream_name.*expected a Kinesis stream name") as error:
        KinesisOptions.from_options({"stream_name": name, "region_name": "us-east-1"})
    assert error.value.value == name


def test_kinesis_accepts_every_character_of_its_pattern() -> None:
    name = "Az09_.-" * 18
    assert KinesisOptions.from_options({"stream_name": name[:128]}).stream_name == name[:128]


@pytest.mark.parametrize("name", ["ns.a/b", "ns/x.t", "ns.t\n", "ns.t\x00", "n\\s.t", "ns.t\x1b"])
def test_iceberg_names_holding_separators_or_controls_are_option_errors(name: str) -> None:
    with pytest.raises(OptionError, match="may not hold") as error:
        IcebergOptions.from_options({"table_name": name, "warehouse": "/tmp/warehouse"})
    assert error.value.option == "table_name"


@pytest.mark.parametrize("name", NASTIEST)
def test_the_nastiest_names_are_either_refused_or_kept_by_every_identifier_check(name: str) -> None:
    """No check changes a name: it is taken as it is, or refused with a reason."""
    problem = identifier_problem(name)
    assert problem is None or "63" in problem or "NUL" in problem or "empty" in problem
    assert decode_segment(encode_value(name)) == name
    assert unquote_backticks(quote(name)) == name


def test_bigquery_sql_and_storage_write_paths_keep_a_domain_scoped_project_whole() -> None:
    from quixsinks.sinks.bigquery.ledger import sql_table
    from quixsinks.sinks.bigquery.modes import ExactlyOnce

    mode = ExactlyOnce(bigquery(project_id="example.com:my-project", table_name="ev ents"))
    assert sql_table(mode.options.table_path) == "`example.com:my-project`.`d`.`ev ents`"
    assert sql_table(mode.staging_id) == "`example.com:my-project`.`d`.`ev ents_qs_staging`"


@pytest.mark.parametrize(("tags", "fields"), [(("time",), ("v",)), (("t",), ("time", "v"))])
def test_a_tag_or_field_named_time_is_refused_not_dropped(
    tags: tuple[str, ...], fields: tuple[str, ...]
) -> None:
    """InfluxDB 1.x accepts such a write and drops the tag or field silently."""
    with pytest.raises(OptionError, match="cannot be named 'time'") as error:
        LineProtocol(measurement="m", measurement_column=None, tags=tags, fields=fields)
    assert error.value.value == "time"


@pytest.mark.parametrize(
    "sink_id", ["..", ".", "../x", "a/b", "a\\b", "a\nb", "sink\n", "x" * 201, "ü"]
)
def test_file_names_come_from_a_sink_id_that_cannot_leave_the_directory(sink_id: str) -> None:
    from quixsinks.sinks.file import FileOptions

    with pytest.raises(OptionError, match="sink id") as error:
        FileOptions.from_options({"path": "/tmp/out", "sink_id": sink_id})
    assert error.value.option == "sink_id"
