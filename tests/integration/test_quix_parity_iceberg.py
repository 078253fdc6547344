"""Quix parity, Iceberg: Quix Streams' ``IcebergSink`` creates a table in AWS Glue (moto_server's
Glue and S3 on 127.0.0.1) and writes awkward Kafka messages into it; the ``iceberg`` sink
(``catalog_type=glue`` at the same endpoint) continues the same table with the same messages;
pyiceberg's scan reads both writers' rows, in the schema and partition spec Quix made.

Quix builds its Glue catalog itself from ``AWSIcebergConfig`` (region and keys only): its Glue
client reaches moto through ``AWS_ENDPOINT_URL_GLUE`` (boto3 reads it), and its S3 FileIO, which
reads no such variable (pyarrow's S3 filesystem), gets the one catalog property
``s3.endpoint`` set on its catalog before ``setup()``: only the endpoint is changed.

Differences from Quix that remain (each asserted below; docs/sinks/iceberg.md lists them):

* a tombstone (a null value): Quix's sink fails the whole flush (``AttributeError``, it calls
  ``value.keys()``); ours writes the row with ``_key`` and ``_timestamp`` and null value columns;
* a key that is not UTF-8: Quix's sink fails the whole flush (``UnicodeDecodeError``); ours
  refuses that row alone (``RecordError`` naming it; ``on_error`` decides);
* ``_timestamp`` into Quix's zone-less ``timestamp`` column: Quix writes the process's local
  wall time (``datetime.fromtimestamp``), ours the UTC wall time (the same under ``TZ=UTC``,
  as here); a table ours creates has ``timestamptz``;
* a table ours creates: ``_key, _timestamp`` first (Quix: ``_timestamp, _key``), table
  properties ``commit.manifest-merge.enabled`` and zstd Parquet (Quix: ``fanout`` distribution
  mode), one snapshot per micro-batch with the sink id and batch id in its summary.

Quix Streams 3.28.1 is a pinned test dependency (the ``dev`` extra).
"""

from __future__ import annotations

import json
import time
import uuid
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from tests.quix_streams import import_quix

pytest.importorskip("pyiceberg")

BASE_MS = 1714521600000  # 2024-05-01T00:00:00Z
TOPIC = "events"

#: (key, value) as a Kafka topic holds them: the bytes a producer wrote
MESSAGES: list[tuple[bytes | None, bytes | None]] = [
    (b"sensor-1", b'{"id": 1, "temp": 21, "name": "plain", "nested": {"x": 1}}'),
    # another key order; an int key of message 1 holds a float; \u00fc escaped
    (b"sensor-1", b'{"name": "\\u00fc-escaped", "temp": 21.5, "id": 2}'),
    # keys missing; 1e-9; raw UTF-8
    (b"sensor-2", '{"id": 3, "tiny": 1e-9, "name": "ü"}'.encode()),
    # a null key; a negative integer in the float key; an array
    (None, b'{"tags": [1, 2], "temp": -34, "id": 4}'),
]
#: messages Quix's IcebergSink cannot take (each fails its whole flush)
NON_UTF8_KEY: tuple[bytes | None, bytes | None] = (b"\xff\xfe", b'{"id": 5, "temp": 0.5}')
TOMBSTONE: tuple[bytes | None, bytes | None] = (b"sensor-1", None)


def quix_iceberg() -> Any:
    return import_quix("quixstreams.sinks.community.iceberg")


@pytest.fixture
def glue(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A bucket and a Glue database on moto, Quix's process time zone UTC."""
    bucket = f"quix-{uuid.uuid4().hex[:10]}"
    database = f"db_{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    s3_server.client("glue").create_database(DatabaseInput={"Name": database})
    monkeypatch.setenv("AWS_ENDPOINT_URL_GLUE", s3_server.url)
    monkeypatch.setenv("TZ", "UTC")  # Quix writes local wall times: make them UTC
    time.tzset()
    yield {"server": s3_server, "bucket": bucket, "table": f"{database}.events"}
    monkeypatch.undo()
    time.tzset()


def quix_sink(glue: dict[str, Any]) -> Any:
    """Quix's IcebergSink on moto's Glue, its table at s3://<bucket>/events (set up)."""
    module = quix_iceberg()
    opts = glue["server"].options()
    config = module.AWSIcebergConfig(
        aws_s3_uri=f"s3://{glue['bucket']}/events",
        aws_region=opts["region_name"],
        aws_access_key_id=opts["aws_access_key_id"],
        aws_secret_access_key=opts["aws_secret_access_key"],
    )
    sink = module.IcebergSink(table_name=glue["table"], config=config, data_catalog_spec="aws_glue")
    sink.data_catalog.properties["s3.endpoint"] = glue["server"].url  # the one change
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sink.setup()
    return sink


def quix_write(sink: Any, messages: list[tuple[bytes | None, bytes | None]]) -> None:
    """One flush, as a Quix app with JSON values gives them to the sink."""
    for offset, (key, value) in enumerate(messages):
        sink.add(
            value=None if value is None else orjson.loads(value),
            key=key,
            timestamp=BASE_MS + offset * 1000,
            headers=[],
            topic=TOPIC,
            partition=0,
            offset=offset,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sink.flush()


def our_options(glue: dict[str, Any], **extra: str) -> dict[str, str]:
    opts = glue["server"].options()
    return {
        "table_name": glue["table"],
        "data_catalog_spec": "aws_glue",
        "aws_s3_uri": f"s3://{glue['bucket']}/warehouse",
        "aws_endpoint_url": opts["endpoint_url"],
        "aws_region": opts["region_name"],
        "aws_access_key_id": opts["aws_access_key_id"],
        "aws_secret_access_key": opts["aws_secret_access_key"],
        **extra,
    }


def our_write(
    spark: Any,
    messages: list[tuple[bytes | None, bytes | None]],
    options: dict[str, str],
    partitions: int = 2,
) -> None:
    """A Kafka-shaped DataFrame of the messages, written by the ``iceberg`` sink from
    ``partitions`` tasks. Into a new table, one task: each task evolves the table by its own
    rows' JSON, and a task whose ``temp`` holds only integers would make it ``long``, which
    the other task's ``21.5`` cannot widen to (Iceberg has no long-to-double promotion)."""
    rows = [
        (
            key,
            value,
            TOPIC,
            0,
            offset,
            datetime.fromtimestamp((BASE_MS + offset * 1000) / 1000, UTC),
            0,
        )
        for offset, (key, value) in enumerate(messages)
    ]
    schema = (
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int"
    )
    df = spark.createDataFrame(rows, schema).repartition(partitions)
    df.write.format("iceberg").mode("append").options(**options).save()


def load(glue: dict[str, Any]) -> Any:
    """The table through a catalog of its own (pyiceberg's Glue catalog on moto)."""
    from pyiceberg.catalog.glue import GlueCatalog

    opts = glue["server"].options()
    catalog = GlueCatalog(
        "reader",
        **{
            "glue.endpoint": opts["endpoint_url"],
            "glue.region": opts["region_name"],
            "glue.access-key-id": opts["aws_access_key_id"],
            "glue.secret-access-key": opts["aws_secret_access_key"],
            "s3.endpoint": opts["endpoint_url"],
            "s3.region": opts["region_name"],
            "s3.access-key-id": opts["aws_access_key_id"],
            "s3.secret-access-key": opts["aws_secret_access_key"],
        },
    )
    return catalog.load_table(glue["table"])


def canonical(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as sortable text (every column, its Python value's type kept: 21 != 21.0)."""

    def typed(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: typed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [typed(v) for v in value]
        return [type(value).__name__, repr(value)]

    return sorted(json.dumps(typed(row), sort_keys=True) for row in rows)


def test_iceberg_our_sink_continues_the_table_quix_created_on_glue(
    spark: Any, glue: dict[str, Any]
) -> None:
    quix_write(quix_sink(glue), MESSAGES)
    created = load(glue)
    schema_before = created.schema()
    (quix_snapshot,) = created.snapshots()
    theirs = created.scan(snapshot_id=quix_snapshot.snapshot_id).to_arrow().to_pylist()
    assert len(theirs) == len(MESSAGES)

    our_write(spark, [*MESSAGES, TOMBSTONE], our_options(glue))

    table = load(glue)
    # the table Quix made, kept: its columns (ids, types, order), spec, location, properties
    assert table.schema() == schema_before
    assert [(f.field_id, f.name, str(f.field_type)) for f in table.schema().fields[:2]] == [
        (1, "_timestamp", "timestamp"),
        (2, "_key", "string"),
    ]
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("_key", "identity"),
        ("day", "day"),
    ]
    assert table.location() == f"s3://{glue['bucket']}/events"
    assert table.properties.get("write.distribution-mode") == "fanout"
    assert len(table.snapshots()) == 2
    rows = table.scan().to_arrow().to_pylist()
    # every message Quix wrote, written again identically (types too: 21 into Quix's double
    # column is 21.0 in both), plus the tombstone: Quix cannot write one
    tombstone = {f.name: None for f in table.schema().fields}
    tombstone["_key"] = "sensor-1"
    tombstone["_timestamp"] = datetime(2024, 5, 1, 0, 0, len(MESSAGES))
    assert canonical(rows) == canonical([*theirs, *theirs, tombstone])


def test_iceberg_quix_rows_are_the_messages_in_its_layout(spark: Any, glue: dict[str, Any]) -> None:
    """What the continuation test compares against: Quix's rows hold the messages' values
    (naive UTC _timestamp under TZ=UTC, the text key, one column per JSON key)."""
    quix_write(quix_sink(glue), MESSAGES)
    rows = sorted(load(glue).scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["_key"] for r in rows] == ["sensor-1", "sensor-1", "sensor-2", None]
    assert [r["_timestamp"] for r in rows] == [
        datetime(2024, 5, 1, 0, 0, s) for s in range(len(MESSAGES))
    ]
    assert [r["temp"] for r in rows] == [21.0, 21.5, None, -34.0]
    assert [r["name"] for r in rows] == ["plain", "ü-escaped", "ü", None]
    assert rows[2]["tiny"] == 1e-9
    assert rows[0]["nested"] == {"x": 1}
    assert rows[3]["tags"] == [1, 2]


@pytest.mark.parametrize(
    ("message", "error"),
    [(TOMBSTONE, AttributeError), (NON_UTF8_KEY, UnicodeDecodeError)],
    ids=["tombstone", "non-utf8-key"],
)
def test_iceberg_quix_fails_its_whole_flush_where_ours_handles_the_row(
    spark: Any,
    glue: dict[str, Any],
    message: tuple[bytes | None, bytes | None],
    error: type[Exception],
) -> None:
    sink = quix_sink(glue)
    with pytest.raises(error):
        quix_write(sink, [*MESSAGES, message])
    assert load(glue).snapshots() == []  # nothing of the flush landed
    options = our_options(glue, on_error="skip")
    our_write(spark, [*MESSAGES, message], options, partitions=1)
    rows = load(glue).scan().to_arrow().to_pylist()
    if message is TOMBSTONE:
        assert len(rows) == len(MESSAGES) + 1
    else:  # the row is refused alone (on_error=skip here; fail by default names it)
        assert sorted(r["id"] for r in rows) == [1, 2, 3, 4]


def test_iceberg_a_key_that_is_not_utf8_is_refused_naming_the_row(
    spark: Any, glue: dict[str, Any]
) -> None:
    quix_sink(glue)
    with pytest.raises(Exception, match=r"not UTF-8 text") as raised:
        our_write(spark, [*MESSAGES, NON_UTF8_KEY], our_options(glue), partitions=1)
    assert "offset 4" in str(raised.value) or "row 4" in str(raised.value)
    assert load(glue).snapshots() == []


def test_iceberg_a_new_table_has_quix_layout_with_a_zoned_timestamp(
    spark: Any, glue: dict[str, Any]
) -> None:
    """A table our sink creates from the same messages: Quix's columns and partitioning,
    ``_timestamp`` as ``timestamptz`` and ``_key`` first (the listed differences)."""
    our_write(spark, MESSAGES, our_options(glue), partitions=1)
    table = load(glue)
    fields = {f.name: str(f.field_type) for f in table.schema().fields}
    assert [f.name for f in table.schema().fields][:2] == ["_key", "_timestamp"]
    assert fields["_timestamp"] == "timestamptz"
    assert fields["_key"] == "string"
    assert {k: fields[k] for k in ("id", "temp", "name", "tiny", "tags")} == {
        "id": "long",
        "temp": "double",
        "name": "string",
        "tiny": "double",
        "tags": "list<long>",
    }
    assert fields["nested"].startswith("struct<")
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("_key", "identity"),
        ("_timestamp_day", "day"),
    ]
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["_timestamp"] for r in rows] == [
        datetime(2024, 5, 1, 0, 0, s, tzinfo=UTC) for s in range(len(MESSAGES))
    ]
