"""Hostile names and values against the real servers: one test per sink.

Each test writes the nastiest names and values the sink accepts (quotes, backslashes,
newlines, NUL where the destination stores it, look-alike unicode, ``..``, ``/``, the
destination's own metacharacters) and reads them back byte-exact with an independent
client; then it writes the ones the sink refuses and checks that the error names the
value and that nothing moved. docs/security.md ("Hostile names and values") lists what
each sink escapes, quotes or refuses.
"""

from __future__ import annotations

import csv
import functools
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from .streams import fails_before_any_task

#: text that breaks every syntax the sinks speak (SQL, line protocol, RESP, CSV, JSON, paths)
NASTY_VALUES = [
    'it\'s "quoted"',
    "back\\slash\\",
    "new\nline\r\nCRLF",
    "tab\tsemi;colon -- DROP TABLE x;",
    "ümlaut 名前 🙂",
    "\u0430dmin \u202eevil",  # Cyrillic look-alike, right-to-left override
    "../../etc/passwd",
    ",=  {}[]*$%",
    "",
]


def spark_frame(spark: Any, columns: dict[str, str], rows: list[tuple[Any, ...]]) -> Any:
    """A DataFrame with exactly these column names (any characters) and types."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    types = {"string": StringType(), "long": LongType()}
    schema = StructType([StructField(n, types[t]) for n, t in columns.items()])
    return spark.createDataFrame(rows, schema).coalesce(1)


def save(df: Any, fmt: str, options: dict[str, str]) -> None:
    writer = df.write.format(fmt).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


# ---------------------------------------------------------------- PostgreSQL


def test_postgresql_names_and_values(spark: Any, pg: dict[str, Any]) -> None:
    from psycopg2 import sql

    schema_name = 'sch "ema"; --'
    table = 't\'able "x"; DROP TABLE y; --\\ ü'
    columns = {
        "id": "long",
        'col "quoted"': "string",
        "col'single; DROP TABLE t; --": "string",
        "new\nline \\ back": "string",
        "\u0430dmin": "string",  # look-alike of the next one: two columns
        "admin": "string",
        "..": "string",
        "x" * 63: "string",  # the longest name PostgreSQL keeps
        "é" * 31 + "x": "string",  # 63 bytes
    }
    rows = [(i, *([v] * (len(columns) - 1))) for i, v in enumerate(NASTY_VALUES)]
    df = spark_frame(spark, columns, rows)
    options = {
        **pg["options"],
        "table_name": table,
        "schema_name": schema_name,
        "include_metadata": "false",
    }
    save(df, "postgresql", options)

    with pg["server"].connect(pg["dbname"]) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT * FROM {} ORDER BY id").format(sql.Identifier(schema_name, table))
        )
        assert [d.name for d in cur.description] == list(columns)
        assert cur.fetchall() == rows

    # refused before any task: a 64-byte column name, which PostgreSQL would truncate
    long_name = "é" * 32
    bad = spark_frame(spark, {"id": "long", long_name: "string"}, [(1, "a")])
    fails_before_any_task(
        spark,
        lambda: save(bad, "postgresql", {**options, "table_name": "other"}),
        r"64 bytes long; PostgreSQL keeps only the first 63",
    )
    # a NUL in a value (PostgreSQL text cannot hold it): the row is named, nothing lands
    nul = spark_frame(spark, {"id": "long", "note": "string"}, [(1, "ok"), (2, "a\x00b")])
    with pytest.raises(Exception, match=r"column 'note' holds a NUL character .* in row 1"):
        save(nul, "postgresql", {**options, "table_name": "nul"})
    # a table named by the data: the bad row is named, nothing of the batch lands
    unrouted = {k: v for k, v in options.items() if k != "table_name"}
    routed = spark_frame(
        spark, {"id": "long", "kind": "string"}, [(1, "fine"), (2, "ü" * 32), (3, "fine")]
    )
    with pytest.raises(Exception, match=r"'table_name_column' 'kind' names a table .* in row 1"):
        save(routed, "postgresql", {**unrouted, "table_name_column": "kind"})
    with pg["server"].connect(pg["dbname"]) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND relkind = 'r' AND relname NOT LIKE '\\_%%'",
            (schema_name,),
        )
        others = [r[0] for r in cur.fetchall() if r[0] != table]
        for name in others:  # a refused write may have created its table: never a row in it
            cur.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema_name, name))
            )
            assert cur.fetchone() == (0,), name
        assert set(others) <= {"nul", "other"}


# ------------------------------------------------------------ InfluxDB 3 and 1.x (line protocol)


@pytest.mark.parametrize("sink", ["influxdb3", "influxdb1"])
def test_influxdb3_names_and_values(spark: Any, sink: str, request: pytest.FixtureRequest) -> None:
    """Both InfluxDB sinks (one line-protocol encoder): influxdb3 through the stand-in's v3
    API, influxdb1 into InfluxDB 1.x's own /write."""
    from tests.services.influxdb import quote_ident

    influx = request.getfixturevalue("influx1" if sink == "influxdb1" else "influx")

    measurement = 'cpu, "load" =x'
    columns = {
        # a tag key and a field key with line protocol's metacharacters (a comma cannot be
        # listed in tags_keys / fields_keys, which are comma-separated)
        "host name =x": "string",
        'note "field" =y': "string",
        "v": "long",
        "timestamp": "long",
    }
    tags = ["a,b=c d", 'say "hi"', "C:\\temp", "ümlaut 名前", "\u0430dmin", "..", "tab\tx", "cr\rx"]
    notes = [
        'it\'s "quoted"',
        "back\\slash\\",
        "new\nline\r\n",
        "\u202eevil",
        "x,y=z w",
        "..",
        "",
        "ümlaut 🙂",
    ]
    rows = [
        (tag, note, i, 1714521600000 + i)
        for i, (tag, note) in enumerate(zip(tags, notes, strict=True))
    ]
    df = spark_frame(spark, columns, rows)
    options = {
        **influx["options"],
        "measurement": measurement,
        "tags_keys": "host name =x",
        "fields_keys": 'note "field" =y,v',
        "time_key": "timestamp",
        "time_precision": "ms",
    }
    save(df, sink, options)
    found = influx["server"].query(
        influx["database"], f"SELECT * FROM {quote_ident(measurement)} GROUP BY *"
    )
    got = sorted((r["v"], r["host name =x"], r['note "field" =y']) for r in found)
    assert got == [(i, tag, note) for i, (tag, note) in enumerate(zip(tags, notes, strict=True))]

    # refused: a newline in a tag value (line protocol has no escape for it); nothing lands
    bad = spark_frame(
        spark, columns, [("fine", "n", 1, 1714521600001), ("a\nb", "n", 2, 1714521600002)]
    )
    other = {**options, "measurement": "refused"}
    with pytest.raises(Exception, match=r"cannot carry a newline in a tag value .* \(row 1\)"):
        save(bad, sink, other)
    assert influx["server"].query(influx["database"], 'SELECT * FROM "refused"') == []


# ---------------------------------------------------------------- Redis (RESP)


def test_redis_keys_and_values(spark: Any, redis_sink: dict[str, Any]) -> None:
    client, prefix = redis_sink["client"], redis_sink["prefix"]
    cities = ["\r\n*1\r\n$8\r\nFLUSHALL", "nul\x00byte", "ümlaut 名前", "..", "{x}", "sp ace"]
    ids = ["a:b:c", "\r\n", "\x00", "k", "", "🙂"]  # the last column may hold the separator
    rows = [(c, i, v) for c, i, v in zip(cities, ids, NASTY_VALUES, strict=False)]
    df = spark_frame(spark, {"city": "string", "id": "string", "note": "string"}, rows)
    options = {**redis_sink["options"], "key_template": "s:{city}:{id}", "value_column": "note"}
    save(df, "redis", options)
    for city, id_, note in rows:
        assert client.get(f"{prefix}s:{city}:{id_}".encode()) == note.encode()
    assert len(client.keys(prefix + "*")) == len(rows)

    # refused: a city holding ':' would make two rows one key; no key of the batch is set
    bad = spark_frame(
        spark,
        {"city": "string", "id": "string", "note": "string"},
        [("x", "1", "n"), ("a:b", "c", "n")],
    )
    with pytest.raises(Exception, match=r"the value 'a:b' of \{city\} \(row 1\) holds ':'"):
        save(bad, "redis", {**options, "key_prefix": prefix + "bad:"})
    assert client.keys(prefix + "bad:*") == []


# ---------------------------------------------------------------- Kinesis


def test_kinesis_partition_keys(spark: Any, kinesis_sink: dict[str, Any]) -> None:
    keys = ["new\nline", "nul\x00", "ümlaut 名前 🙂", "\u0430dmin", "..", "k" * 256, "'\";--"]
    rows = [(k, i) for i, k in enumerate(keys)]
    df = spark_frame(spark, {"key": "string", "id": "long"}, rows)
    save(df, "kinesis", {**kinesis_sink["options"], "dedupe_id": "none"})
    found = kinesis_sink["server"].read_all(kinesis_sink["stream"])
    got = sorted((r["PartitionKey"], json.loads(r["Data"])["id"]) for r in found)
    assert got == sorted(rows)

    # refused: a 257-character partition key, named by its row; nothing is put
    bad = spark_frame(spark, {"key": "string", "id": "long"}, [("ok", 1), ("k" * 257, 2)])
    stream = f"hostile-{uuid.uuid4().hex[:8]}"
    kinesis_sink["server"].create_stream(stream, shards=1)
    with pytest.raises(Exception, match=r"row 1 .*partition key"):
        save(bad, "kinesis", {**kinesis_sink["options"], "stream_name": stream})
    assert kinesis_sink["server"].read_all(stream) == []
    # refused before any task: a stream name Kinesis cannot have
    fails_before_any_task(
        spark,
        lambda: save(bad, "kinesis", {**kinesis_sink["options"], "stream_name": "a/../b"}),
        r"stream_name.*expected a Kinesis stream name",
    )


# ---------------------------------------------------------------- MQTT


def test_mqtt_topics_payloads_and_user_properties(spark: Any, mqtt_sink: dict[str, Any]) -> None:
    # topic levels: all but the wildcards, NUL and control characters ('/' adds levels)
    keys = [
        "semi;colon -- DROP TABLE x;",
        "\u00fcmlaut \u540d\u524d \U0001f642",
        "\u0430dmin \u202eevil",
        "..",
        "a/b/../c",
        "'\";--",
        " ",
        "$SYS",
    ]
    # payloads: every nasty value (JSON escapes them); user properties: those without
    # control characters (brokers refuse those as malformed, so the sink does first)
    printable = [v for v in NASTY_VALUES if not any(c in v for c in "\n\r\t")]
    rows = [
        (k, i, NASTY_VALUES[i % len(NASTY_VALUES)], printable[i % len(printable)])
        for i, k in enumerate(keys)
    ]
    columns = {"key": "string", "id": "long", "note": "string", "tag": "string"}
    df = spark_frame(spark, columns, rows)
    options = {**mqtt_sink["options"], "version": "5", "properties": "tag"}
    save(df, "mqtt", {**options, "value_columns": "id,note"})
    got = mqtt_sink["recorder"].wait_for(len(rows))
    root = mqtt_sink["root"]
    found = sorted(
        (m.topic, json.loads(m.payload)["id"], json.loads(m.payload)["note"], m.properties["tag"])
        for m in got
    )
    assert found == sorted((f"{root}/{k}", i, n, t) for k, i, n, t in rows)
    bad_tag = spark_frame(
        spark,
        {"key": "string", "id": "long", "tag": "string"},
        [("ok", 1, "fine"), ("ok", 2, "new\nline")],
    )
    with pytest.raises(Exception, match=r"row 1 .*user property 'tag'"):
        save(bad_tag, "mqtt", options)

    # refused: wildcards, NUL and over-long topics, named by their row; nothing is published
    for key in ("a+b", "#", "nul\x00", "new\nline", "del\x7f", "x" * 65536):
        bad = spark_frame(spark, {"key": "string", "id": "long"}, [("ok", 1), (key, 2)])
        with pytest.raises(Exception, match=r"row 1 .*cannot be published to"):
            save(bad, "mqtt", mqtt_sink["options"])
    assert len(mqtt_sink["recorder"].snapshot()) == len(rows)
    fails_before_any_task(
        spark,
        lambda: save(bad, "mqtt", {**mqtt_sink["options"], "topic_root": "a/#"}),
        "not a topic name",
    )


# ---------------------------------------------------------------- Pub/Sub


def test_pubsub_attributes_and_ordering_keys(spark: Any, pubsub_topic: dict[str, Any]) -> None:
    values = [v for v in NASTY_VALUES if v] + ["v" * 1024]
    names = {"key": "string", "site name=ü": "string", "\u0430dmin": "string", "id": "long"}
    rows = [(f"k{i % 2}\n🙂", v, v[::-1], i) for i, v in enumerate(values)]
    df = spark_frame(spark, names, rows)
    options = {
        **pubsub_topic["options"],
        "attributes_columns": "site name=ü,\u0430dmin",
        "ordering_key_column": "key",
    }
    save(df, "pubsub", options)
    messages = pubsub_topic["server"].pull_all(pubsub_topic["topic"])
    got = sorted(
        (
            json.loads(m.data)["id"],
            m.ordering_key,
            m.attributes["site name=ü"],
            m.attributes["\u0430dmin"],
        )
        for m in messages
    )
    assert got == sorted((i, k, v, r) for k, v, r, i in rows)

    # refused: an attribute value of 1026 bytes, named with its row; nothing is published
    # (without ordering keys: the requests the sink serializes itself)
    bad = spark_frame(spark, names, [("k", "fine", "x", 1), ("k", "é" * 513, "x", 2)])
    unordered = {**pubsub_topic["options"], "attributes_columns": options["attributes_columns"]}
    with pytest.raises(Exception, match=r"attribute 'site name=ü' of row 1 is 1026 bytes"):
        save(bad, "pubsub", unordered)
    assert pubsub_topic["server"].pull_all(pubsub_topic["topic"]) == []


# ---------------------------------------------------------------- BigQuery


def test_bigquery_names_and_values(spark: Any, bigquery_sink: dict[str, Any]) -> None:
    client = bigquery_sink["client"]
    # the emulator takes only ASCII table ids (BigQuery takes unicode letters and spaces)
    table = "ev-ents_2"
    columns = {"id": "long", "note": "string", "col with space": "string", "ümlaut_名前": "string"}
    rows = [(i, v, v[::-1], v.upper()) for i, v in enumerate(NASTY_VALUES)]
    df = spark_frame(spark, columns, rows)
    options = {**bigquery_sink["options"], "table_name": table, "include_metadata": "false"}
    save(df, "bigquery", options)
    path = f"{bigquery_sink['options']['project_id']}.{bigquery_sink['dataset']}.{table}"
    found = client.list_rows(path)
    assert [f.name for f in found.schema] == list(columns)
    assert sorted(tuple(r.values()) for r in found) == rows

    # refused before any task: a name BigQuery would read differently
    for option, value in (("table_name", "events\n"), ("project_id", "a.b"), ("dataset_id", "d`x")):
        refused = functools.partial(save, df, "bigquery", {**options, option: value})
        fails_before_any_task(spark, refused, f"option '{option}'")
    bad = spark_frame(spark, {"id": "long", "a`b": "string"}, [(1, "x")])
    fails_before_any_task(
        spark, lambda: save(bad, "bigquery", options), "holds a backtick, backslash or control"
    )


# ---------------------------------------------------------------- Iceberg


def test_iceberg_names_and_values(spark: Any, tmp_path: Path) -> None:
    from quixsinks.sinks.iceberg import IcebergOptions
    from quixsinks.sinks.iceberg.client import load_catalog

    name = "ns ümlaut.ev-ents 名前 'x'"
    columns = {"id": "long", 'col "q"; --': "string", "a.b": "string", "\u0430dmin": "string"}
    rows = [(i, v, v[::-1], v.upper()) for i, v in enumerate(NASTY_VALUES)]
    options = {"warehouse": str(tmp_path / "warehouse"), "table_name": name}
    save(spark_frame(spark, columns, rows), "iceberg", options)
    table = load_catalog(IcebergOptions.from_options(options)).load_table(name)
    found = table.scan().to_arrow()
    assert found.column_names == list(columns)
    assert sorted(tuple(r.values()) for r in found.to_pylist()) == rows

    df = spark_frame(spark, columns, rows)
    for bad in ("ns.a/b", "../x.t", "ns.t\x00"):
        refused = functools.partial(save, df, "iceberg", {**options, "table_name": bad})
        fails_before_any_task(spark, refused, "'table_name'")


# ---------------------------------------------------------------- tsdatalake hive paths on S3


def test_tsdatalake_partition_values_on_s3(spark: Any, request: pytest.FixtureRequest) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from quixsinks.sinks.tsdatalake.wire import decode_segment

    from .test_object_storage import make_store

    store = make_store("s3", request)
    cities = ["a/b", "..", "../../escape", "%2F", "x=y", "__None__", "nul\x00", "ü 名前", "+"]
    rows = [(i, c, 1714521600000) for i, c in enumerate(cities)] + [(99, None, 1714521600000)]
    df = spark_frame(spark, {"id": "long", "city": "string", "ts_ms": "long"}, rows)
    options = {
        "path": store.url,
        "table_name": "lake",
        "hive_columns": "city",
        "timestamp_column": "ts_ms",
        **store.options,
    }
    save(df, "tsdatalake", options)
    dest = store.destination()
    got = []
    for key in dest.list("lake/"):
        if key.endswith(".parquet"):
            segment = key.split("/")[1]
            assert segment.startswith("city="), key
            assert key.count("/") == 2, key
            city = decode_segment(segment[len("city=") :])
            data = pq.read_table(pa.BufferReader(dest.read_bytes(key)))
            got += [(i, city) for i in data.column("id").to_pylist()]
    assert sorted(got) == sorted((i, c) for i, c, _ in rows)

    # refused: a 300-byte value (its directory would be too long), named with its row;
    # nothing is published
    long_value = "ü" * 150
    bad = spark_frame(
        spark, {"id": "long", "city": "string", "ts_ms": "long"}, [(1, "ok", 1), (2, long_value, 1)]
    )
    with pytest.raises(Exception, match=r"row 1 .* hive column 'city' has the value"):
        save(bad, "tsdatalake", {**options, "table_name": "refused"})
    assert [k for k in dest.list("refused/") if k.endswith(".parquet")] == []


# ---------------------------------------------------------------- file and csvfile


def test_file_and_csvfile_column_names_and_values(spark: Any, tmp_path: Path) -> None:
    columns = {
        'na"me': "string",
        "back\\slash": "string",
        "new\nline,comma": "string",
        "id": "long",
    }
    rows = [(v, v[::-1], v.upper(), i) for i, v in enumerate(NASTY_VALUES)]
    df = spark_frame(spark, columns, rows)
    save(df, "file", {"path": str(tmp_path / "json"), "format": "json"})
    found = [
        json.loads(line)
        for p in (tmp_path / "json").glob("*.jsonl")
        for line in p.read_text(encoding="utf-8").splitlines()
    ]
    values = sorted(tuple(r["_value"][c] for c in columns) for r in found)
    assert values == sorted(rows)

    save(df, "csvfile", {"path": str(tmp_path / "out.csv")})
    with open(tmp_path / "out.csv", newline="", encoding="utf-8") as f:
        read = list(csv.DictReader(f))
    assert sorted(json.loads(r["value"])["id"] for r in read) == list(range(len(rows)))
    got = sorted(tuple(json.loads(r["value"])[c] for c in columns) for r in read)
    assert got == sorted(rows)
