"""Every cell of the type-fidelity matrix (tests/fidelity_matrix.py) against the real sinks.

One Spark batch write per sink for all its lossless and converted value types, one per
error cell, and small writes for the key and record-time rows. Expected values come
from the DataFrame itself (``toArrow``, exact), turned into the documented form of each
sink; what the sink wrote is read back with an independent reader (json, csv, pyarrow,
psycopg2, InfluxQL).
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import json
import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tests.fidelity_matrix import (
    BIGQUERY_EMULATOR_GAPS,
    CASES,
    CONVERSION,
    ERROR,
    LOSSLESS,
    SINKS,
    Case,
)

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

T0 = 1714521600000
VALUE_CASES = [c for c in CASES if c.role == "value"]


class F32:
    """Equal to any number with the same float32 value."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (int, float, decimal.Decimal)):
            return NotImplemented
        return struct.pack("f", float(other)) == struct.pack("f", self.value)

    def __repr__(self) -> str:
        return f"F32({self.value!r})"

    __hash__ = None  # type: ignore[assignment]


def same(read: Any, expected: Any) -> bool:
    if isinstance(expected, F32):
        return expected == read
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(read, float) and math.isnan(read)
    if isinstance(expected, dict):
        return (
            isinstance(read, dict)
            and set(read) == set(expected)
            and all(same(read[k], expected[k]) for k in expected)
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(read, (list, tuple))
            and len(read) == len(expected)
            and all(same(a, b) for a, b in zip(read, expected, strict=True))
        )
    return bool(read == expected)


# ----------------------------------------------------------------------------- frames


def frame(spark: Any, cases: list[Case], *, key: str | None = None) -> Any:
    rows = max(len(c.values) for c in cases) + 1  # the last row is null everywhere
    columns = []
    for case in cases:
        branches = " ".join(
            f"WHEN {i} THEN cast({v} AS {case.spark_type})" for i, v in enumerate(case.values)
        )
        columns.append(
            f"CASE id {branches} ELSE cast(NULL AS {case.spark_type}) END AS {case.name}"
        )
    key_sql = key or "concat('k', id)"
    return spark.sql(
        f"SELECT {key_sql} AS key, timestamp_millis({T0} + id) AS timestamp, id, "
        f"{', '.join(columns)} FROM range({rows})"
    ).coalesce(1)


def write(df: Any, fmt: str, options: dict[str, str]) -> None:
    writer = df.write.format(fmt).mode("append")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


# ----------------------------------------------------------------------------- expectations


def json_form(value: Any, t: pa.DataType) -> Any:
    """A value as the JSON encoding writes it, as json.loads(parse_float=Decimal) reads it."""
    if value is None:
        return None
    if pa.types.is_float32(t):
        return F32(value)
    if pa.types.is_floating(t):
        return decimal.Decimal(repr(value)) if math.isfinite(value) else None
    if pa.types.is_binary(t):
        return base64.b64encode(value).decode("ascii")
    if pa.types.is_timestamp(t):
        text = value.strftime("%Y-%m-%dT%H:%M:%S.%f")
        return text + "Z" if t.tz else text
    if pa.types.is_date(t):
        return value.isoformat()
    if pa.types.is_map(t):
        return {
            (k if pa.types.is_string(t.key_type) else json.dumps(k)): json_form(v, t.item_type)
            for k, v in value
        }
    if pa.types.is_list(t):
        return [json_form(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {f.name: json_form(value[f.name], f.type) for f in t}
    return value


def plain_form(value: Any, t: pa.DataType) -> Any:
    """A value as Arrow gives it back (Parquet); float32 compared as float32."""
    if value is not None and pa.types.is_float32(t):
        return F32(value)
    return value


def pg_form(value: Any, t: pa.DataType) -> Any:
    if pa.types.is_nested(t):
        return json_form(value, t)
    return plain_form(value, t)


def influx_form(value: Any, t: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_decimal(t):
        return float(value)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return json_form(value, t)
    return plain_form(value, t)


def iceberg_form(value: Any, t: pa.DataType) -> Any:
    if value is None and pa.types.is_list(t) and pa.types.is_struct(t.value_type):
        return []  # pyiceberg 0.12's writer drops the null of a list of structs
    return plain_form(value, t)


def bq_form(value: Any, t: pa.DataType) -> Any:
    """A value as google-cloud-bigquery reads it back (maps: key/value records; a null
    REPEATED column: [])."""
    if pa.types.is_map(t):
        entries = value or []
        return [{"key": k, "value": bq_form(v, t.item_type)} for k, v in entries]
    if pa.types.is_list(t):
        return [bq_form(v, t.value_type) for v in value or []]
    if value is None:
        return None
    if pa.types.is_struct(t):
        return {f.name: bq_form(value[f.name], f.type) for f in t}
    return value


#: the two sinks of the one line-protocol encoder: the same cells, the same checks
INFLUX_SINKS = ("influxdb3", "influxdb1")

FORMS: dict[str, Callable[[Any, pa.DataType], Any]] = {
    "bigquery": bq_form,
    "file json": json_form,
    "file csv": json_form,
    "csvfile": json_form,
    "file parquet": plain_form,
    "tsdatalake": plain_form,
    "postgresql": pg_form,
    "influxdb3": influx_form,
    "influxdb1": influx_form,
    "redis": json_form,
    "kinesis": json_form,
    "pubsub": json_form,
    "mqtt": json_form,
    "iceberg": iceberg_form,
}


# ----------------------------------------------------------------------------- readers


def loads(text: str) -> Any:
    return json.loads(text, parse_float=decimal.Decimal)


def read_values(sink: str, where: dict[str, Any], names: list[str]) -> dict[int, dict[str, Any]]:
    """id -> {column: value as read back}."""
    out: dict[int, dict[str, Any]] = {}
    if sink == "file json":
        for path in sorted(Path(where["path"]).glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
                value = loads(line)["_value"]
                out[value["id"]] = value
    elif sink in ("file csv", "csvfile"):
        paths = (
            [Path(where["path"])]
            if sink == "csvfile"
            else sorted(Path(where["path"]).glob("*.csv"))
        )
        for path in paths:
            for row in csv.DictReader(path.open(newline="", encoding="utf-8")):
                value = loads(row["value"])
                out[value["id"]] = value
    elif sink == "file parquet":
        for row in read_parquet(where["path"]).to_pylist():
            out[row["id"]] = row
    elif sink == "tsdatalake":
        for row in read_parquet(where["table"]).to_pylist():
            out[row["id"]] = row
    elif sink == "postgresql":
        pg, table = where["pg"], where["table"]
        types = dict(
            query(
                pg,
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = %s",
                (table,),
            )
        )
        selected = ", ".join(
            f'"{n}"::text' if types[n] == "jsonb" else f'"{n}"' for n in ["id", *names]
        )
        for row in query(pg, f'SELECT {selected} FROM "{table}"'):
            values = {}
            for name, value in zip(["id", *names], row, strict=True):
                if types[name] == "jsonb" and value is not None:
                    value = loads(value)
                elif isinstance(value, memoryview):
                    value = bytes(value)
                values[name] = value
            out[values["id"]] = values
    elif sink == "redis":
        for _, raw in redis_items(where):
            value = loads(raw.decode("utf-8"))
            out[value["id"]] = value
    elif sink == "kinesis":
        for record in kinesis_records(where):
            value = loads(record["Data"].decode("utf-8"))
            out[value["id"]] = value
    elif sink == "pubsub":
        for message in pubsub_messages(where):
            value = loads(message.data.decode("utf-8"))
            out[value["id"]] = value
    elif sink == "mqtt":
        for message in mqtt_messages(where):
            value = loads(message.payload.decode("utf-8"))
            out[value["id"]] = value
    elif sink == "iceberg":
        out = {row["id"]: row for row in iceberg_rows(where)}
    elif sink == "bigquery":
        out = {r["id"]: r for r in bq_rows(where)}
    else:
        influx = where["influx"]
        rows = influx["server"].query(influx["database"], 'SELECT * FROM "fid"')
        out = {row["id"]: row for row in rows}
    return out


def redis_items(where: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """(key without the test's prefix, value) of every string key the test wrote."""
    client, prefix = where["redis"]["client"], where["redis"]["prefix"].encode()
    found = sorted(client.keys(prefix + b"*"))
    return [(k[len(prefix) :], client.get(k)) for k in found]


def kinesis_records(where: dict[str, Any]) -> list[dict[str, Any]]:
    """Every record of the test's stream (GetRecords)."""
    return list(where["kinesis"]["server"].read_all(where["kinesis"]["stream"]))


def pubsub_messages(where: dict[str, Any]) -> list[Any]:
    """Every message the test published (pulled once, then kept)."""
    if "messages" not in where:
        topic = where["pubsub"]
        where["messages"] = topic["server"].pull_all(topic["topic"], idle_seconds=0.5)
    return list(where["messages"])


def mqtt_messages(where: dict[str, Any]) -> list[Any]:
    """Every message the recorder got once the broker delivered all it had (kept)."""
    if "messages" not in where:
        where["messages"] = where["mqtt"]["recorder"].settle()
    return list(where["messages"])


def iceberg_rows(where: dict[str, Any]) -> list[dict[str, Any]]:
    from quixsinks.sinks.iceberg import IcebergOptions
    from quixsinks.sinks.iceberg.client import load_catalog

    catalog = load_catalog(IcebergOptions.from_options(where["options"]))
    if not catalog.table_exists(where["options"]["table_name"]):
        return []
    rows: list[dict[str, Any]] = (
        catalog.load_table(where["options"]["table_name"]).scan().to_arrow().to_pylist()
    )
    return rows


def bq_rows(where: dict[str, Any]) -> list[dict[str, Any]]:
    sink = where["bigquery"]
    try:
        result = sink["client"].query(f"SELECT * FROM `{sink['table']}`").result()
    except Exception as exc:
        if "not found" in str(exc).lower() or "does not exist" in str(exc).lower():
            return []  # no table: nothing landed
        raise
    return [dict(r.items()) for r in result]


def read_parquet(path: str) -> pa.Table:
    files = sorted(str(p) for p in Path(path).glob("*.parquet"))
    schema = pa.unify_schemas([pq.read_schema(f) for f in files], promote_options="permissive")
    return ds.dataset(files, schema=schema, format="parquet").to_table()


def query(pg: dict[str, Any], sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    from .test_postgresql import query as pg_query

    return pg_query(pg, sql, params)


# ----------------------------------------------------------------------------- targets


@pytest.fixture(params=list(SINKS))
def sink(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def target(sink: str, tmp_path: Path, name: str, request: pytest.FixtureRequest) -> tuple:
    """(format, options, where) of a fresh destination for one write."""
    if sink.startswith("file"):
        path = str(tmp_path / name)
        return "file", {"path": path, **SINKS[sink]}, {"path": path}
    if sink == "tsdatalake":
        path = tmp_path / name
        options = {"path": str(path), **SINKS[sink]}
        return "tsdatalake", options, {"table": str(path / SINKS[sink]["table_name"])}
    if sink == "csvfile":
        path = str(tmp_path / f"{name}.csv")
        return "csvfile", {"path": path}, {"path": path}
    if sink == "postgresql":
        pg = request.getfixturevalue("pg")
        return "postgresql", {**pg["options"], "table_name": name}, {"pg": pg, "table": name}
    if sink == "redis":
        redis_sink = request.getfixturevalue("redis_sink")
        return "redis", dict(redis_sink["options"]), {"redis": redis_sink}
    if sink == "kinesis":
        kinesis_sink = request.getfixturevalue("kinesis_sink")
        return "kinesis", dict(kinesis_sink["options"]), {"kinesis": kinesis_sink}
    if sink == "pubsub":
        topic = request.getfixturevalue("pubsub_topic")
        return "pubsub", dict(topic["options"]), {"pubsub": topic}
    if sink == "mqtt":
        mqtt_sink = request.getfixturevalue("mqtt_sink")
        return "mqtt", dict(mqtt_sink["options"]), {"mqtt": mqtt_sink}
    if sink == "iceberg":
        options = {"warehouse": str(tmp_path / "warehouse"), "table_name": f"db.{name}"}
        return "iceberg", options, {"options": dict(options)}
    if sink == "bigquery":
        bigquery_sink = request.getfixturevalue("bigquery_sink")
        return "bigquery", dict(bigquery_sink["options"]), {"bigquery": bigquery_sink}
    # influxdb3 (the stand-in's v3 API) or influxdb1 (the 1.x server with auth): one encoder
    influx = request.getfixturevalue("influx1" if sink == "influxdb1" else "influx")
    options = {
        **influx["options"],
        "measurement": "fid",
        "time_precision": "us",
    }
    return sink, options, {"influx": influx}


def landed(sink: str, where: dict[str, Any]) -> int:
    """How many records a destination holds."""
    if sink.startswith("file"):
        path = Path(where["path"])
        return len([p for p in path.glob("*") if p.is_file()]) if path.exists() else 0
    if sink == "tsdatalake":
        path = Path(where["table"])
        return len(list(path.rglob("*.parquet"))) if path.exists() else 0
    if sink == "csvfile":
        return Path(where["path"]).stat().st_size if Path(where["path"]).exists() else 0
    if sink == "postgresql":
        exists = query(where["pg"], "SELECT to_regclass(%s) IS NOT NULL", (where["table"],))
        return (
            query(where["pg"], f'SELECT count(*) FROM "{where["table"]}"')[0][0]
            if (exists[0][0])
            else 0
        )
    if sink == "redis":
        return len(redis_items(where))
    if sink == "kinesis":
        return len(kinesis_records(where))
    if sink == "pubsub":
        return len(pubsub_messages(where))
    if sink == "mqtt":
        return len(mqtt_messages(where))
    if sink == "iceberg":
        return len(iceberg_rows(where))
    if sink == "bigquery":
        return len(bq_rows(where))
    influx = where["influx"]
    return len(influx["server"].query(influx["database"], 'SELECT * FROM "fid"'))


# ----------------------------------------------------------------------------- tests


def test_values_are_lossless_or_converted_as_declared(
    spark: Any, sink: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cases = [c for c in VALUE_CASES if c.cells[sink][0] in (LOSSLESS, CONVERSION)]
    if sink == "bigquery":
        cases = [c for c in cases if c.name not in BIGQUERY_EMULATOR_GAPS]
    df = frame(spark, cases)
    fmt, options, where = target(sink, tmp_path, "fid", request)
    if sink in INFLUX_SINKS:
        options["fields_keys"] = ",".join(["id", *(c.name for c in cases)])
    write(df, fmt, options)
    source = df.toArrow()
    expected_rows = source.to_pylist()
    read = read_values(sink, where, [c.name for c in cases])
    assert sorted(read) == [r["id"] for r in expected_rows]
    form = FORMS[sink]
    failures = []
    for case in cases:
        t = source.schema.field(case.name).type
        for row in expected_rows:
            want = form(row[case.name], t)
            got = read[row["id"]].get(case.name)
            if not same(got, want):
                failures.append(f"{case.label} row {row['id']}: wrote {got!r}, expected {want!r}")
    assert failures == []


def error_cases(sink: str) -> list[Case]:
    return [c for c in VALUE_CASES if c.cells[sink][0] == ERROR]


@pytest.mark.parametrize(
    ("sink_name", "case"),
    [(s, c) for s in SINKS for c in error_cases(s)],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_error_cells_fail_clearly_and_write_nothing(
    spark: Any, sink_name: str, case: Case, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    fmt, options, where = target(sink_name, tmp_path, "fid", request)
    if sink_name in INFLUX_SINKS:
        options["fields_keys"] = f"id,{case.name}"
    with pytest.raises(Exception, match=r"(OptionError|RecordError)") as failure:
        write(frame(spark, [case]), fmt, options)
    assert case.name in str(failure.value) or sink_name == "postgresql"
    assert landed(sink_name, where) == 0


KEY_CASES = [c for c in CASES if c.role == "key"]


def key_form(sink: str, value: Any, t: pa.DataType) -> Any:
    if sink == "kinesis" and value is not None:
        if pa.types.is_struct(t):
            return json.dumps(value, separators=(",", ":"))
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if sink == "pubsub":
        if value is None:
            return None
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if pa.types.is_struct(t):
            return json.dumps(value, separators=(",", ":"))
        return value
    if sink == "redis" and value is not None:
        if pa.types.is_struct(t):
            return json.dumps(value, separators=(",", ":")).encode()
        return value.encode() if isinstance(value, str) else value
    if value is None:
        return "" if sink in ("file csv", "csvfile") else None
    if sink in ("file json", "file csv", "csvfile", *INFLUX_SINKS) and pa.types.is_binary(t):
        return value.decode("utf-8", "replace")
    if sink in ("file csv", "csvfile", "postgresql", "bigquery") and pa.types.is_struct(t):
        return json.dumps(value, separators=(",", ":"))
    return value


def read_keys(sink: str, where: dict[str, Any]) -> dict[int, Any]:
    if sink == "file json":
        lines = [
            loads(line)
            for p in sorted(Path(where["path"]).glob("*.jsonl"))
            for line in p.read_text(encoding="utf-8").split("\n")[:-1]
        ]
        return {line["_value"]["id"]: line["_key"] for line in lines}
    if sink in ("file csv", "csvfile"):
        paths = (
            [Path(where["path"])]
            if sink == "csvfile"
            else sorted(Path(where["path"]).glob("*.csv"))
        )
        rows = [r for p in paths for r in csv.DictReader(p.open(newline="", encoding="utf-8"))]
        return {loads(r["value"])["id"]: r["key"] for r in rows}
    if sink == "file parquet":
        return {r["id"]: r["_key"] for r in read_parquet(where["path"]).to_pylist()}
    if sink == "tsdatalake":
        return {r["id"]: r["key"] for r in read_parquet(where["table"]).to_pylist()}
    if sink == "postgresql":
        rows = query(where["pg"], f'SELECT id, __key FROM "{where["table"]}"')
        return {i: bytes(k) if isinstance(k, memoryview) else k for i, k in rows}
    if sink == "redis":
        return {loads(v.decode())["id"]: k for k, v in redis_items(where)}
    if sink == "kinesis":
        return {loads(r["Data"].decode())["id"]: r["PartitionKey"] for r in kinesis_records(where)}
    if sink == "pubsub":
        return {loads(m.data)["id"]: m.attributes.get("_key") for m in pubsub_messages(where)}
    if sink == "mqtt":
        root = where["mqtt"]["root"] + "/"
        return {loads(m.payload)["id"]: m.topic.removeprefix(root) for m in mqtt_messages(where)}
    if sink == "iceberg":
        return {r["id"]: r["key"] for r in iceberg_rows(where)}
    if sink == "bigquery":
        return {r["id"]: r["__key"] for r in bq_rows(where)}
    influx = where["influx"]
    rows = influx["server"].query(influx["database"], 'SELECT * FROM "fid"')
    return {r["id"]: r.get("__key") for r in rows}


@pytest.mark.parametrize("case", KEY_CASES, ids=lambda c: c.spark_type.split("<")[0])
def test_keys_are_written_as_declared(
    spark: Any, sink: str, case: Case, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rows = len(case.values)
    branches = " ".join(
        f"WHEN {i} THEN cast({v} AS {case.spark_type})" for i, v in enumerate(case.values)
    )
    df = spark.sql(
        f"SELECT CASE id {branches} END AS key, timestamp_millis({T0} + id) AS timestamp, "
        f"id FROM range({rows})"
    ).coalesce(1)
    fmt, options, where = target(sink, tmp_path, "fid", request)
    if sink in INFLUX_SINKS:
        options.update(include_metadata_tags="true", fields_keys="id")
    kind = case.cells[sink][0]
    if kind == ERROR:
        with pytest.raises(Exception, match=r"(RecordError|OptionError)"):
            write(df, fmt, options)
        assert landed(sink, where) == 0
        return
    write(df, fmt, options)
    source = df.toArrow()
    t = source.schema.field("key").type
    want = {r["id"]: key_form(sink, r["key"], t) for r in source.to_pylist()}
    got = read_keys(sink, where)
    if sink in ("file csv", "csvfile", "postgresql") and pa.types.is_struct(t):
        got = {i: json.dumps(loads(v), separators=(",", ":")) for i, v in got.items()}
    assert got == want


TIME_CASES = [c for c in CASES if c.role == "time"]


def time_form(sink: str, value: dt.datetime) -> Any:
    if sink == "tsdatalake":
        return value  # the column as it is
    micros = (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if sink in INFLUX_SINKS:
        return micros * 1000  # InfluxQL answers in nanoseconds
    if sink == "iceberg":
        return value
    millis = micros // 1000
    if sink in ("postgresql", "bigquery"):
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=millis)
    return millis if sink != "file csv" and sink != "csvfile" else str(millis)


def read_times(sink: str, where: dict[str, Any]) -> dict[int, Any]:
    if sink == "file json":
        lines = [
            loads(line)
            for p in sorted(Path(where["path"]).glob("*.jsonl"))
            for line in p.read_text(encoding="utf-8").split("\n")[:-1]
        ]
        return {line["_value"]["id"]: line["_timestamp"] for line in lines}
    if sink in ("file csv", "csvfile"):
        paths = (
            [Path(where["path"])]
            if sink == "csvfile"
            else sorted(Path(where["path"]).glob("*.csv"))
        )
        rows = [r for p in paths for r in csv.DictReader(p.open(newline="", encoding="utf-8"))]
        return {loads(r["value"])["id"]: r["timestamp"] for r in rows}
    if sink == "file parquet":
        return {r["id"]: r["_timestamp"] for r in read_parquet(where["path"]).to_pylist()}
    if sink == "postgresql":
        return dict(query(where["pg"], f'SELECT id, timestamp FROM "{where["table"]}"'))
    if sink == "tsdatalake":
        return {r["id"]: r["timestamp"] for r in read_parquet(where["table"]).to_pylist()}
    if sink == "pubsub":
        return {
            loads(m.data)["id"]: int(m.attributes["_timestamp"]) for m in pubsub_messages(where)
        }
    if sink == "iceberg":
        return {r["id"]: r["timestamp"] for r in iceberg_rows(where)}
    if sink == "bigquery":
        return {r["id"]: r["timestamp"] for r in bq_rows(where)}
    influx = where["influx"]
    rows = influx["server"].query(influx["database"], 'SELECT * FROM "fid"')
    return {r["id"]: r["time"] for r in rows}


@pytest.mark.parametrize("case", TIME_CASES, ids=["in-range", "after-2262"])
def test_record_times_are_written_as_declared(
    spark: Any, sink: str, case: Case, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    branches = " ".join(f"WHEN {i} THEN {v}" for i, v in enumerate(case.values))
    df = spark.sql(
        f"SELECT CASE id {branches} END AS timestamp, id FROM range({len(case.values)})"
    ).coalesce(1)
    fmt, options, where = target(sink, tmp_path, "fid", request)
    if sink in INFLUX_SINKS:
        options["fields_keys"] = "id"
    if sink == "kinesis":
        write(df, fmt, {**options, "null_partition_keys": "dedupe_id"})
        found = [loads(r["Data"].decode()) for r in kinesis_records(where)]
        assert sorted(found, key=lambda v: v["id"]) == [
            {"_dedupe_id": v["_dedupe_id"], "id": i}
            for i, v in enumerate(sorted(found, key=lambda v: v["id"]))
        ]
        return
    if sink == "redis":
        options["key_template"] = "t{id}"
        write(df, fmt, options)
        values = {k: loads(v.decode()) for k, v in redis_items(where)}
        assert values == {f"t{i}".encode(): {"id": i} for i in range(len(case.values))}
        return
    if sink == "mqtt":  # no record time: the payload holds the value columns only
        write(df, fmt, options)
        payloads = sorted((loads(m.payload) for m in mqtt_messages(where)), key=lambda v: v["id"])
        assert payloads == [{"id": i} for i in range(len(case.values))]
        return
    if case.cells[sink][0] == ERROR:
        with pytest.raises(Exception, match="outside what InfluxDB can store"):
            write(df, fmt, options)
        assert landed(sink, where) == 0
        return
    write(df, fmt, options)
    want = {r["id"]: time_form(sink, r["timestamp"]) for r in df.toArrow().to_pylist()}
    assert read_times(sink, where) == want
