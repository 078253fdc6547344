"""The type-fidelity matrix: what each sink does with each Spark type, declared once.

Each cell is one of:

* ``lossless``: read back equal (tests/integration/test_type_fidelity.py reads it back);
* ``conversion``: written in another, documented form (the note says which; the test
  checks exactly that form);
* ``error``: a clear quixsinks error, and nothing of the write lands.

docs/generate.py renders docs/type-fidelity.md from this module; tests/unit/test_docs.py
keeps the page current. This module imports nothing from quixsinks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LOSSLESS = "lossless"
CONVERSION = "conversion"
ERROR = "error"

#: the columns of the matrix: format name and options
SINKS: dict[str, dict[str, str]] = {
    "file json": {"format": "json"},
    "file parquet": {"format": "parquet"},
    "file csv": {"format": "csv"},
    "csvfile": {},
    "postgresql": {},
    "influxdb3": {},
    "influxdb1": {},
    "redis": {},
    "tsdatalake": {"table_name": "fid"},
    "kinesis": {},
    "pubsub": {},
    "mqtt": {},
    "iceberg": {},
    "bigquery": {},
}

Cell = tuple[str, str]  # (kind, note)


@dataclass(frozen=True)
class Case:
    """One row of the matrix: a Spark type and the values a test writes with it.

    Attributes:
        name: column name in the test's DataFrame.
        label: the row's title in the docs.
        spark_type: the column's Spark SQL type.
        values: Spark SQL expressions, one per row (NULL rows are added by the test).
        cells: sink -> (kind, note).
        role: ``value`` (a value column), ``key`` (the record key) or ``time`` (the
            record timestamp).
    """

    name: str
    label: str
    spark_type: str
    values: tuple[str, ...]
    cells: dict[str, Cell] = field(default_factory=dict)
    role: str = "value"


def _json_text(kind: str, note: str = "") -> dict[str, Cell]:
    """The JSON Lines file and the value column of both CSV sinks share one JSON encoding."""
    return {"file json": (kind, note), "file csv": (kind, note), "csvfile": (kind, note)}


def cells(
    json: Cell, parquet: Cell, postgresql: Cell, influxdb3: Cell, csv: Cell | None = None
) -> dict[str, Cell]:
    out = _json_text(*json)
    if csv is not None:
        out["file csv"] = out["csvfile"] = csv
    out.update({"file parquet": parquet, "postgresql": postgresql, "influxdb3": influxdb3})
    return out


L: Cell = (LOSSLESS, "")
JSONB: Cell = (CONVERSION, "jsonb: the value's JSON text (as in file json)")
NOT_A_FIELD: Cell = (ERROR, "OptionError before any task: not a field type; serialise it first")

CASES: tuple[Case, ...] = (
    Case("c_byte", "byte", "tinyint", ("-128", "127"), cells(L, L, (LOSSLESS, "smallint"), L)),
    Case("c_short", "short", "smallint", ("-32768", "32767"), cells(L, L, L, L)),
    Case("c_int", "int", "int", ("-2147483648", "2147483647"), cells(L, L, L, L)),
    Case(
        "c_long",
        "long",
        "bigint",
        ("-9223372036854775808", "9223372036854775807"),
        cells(L, L, L, L),
    ),
    Case(
        "c_float",
        "float",
        "float",
        ("float(0.1)", "float(-3.4e38)", "float(1.4e-45)"),
        cells(
            (LOSSLESS, "JSON number: the float's shortest text"),
            L,
            (LOSSLESS, "real"),
            (CONVERSION, "float field (a double) of the float's shortest text"),
        ),
    ),
    Case(
        "c_double",
        "double",
        "double",
        ("0.1", "1.7976931348623157e308", "-4.9e-324"),
        cells(L, L, L, L),
    ),
    Case(
        "c_nonfinite",
        "double NaN, Infinity, -Infinity",
        "double",
        ("double('NaN')", "double('Infinity')", "double('-Infinity')"),
        cells(
            (CONVERSION, "JSON null"),
            L,
            L,
            (ERROR, "RecordError; invalid_floats=drop leaves the field out instead"),
        ),
    ),
    Case(
        "c_decimal",
        "decimal(10,2)",
        "decimal(10,2)",
        ("12345678.90", "-0.01"),
        cells(
            (LOSSLESS, "JSON number with the exact digits"),
            L,
            (LOSSLESS, "numeric(10,2)"),
            (CONVERSION, "float field (nearest double); decimal_fields=string: exact text"),
        ),
    ),
    Case(
        "c_decimal38",
        "decimal(38,18)",
        "decimal(38,18)",
        ("99999999999999999999.999999999999999999", "-0.000000000000000001"),
        cells(
            (LOSSLESS, "JSON number with the exact digits"),
            L,
            (LOSSLESS, "numeric(38,18)"),
            (CONVERSION, "float field (nearest double); decimal_fields=string: exact text"),
        ),
    ),
    Case(
        "c_string",
        "string: empty, emoji, newlines, quotes, backslashes",
        "string",
        ("''", "'emoji 😀 ünï'", "'line1\\nline2\\r\\n\"q\", c\\\\'"),
        cells(L, L, (LOSSLESS, "text"), (LOSSLESS, "string field")),
    ),
    Case(
        "c_nul",
        "string with NUL (U+0000)",
        "string",
        ("concat('a', char(0), 'b')",),
        cells(
            (LOSSLESS, "JSON escape \\u0000"),
            L,
            (ERROR, "RecordError: PostgreSQL text cannot hold NUL"),
            (LOSSLESS, "string field"),
        ),
    ),
    Case(
        "c_binary",
        "binary",
        "binary",
        ("X'00FF10'", "X''"),
        cells((CONVERSION, "base64 string"), L, (LOSSLESS, "bytea"), NOT_A_FIELD),
    ),
    Case("c_boolean", "boolean", "boolean", ("true", "false"), cells(L, L, L, L)),
    Case(
        "c_date",
        "date",
        "date",
        ("date'1969-12-31'", "date'9999-12-31'", "date'0001-01-01'"),
        cells(
            (CONVERSION, "ISO 8601 string"),
            L,
            L,
            (CONVERSION, "ISO 8601 string field"),
        ),
    ),
    Case(
        "c_timestamp",
        "timestamp: before 1970, year 9999, microseconds",
        "timestamp",
        (
            "timestamp'1969-12-31 23:59:59.999999'",
            "timestamp'9999-12-31 23:59:59.999999'",
            "timestamp'2024-05-01 12:30:15.123456'",
        ),
        cells(
            (CONVERSION, "ISO 8601 string in UTC with Z and microseconds"),
            L,
            (LOSSLESS, "timestamp with time zone"),
            (CONVERSION, "ISO 8601 string field (UTC, Z)"),
        ),
    ),
    Case(
        "c_timestamp_ntz",
        "timestamp_ntz",
        "timestamp_ntz",
        ("timestamp_ntz'1969-12-31 23:59:59.999999'", "timestamp_ntz'9999-12-31 23:59:59'"),
        cells(
            (CONVERSION, "ISO 8601 string without zone"),
            L,
            (LOSSLESS, "timestamp without time zone"),
            (CONVERSION, "ISO 8601 string field without zone"),
        ),
    ),
    Case(
        "c_array",
        "array<int> with null elements, empty",
        "array<int>",
        ("array(1, NULL, 3)", "array()"),
        cells((LOSSLESS, "JSON array"), L, JSONB, NOT_A_FIELD),
    ),
    Case(
        "c_map",
        "map<string,int> with null values, empty",
        "map<string,int>",
        ("map('a', 1, 'b', NULL)", "map()"),
        cells((LOSSLESS, "JSON object"), L, JSONB, NOT_A_FIELD),
    ),
    Case(
        "c_map_int",
        "map<int,string>",
        "map<int,string>",
        ("map(1, 'x', -2, NULL)",),
        cells(
            (CONVERSION, "JSON object; keys are the JSON text of the key, as strings"),
            L,
            (CONVERSION, "jsonb: keys as strings (as in file json)"),
            NOT_A_FIELD,
        ),
    ),
    Case(
        "c_struct",
        "struct<a:int,b:string> with nulls at every level",
        "struct<a:int,b:string>",
        ("named_struct('a', 1, 'b', NULL)", "named_struct('a', NULL, 'b', 'x')"),
        cells((LOSSLESS, "JSON object"), L, JSONB, NOT_A_FIELD),
    ),
    Case(
        "c_nested",
        "array<struct<d:decimal(38,18), m:map<string,array<double>>, t:timestamp>>",
        "array<struct<d:decimal(38,18),m:map<string,array<double>>,t:timestamp>>",
        (
            "array(named_struct('d', 1.5BD, 'm', map('x', array(0.5, NULL, double('NaN'))),"
            " 't', timestamp'1969-12-31 23:59:59.5'), NULL,"
            " named_struct('d', NULL, 'm', NULL, 't', NULL))",
            "array()",
        ),
        cells(
            (CONVERSION, "JSON: decimals exact numbers, timestamps ISO strings, NaN null"),
            L,
            (CONVERSION, "jsonb: as in file json"),
            NOT_A_FIELD,
        ),
    ),
    Case(
        "key",
        "key: string, and a null key",
        "string",
        ("'k1'", "NULL"),
        {
            **_json_text(LOSSLESS, "_key string or null"),
            "file csv": (CONVERSION, "key field; null is an empty field"),
            "csvfile": (CONVERSION, "key field; null is an empty field"),
            "file parquet": (LOSSLESS, "_key"),
            "postgresql": (LOSSLESS, "__key text"),
            "influxdb3": (CONVERSION, "tag __key with include_metadata_tags; none for null"),
        },
        role="key",
    ),
    Case(
        "key",
        "key: binary",
        "binary",
        ("X'6B31'", "X'FF'"),
        {
            "file json": (
                CONVERSION,
                "UTF-8 text (invalid bytes replaced by U+FFFD); quix_compat=true: such a "
                "key is a RecordError, as in Quix",
            ),
            "file csv": (
                CONVERSION,
                "UTF-8 text (invalid bytes replaced by U+FFFD); quix_compat=true: "
                "Python's str(), b'k1', as Quix",
            ),
            "csvfile": (
                CONVERSION,
                "UTF-8 text (invalid bytes replaced by U+FFFD); quix_compat=true: "
                "Python's str(), b'k1', as Quix",
            ),
            "file parquet": (
                LOSSLESS,
                "_key binary; quix_compat=true: _key string (UTF-8 text, as Quix; other "
                "bytes a RecordError)",
            ),
            "postgresql": (LOSSLESS, "__key bytea"),
            "influxdb3": (
                ERROR,
                "RecordError with include_metadata_tags for bytes that are not UTF-8 "
                "(U+FFFD could merge two series); UTF-8 keys: tag __key",
            ),
        },
        role="key",
    ),
    Case(
        "key",
        "key: struct<a:int,b:string>",
        "struct<a:int,b:string>",
        ("named_struct('a', 1, 'b', 'x')",),
        {
            "file json": (LOSSLESS, "_key JSON object"),
            "file csv": (CONVERSION, "key field: JSON text"),
            "csvfile": (CONVERSION, "key field: JSON text"),
            "file parquet": (LOSSLESS, "_key struct"),
            "postgresql": (CONVERSION, "__key text: JSON text"),
            "influxdb3": (ERROR, "RecordError with include_metadata_tags: not a tag value"),
        },
        role="key",
    ),
    Case(
        "timestamp",
        "record time: timestamp 1677..2262, microseconds",
        "timestamp",
        ("timestamp'1969-12-31 23:59:59.999999'", "timestamp'2024-05-01 12:30:15.123456'"),
        {
            **_json_text(CONVERSION, "_timestamp / timestamp: epoch milliseconds, floored"),
            "file parquet": (CONVERSION, "_timestamp int64 epoch milliseconds, floored"),
            "postgresql": (CONVERSION, "column timestamp: timestamptz, floored to ms"),
            "influxdb3": (LOSSLESS, "point time, in time_precision (here us)"),
        },
        role="time",
    ),
    Case(
        "timestamp",
        "record time: timestamp after 2262",
        "timestamp",
        ("timestamp'9999-12-31 23:59:59.999999'",),
        {
            **_json_text(CONVERSION, "_timestamp / timestamp: epoch milliseconds"),
            "file parquet": (CONVERSION, "_timestamp int64 epoch milliseconds"),
            "postgresql": (CONVERSION, "column timestamp: timestamptz, floored to ms"),
            "influxdb3": (ERROR, "RecordError: outside InfluxDB's 64-bit nanoseconds"),
        },
        role="time",
    ),
)


def _json_payload_column(sink: str, where: str, keys: dict[str, Cell], time: Cell) -> None:
    """A column for a sink whose payload is the JSON object of the value columns, encoded as
    in file json (``where`` names the payload in the notes), with its own key and time cells."""
    for case in CASES:
        if case.role == "value":
            kind, note = case.cells["file json"]
            case.cells[sink] = (
                kind,
                f"in the JSON {where}: {note}" if note else f"in the JSON {where}",
            )
        elif case.role == "key":
            case.cells[sink] = keys[case.label]
        else:
            case.cells[sink] = time


#: redis (data_type=string): keys are Redis keys (bytes); no record time is written
_json_payload_column(
    "redis",
    "value",
    {
        "key: string, and a null key": (
            ERROR,
            "RecordError naming the row of the null key (null_keys=skip skips it); 'k1' as is",
        ),
        "key: binary": (LOSSLESS, "the key's bytes as they are"),
        "key: struct<a:int,b:string>": (CONVERSION, "the key is its JSON text"),
    },
    (CONVERSION, "not written: a Redis value carries no record time"),
)
#: kinesis: the data also holds the `_dedupe_id` member; the key is the partition key (text)
_json_payload_column(
    "kinesis",
    "data",
    {
        "key: string, and a null key": (
            ERROR,
            "RecordError naming the row of the null key (null_partition_keys=dedupe_id: the "
            "record's dedupe id instead); 'k1' as is",
        ),
        "key: binary": (
            CONVERSION,
            "partition key: UTF-8 text (invalid bytes replaced by U+FFFD)",
        ),
        "key: struct<a:int,b:string>": (CONVERSION, "partition key: its JSON text"),
    },
    (CONVERSION, "not written: Kinesis stamps its own ApproximateArrivalTimestamp"),
)
#: pubsub: the key and the record time are Quix's attributes `_key` and `_timestamp` (text)
_json_payload_column(
    "pubsub",
    "data",
    {
        "key: string, and a null key": (LOSSLESS, "attribute _key; a null key sets none"),
        "key: binary": (
            ERROR,
            "RecordError naming the row of bytes that are not UTF-8 (Quix's bytes.decode "
            "raises too; a replacement character would change the key silently); UTF-8 keys: "
            "attribute _key as text",
        ),
        "key: struct<a:int,b:string>": (CONVERSION, "attribute _key: JSON text"),
    },
    (CONVERSION, "attribute _timestamp: epoch milliseconds as text, floored"),
)
#: mqtt: the key is the topic's last level(s), <topic_root>/<key>; a message has no record time
_json_payload_column(
    "mqtt",
    "payload",
    {
        "key: string, and a null key": (
            ERROR,
            "RecordError naming the row of the null key (key_column=none: every message to "
            "topic_root); 'k1' as is, topic <topic_root>/k1",
        ),
        "key: binary": (
            ERROR,
            "RecordError naming the row of bytes that are not UTF-8 (as Quix's bytes.decode); "
            "UTF-8 keys: topic <topic_root>/<text>",
        ),
        "key: struct<a:int,b:string>": (
            ERROR,
            "OptionError before any task: a topic level is text, bytes or a number "
            "(key_serializer for another form)",
        ),
    },
    (CONVERSION, "not written: an MQTT message carries no record time"),
)
#: tsdatalake (unpartitioned here): Parquet files of the DataFrame's columns as they are
for _case in CASES:
    if _case.role == "value":
        _case.cells["tsdatalake"] = _case.cells["file parquet"]
    elif _case.role == "key":
        _case.cells["tsdatalake"] = (LOSSLESS, "column key, as it is")
    else:
        _case.cells["tsdatalake"] = (LOSSLESS, "column timestamp, as it is (Parquet, UTC)")
#: iceberg: every column as a table column of the Iceberg type (written by pyiceberg)
_ICEBERG_NOTES: dict[str, Cell] = {
    "byte": (LOSSLESS, "int (Iceberg has no 8-bit integer)"),
    "short": (LOSSLESS, "int (Iceberg has no 16-bit integer)"),
    "timestamp: before 1970, year 9999, microseconds": (LOSSLESS, "timestamptz"),
    "timestamp_ntz": (LOSSLESS, "timestamp (without zone)"),
    "key: string, and a null key": (LOSSLESS, "the key column as is"),
    "key: binary": (LOSSLESS, "the key column, binary"),
    "key: struct<a:int,b:string>": (LOSSLESS, "the key column, struct"),
    "record time: timestamp 1677..2262, microseconds": (LOSSLESS, "timestamptz column"),
    "record time: timestamp after 2262": (LOSSLESS, "timestamptz column"),
    "array<struct<d:decimal(38,18), m:map<string,array<double>>, t:timestamp>>": (
        CONVERSION,
        "a null array of structs reads back as an empty array (pyiceberg 0.12's writer "
        "drops that null); all else lossless",
    ),
}
for _case in CASES:
    _case.cells["iceberg"] = _ICEBERG_NOTES.get(_case.label, L)
#: bigquery: columns typed from the Spark schema (docs/sinks/bigquery.md), read back with
#: google-cloud-bigquery from bqemulator
_BQ_VALUES: dict[str, Cell] = {
    "c_byte": (LOSSLESS, "INT64"),
    "c_short": (LOSSLESS, "INT64"),
    "c_int": (LOSSLESS, "INT64"),
    "c_long": (LOSSLESS, "INT64"),
    "c_float": (CONVERSION, "FLOAT64: the float's double value"),
    "c_double": (LOSSLESS, "FLOAT64"),
    "c_nonfinite": (LOSSLESS, "FLOAT64"),
    "c_decimal": (LOSSLESS, "NUMERIC"),
    "c_decimal38": (LOSSLESS, "BIGNUMERIC (the emulator cannot store it: unit-tested only)"),
    "c_string": (LOSSLESS, "STRING"),
    "c_nul": (LOSSLESS, "STRING"),
    "c_binary": (LOSSLESS, "BYTES"),
    "c_boolean": (LOSSLESS, "BOOL"),
    "c_date": (LOSSLESS, "DATE"),
    "c_timestamp": (LOSSLESS, "TIMESTAMP"),
    "c_timestamp_ntz": (LOSSLESS, "DATETIME"),
    "c_array": (ERROR, "RecordError: a BigQuery array cannot hold NULL elements"),
    "c_map": (CONVERSION, "RECORD REPEATED of key, value; a null map reads back as []"),
    "c_map_int": (CONVERSION, "RECORD REPEATED of key, value; a null map reads back as []"),
    "c_struct": (LOSSLESS, "RECORD"),
    "c_nested": (
        CONVERSION,
        "RECORD REPEATED, maps as key/value records, BIGNUMERIC (the emulator cannot store "
        "it: unit-tested only)",
    ),
}
_BQ_KEYS: dict[str, Cell] = {
    "key: string, and a null key": (LOSSLESS, "__key STRING"),
    "key: binary": (LOSSLESS, "__key BYTES"),
    "key: struct<a:int,b:string>": (CONVERSION, "__key STRING: JSON text"),
}
for _case in CASES:
    if _case.role == "value":
        _case.cells["bigquery"] = _BQ_VALUES[_case.name]
    elif _case.role == "key":
        _case.cells["bigquery"] = _BQ_KEYS[_case.label]
    else:
        _case.cells["bigquery"] = (CONVERSION, "column timestamp: TIMESTAMP, floored to ms")

#: what bqemulator cannot store, so the integration test leaves it to the unit tests
BIGQUERY_EMULATOR_GAPS = ("c_decimal38", "c_nested")


def markdown() -> str:
    """The matrix as a Markdown table, with a legend."""
    mark = {LOSSLESS: "✅ lossless", CONVERSION: "🔄 conversion", ERROR: "⛔ error"}
    lines = [
        "| Spark type | " + " | ".join(SINKS) + " |",
        "|---" * (len(SINKS) + 1) + "|",
    ]
    for case in CASES:
        row = [case.label.replace("|", "\\|").replace("<", "&lt;")]
        for sink in SINKS:
            kind, note = case.cells[sink]
            text = mark[kind] + (f": {note}" if note else "")
            row.append(text.replace("|", "\\|").replace("<", "&lt;"))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


# influxdb1 shares influxdb3's line-protocol encoder and rows-to-points model: the same cells
for _case in CASES:
    _case.cells.setdefault("influxdb1", _case.cells["influxdb3"])
