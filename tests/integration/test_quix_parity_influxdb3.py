"""Quix parity: the same awkward records through Quix Streams' ``InfluxDB3Sink`` (its
``add()``/``flush()`` called directly, no Kafka) and through the ``influxdb3`` sink (a
Kafka-shaped DataFrame with JSON values) into two databases of the suite's InfluxDB give the
same points, read back with InfluxQL.

The server is the suite's InfluxDB 3 write-API front over Debian's InfluxDB 1.x
(tests/services/influx_front.py): Quix's client writes through the same ``/api/v2/write``
route as against InfluxDB 3. Quix's ``setup()`` is replaced by its first line (the client):
its second, a connectivity check by a Flight (gRPC) query, needs the query API, which the
front does not serve. The differences docs/migrating-from-quix.md lists are tested as such:
a tombstone (Quix raises TypeError on a value that is not a dict; the sink skips it and
counts it) and the ``__key`` tag of a Kafka (bytes) key (Quix writes ``str(key)``,
``b'k0'``; the sink writes the key's text, ``k0``).
"""

from __future__ import annotations

import json
import uuid
import warnings
from datetime import UTC, datetime
from typing import Any

import pytest
from influxdb_client_3 import InfluxDBClient3

from tests.integration.test_influxdb1_parity import BASE_MS, MEASUREMENT, RECORDS, TAGS
from tests.quix_streams import import_quix

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)


def quix_sink_class() -> Any:
    return import_quix("quixstreams.sinks.core.influxdb3").InfluxDB3Sink


def write_with_quix(server: Any, database: str, **options: Any) -> None:
    sink = quix_sink_class()(
        token=server.token,
        host=server.url,
        organization_id="org",
        database=database,
        measurement=MEASUREMENT,
        tags_keys=TAGS,
        **options,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sink._client = InfluxDBClient3(**sink._client_args)  # setup() without the Flight check
        for offset, record in enumerate(RECORDS):
            sink.add(
                value=dict(record),
                key=f"k{offset}".encode(),
                timestamp=BASE_MS + offset * 1000,
                headers=[],
                topic="events",
                partition=0,
                offset=offset,
            )
        sink.flush()


def kafka_rows(values: list[bytes | None]) -> list[tuple[Any, ...]]:
    return [
        (
            f"k{offset}".encode(),
            value,
            "events",
            0,
            offset,
            datetime.fromtimestamp((BASE_MS + offset * 1000) / 1000, UTC),
            0,
        )
        for offset, value in enumerate(values)
    ]


def write_with_quixsinks(
    spark: Any, server: Any, database: str, values: list[bytes | None], **options: str
) -> None:
    writer = spark.createDataFrame(kafka_rows(values), KAFKA_SCHEMA).write.format("influxdb3")
    settings = {
        "host": server.url,
        "token": server.token,
        "organization_id": "org",
        "database": database,
        "measurement": MEASUREMENT,
        "tags_keys": ",".join(TAGS),
        **options,
    }
    writer.mode("append").options(**settings).save()


def stored(server: Any, database: str) -> dict[str, Any]:
    return {
        "points": server.query(database, f"SELECT * FROM {MEASUREMENT} ORDER BY time"),
        "fields": server.field_types(database, MEASUREMENT),
        "tags": sorted(r["tagKey"] for r in server.query(database, "SHOW TAG KEYS")),
    }


@pytest.fixture
def two_databases(influx_server: Any) -> tuple[str, str]:
    names = (f"quix_{uuid.uuid4().hex[:8]}", f"ours_{uuid.uuid4().hex[:8]}")
    for name in names:
        influx_server.create_database(name)
    return names


@pytest.mark.parametrize(
    ("quix_options", "our_options"),
    [
        ({}, {}),
        ({"include_metadata_tags": True}, {"include_metadata_tags": "true"}),
        ({"convert_ints_to_floats": True}, {"convert_ints_to_floats": "true"}),
        ({"fields_keys": ("temp", "note")}, {"fields_keys": "temp,note"}),
    ],
    ids=["defaults", "metadata-tags", "ints-to-floats", "fields-keys"],
)
def test_the_same_records_give_the_same_points_as_quix(
    spark: Any,
    influx_server: Any,
    two_databases: tuple[str, str],
    quix_options: dict[str, Any],
    our_options: dict[str, str],
) -> None:
    quix_db, our_db = two_databases
    write_with_quix(influx_server, quix_db, **quix_options)
    values = [json.dumps(record).encode() for record in RECORDS]
    write_with_quixsinks(spark, influx_server, our_db, values, **our_options)
    theirs, ours = stored(influx_server, quix_db), stored(influx_server, our_db)
    assert len(ours["points"]) == len(RECORDS)
    if "include_metadata_tags" in quix_options:
        # the guide's difference: Quix's client str()s a bytes key into the tag, "b'k0'";
        # the sink writes the key's text, "k0"
        assert [p["__key"] for p in theirs["points"]] == [f"b'k{i}'" for i in range(len(RECORDS))]
        assert [p["__key"] for p in ours["points"]] == [f"k{i}" for i in range(len(RECORDS))]
        for point in theirs["points"]:
            point["__key"] = point["__key"][2:-1]
    assert ours == theirs


def test_a_tombstone_is_skipped_where_quix_raises(
    spark: Any, influx_server: Any, two_databases: tuple[str, str]
) -> None:
    quix_db, our_db = two_databases
    sink = quix_sink_class()(
        token=influx_server.token,
        host=influx_server.url,
        organization_id="org",
        database=quix_db,
        measurement=MEASUREMENT,
    )
    with pytest.raises(TypeError, match="supports only dictionaries"):
        sink.add(
            value=None, key=b"k", timestamp=BASE_MS, headers=[], topic="t", partition=0, offset=0
        )
    values = [json.dumps(RECORDS[0]).encode(), None]
    write_with_quixsinks(spark, influx_server, our_db, values)
    assert len(influx_server.query(our_db, f"SELECT * FROM {MEASUREMENT}")) == 1
