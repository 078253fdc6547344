"""Quix parity: the same awkward Kafka messages through Quix Streams' ``PostgreSQLSink``
(its ``add()``/``flush()`` called directly, no Kafka) and through the ``postgresql`` sink
(a Kafka-shaped DataFrame, batch writes) into two tables of one database, then compared;
and a table Quix created continued by the ``postgresql`` sink.

Only the differences docs/sinks/postgresql.md lists ("Migrating from Quix Streams") are
normalised, each in one place below: the record time (Quix: ``timestamp`` in the Quix
process's local time, here UTC; ours ``timestamptz``), the key (Quix: a bytes key as
PostgreSQL's bytea text ``\\x6b31`` in a text column; ours ``bytea``, whose text is the
same), ints and floats in one key (Quix: the first message's type, a float rounded into
``bigint``; ours ``double precision``), tombstones (Quix: TypeError; ours: a row of
metadata) and Quix's first-row-columns bug (it writes only the columns of a batch's first
row).

Quix Streams 3.28.1 is a pinned test dependency (the ``dev`` extra).
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg2.extensions
import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.deadletters import Refusals
from quixsinks.core.sink import Receipt, Task
from tests.quix_streams import import_quix

from .test_postgresql import column_types, query, staging_tables
from .test_postgresql_existing_tables import commit, make_sink

BASE_MS = 1714521600123
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: (key, value) as Kafka holds them: mixed ints and floats in one key, keys missing from
#: some messages and in another order, 1e-9, a raw and an escaped ü, nested objects whose
#: keys and number types differ, a repeated key, a key that is not UTF-8, a null key and
#: a tombstone (last: Quix cannot take it)
MESSAGES: list[tuple[bytes | None, bytes | None]] = [
    (b"sensor-1", b'{"id": 0, "reading": -34, "name": "plain", "tags": {"a": 1, "b": [5]}}'),
    (b"sensor-2", b'{"name": "\\u00fc escaped", "id": 1, "reading": 21.5, "tiny": 1e-9}'),
    (
        b"sensor-1",
        '{"id": 2, "name": "ü raw", "ok": true, "tags": {"c": "x", "b": [5.5]}}'.encode(),
    ),
    (b"\xff\xfesensor", b'{"ok": false, "id": 3, "reading": 7}'),
    (None, b'{"id": 4, "reading": 0.1, "name": null}'),
    (b"sensor-3", None),
]
QUIX_MESSAGES = MESSAGES[:-1]  # Quix's PostgreSQLSink raises TypeError on a tombstone


@pytest.fixture(autouse=True)
def utc_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Quix writes ``datetime.fromtimestamp(ms / 1000)``: the wall time of the Quix
    process's zone. These tests run it in UTC (a listed difference otherwise)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def quix_sink_class() -> Any:
    return import_quix("quixstreams.sinks.community.postgresql").PostgreSQLSink


def write_with_quix(
    pg: dict[str, Any],
    table: str,
    messages: list[tuple[Any, bytes | None]],
    *,
    per_message: bool = True,
    first_offset: int = 0,
) -> None:
    """Quix's sink, fed as a Quix app feeds it (value: ``orjson.loads`` of the bytes);
    ``per_message``: one flush (one Quix batch) per message."""
    server = pg["server"]
    # Quix's constructor makes psycopg2 send every list, tuple and dict of the process as
    # JSON (register_adapter): restored once it is done, for the sink under test, which
    # binds lists as arrays
    adapters = dict(psycopg2.extensions.adapters)
    sink = quix_sink_class()(
        host=server.host,
        port=server.port,
        dbname=pg["dbname"],
        user=server.user,
        password=server.password,
        table_name=table,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sink.setup()
        try:
            for offset, (key, value) in enumerate(messages, start=first_offset):
                sink.add(
                    value=None if value is None else orjson.loads(value),
                    key=key,
                    timestamp=BASE_MS + offset,
                    headers=[],
                    topic="events",
                    partition=0,
                    offset=offset,
                )
                if per_message:
                    sink.flush()
            sink.flush()
        finally:
            sink._client.close()
            psycopg2.extensions.adapters.clear()
            psycopg2.extensions.adapters.update(adapters)


def write_with_quixsinks(
    spark: Any,
    pg: dict[str, Any],
    table: str,
    messages: list[tuple[bytes | None, bytes | None]],
    *,
    first_offset: int = 0,
    **options: str,
) -> None:
    rows = [
        (key, value, "events", 0, offset, EPOCH + timedelta(milliseconds=BASE_MS + offset), 0)
        for offset, (key, value) in enumerate(messages, start=first_offset)
    ]
    schema = (
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int"
    )
    writer = spark.createDataFrame(rows, schema).coalesce(1).write.format("postgresql")
    for key, value in {**pg["options"], "table_name": table, **options}.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def read(pg: dict[str, Any], table: str, where: str = "TRUE") -> list[dict[str, Any]]:
    """Every row of ``table`` by id, as column -> value, with the listed differences of
    the metadata columns normalised: the record time as its UTC wall time, the key as
    its text (a bytea's text is ``\\x`` and its hex digits, as Quix writes a bytes key)."""
    types = column_types(pg, table)
    exprs = []
    for name, kind in types.items():
        if kind == "timestamp with time zone":
            exprs.append(f"(\"{name}\" AT TIME ZONE 'UTC')")
        elif name == "__key":
            exprs.append(f'"{name}"::text')
        else:
            exprs.append(f'"{name}"')
    rows = query(pg, f"SELECT {', '.join(exprs)} FROM {table} WHERE {where} ORDER BY id")
    return [dict(zip(types, row, strict=True)) for row in rows]


def record_time(offset: int) -> datetime:
    return (EPOCH + timedelta(milliseconds=BASE_MS + offset)).replace(tzinfo=None)


# ---------------------------------------------------------------------- (a) the same table


def test_the_same_messages_give_the_same_rows_as_quix_but_the_listed_differences(
    spark: Any, pg: dict[str, Any]
) -> None:
    write_with_quix(pg, "quix", QUIX_MESSAGES)  # a batch per message: no first-row bug
    write_with_quixsinks(spark, pg, "ours", MESSAGES)

    theirs_types, our_types = column_types(pg, "quix"), column_types(pg, "ours")
    listed = {
        "timestamp": ("timestamp without time zone", "timestamp with time zone"),
        "__key": ("text", "bytea"),
        "reading": ("bigint", "double precision"),  # Quix: the first message's type
    }
    assert set(our_types) == set(theirs_types)
    for name, (quix_type, our_type) in listed.items():
        assert (theirs_types.pop(name), our_types.pop(name)) == (quix_type, our_type)
    assert our_types == theirs_types

    theirs = read(pg, "quix")
    ours = read(pg, "ours", "id IS NOT NULL")  # the tombstone's row: see below
    # ints and floats in one key: Quix rounds the floats into its bigint column
    assert [r.pop("reading") for r in theirs] == [-34, 22, None, 7, 0]
    assert [r.pop("reading") for r in ours] == [-34.0, 21.5, None, 7.0, 0.1]
    assert ours == theirs
    assert [r["__key"] for r in ours] == [
        "\\x73656e736f722d31",
        "\\x73656e736f722d32",
        "\\x73656e736f722d31",
        "\\xfffe73656e736f72",
        None,
    ]
    assert [r["timestamp"] for r in ours] == [record_time(i) for i in range(5)]
    assert [r["name"] for r in ours] == ["plain", "ü escaped", "ü raw", None, None]
    assert [r["tiny"] for r in ours] == [None, 1e-9, None, None, None]
    # each message's own nested object, as Quix writes it (not the batch's union of keys)
    assert [r["tags"] for r in ours] == [
        {"a": 1, "b": [5]},
        None,
        {"b": [5.5], "c": "x"},
        None,
        None,
    ]


def test_a_tombstone_is_a_row_of_metadata_where_quix_raises(spark: Any, pg: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="supports only dictionaries"):
        write_with_quix(pg, "quix", MESSAGES[-1:])
    write_with_quixsinks(spark, pg, "ours", MESSAGES)
    (tombstone,) = read(pg, "ours", "id IS NULL")
    assert tombstone["__key"] == "\\x73656e736f722d33"
    assert tombstone["timestamp"] == record_time(5)
    assert {k: v for k, v in tombstone.items() if k not in ("__key", "timestamp")} == {
        "id": None,
        "reading": None,
        "name": None,
        "tags": None,
        "tiny": None,
        "ok": None,
    }


def test_quix_writes_only_the_columns_of_a_batchs_first_row_and_we_write_every_value(
    spark: Any, pg: dict[str, Any]
) -> None:
    """Quix's first-row-columns bug: in one batch, the values of keys the first message
    lacks are dropped (their columns are added, left NULL); a first message without a key
    drops every key of the batch."""
    null_key_first = [QUIX_MESSAGES[4], *QUIX_MESSAGES[:4]]
    write_with_quix(pg, "quix", QUIX_MESSAGES, per_message=False)
    write_with_quix(pg, "quix_null_key_first", null_key_first, per_message=False)
    write_with_quixsinks(spark, pg, "ours", QUIX_MESSAGES)
    theirs, ours = read(pg, "quix"), read(pg, "ours")
    assert [r["tiny"] for r in theirs] == [None] * 5
    assert [r["ok"] for r in theirs] == [None] * 5
    assert [r["tiny"] for r in ours] == [None, 1e-9, None, None, None]
    assert [r["ok"] for r in ours] == [None, None, True, False, None]
    assert [r["__key"] for r in read(pg, "quix_null_key_first")] == [None] * 5


# ---------------------------------------------------------------------- (b) Quix's table


@pytest.mark.parametrize(
    ("quix_keys", "options", "expected_keys"),
    [
        ("str", {}, ["sensor-1", "sensor-2", "sensor-1", "sensor-9", "sensor-1"]),
        (
            "bytes",
            {"key_text_format": "hex"},
            [
                "\\x73656e736f722d31",
                "\\x73656e736f722d32",
                "\\x73656e736f722d31",
                "\\x73656e736f722d39",
                "\\x73656e736f722d31",
            ],
        ),
    ],
    ids=["str-keys-utf8", "bytes-keys-hex"],
)
def test_our_sink_continues_a_table_quix_created(
    spark: Any,
    pg: dict[str, Any],
    quix_keys: str,
    options: dict[str, str],
    expected_keys: list[str],
) -> None:
    """Quix's key_deserializer str gives text keys, bytes (its default) bytea text: the
    sink writes the same form with key_text_format utf8 (default) or hex."""

    def key(text: str) -> Any:
        return text if quix_keys == "str" else text.encode()

    write_with_quix(
        pg,
        "events",
        [
            (key("sensor-1"), b'{"id": 0, "reading": -34.5, "name": "a"}'),
            (key("sensor-2"), b'{"id": 1, "reading": 2.5, "tags": {"a": [1]}}'),
        ],
        per_message=False,
    )
    before = column_types(pg, "events")
    assert before["timestamp"] == "timestamp without time zone"
    assert before["__key"] == "text"
    write_with_quixsinks(
        spark,
        pg,
        "events",
        [
            (b"sensor-1", b'{"id": 2, "reading": 7, "name": "\\u00fc", "extra": "new"}'),
            (b"sensor-9", b'{"reading": 1e-9, "id": 3, "tags": {"b": true}}'),
            (b"sensor-1", b'{"id": 4}'),
        ],
        first_offset=2,
        **options,
    )
    after = column_types(pg, "events")
    assert after == {**before, "extra": "text"}  # a new key: a column, as Quix adds it
    rows = query(
        pg, 'SELECT "timestamp", __key, id, reading, name, tags, extra FROM events ORDER BY id'
    )
    assert [r[0] for r in rows] == [record_time(i) for i in range(5)]  # UTC wall time
    assert [r[1] for r in rows] == expected_keys
    assert [r[2:] for r in rows] == [
        (0, -34.5, "a", None, None),
        (1, 2.5, None, None, None),  # Quix's first-row bug dropped its tags
        (2, 7.0, "ü", None, "new"),
        (3, 1e-9, None, {"b": True}, None),
        (4, None, None, None, None),
    ]
    assert staging_tables(pg) == []


def test_a_key_that_is_not_utf8_is_a_row_refusal_naming_the_row(
    spark: Any, pg: dict[str, Any]
) -> None:
    write_with_quix(pg, "events", [("sensor-1", b'{"id": 0}')])
    messages = [(b"sensor-2", b'{"id": 1}'), (b"\xff\xfe", b'{"id": 2}'), (b"ok", b'{"id": 3}')]
    with pytest.raises(Exception, match=r"key of row 1 of partition 0 is not valid UTF-8"):
        write_with_quixsinks(spark, pg, "events", messages, first_offset=1)
    assert query(pg, "SELECT id FROM events") == [(0,)]  # nothing moved
    write_with_quixsinks(spark, pg, "events", messages, first_offset=1, on_error="skip")
    assert query(pg, "SELECT id, __key FROM events ORDER BY id") == [
        (0, "sensor-1"),
        (1, "sensor-2"),
        (3, "ok"),
    ]


# ---------------------------------------------------------------------- (c) not lossless


def test_a_type_the_data_does_not_fit_losslessly_says_what_to_change_before_data_moves(
    spark: Any, pg: dict[str, Any]
) -> None:
    """Quix typed ``reading`` by its first message (an int: bigint); a float for it would
    be rounded. The error gives the ALTER TABLE to run; once run, the write lands."""
    write_with_quix(pg, "events", [(b"k", b'{"id": 0, "reading": 1}')])
    messages = [(b"k", b'{"id": 1, "reading": 21.5}')]
    alter = (
        'ALTER TABLE "public"."events" ALTER COLUMN "reading" TYPE double precision '
        'USING "reading"::double precision'
    )
    with pytest.raises(Exception, match="OptionError") as error:
        write_with_quixsinks(spark, pg, "events", messages, first_offset=1, key_text_format="hex")
    assert "column 'reading' of table public.events has type bigint" in str(error.value)
    assert alter in str(error.value)
    assert "from_json" in str(error.value)
    assert query(pg, "SELECT id, reading FROM events") == [(0, 1)]
    assert staging_tables(pg) == []
    query(pg, alter)
    write_with_quixsinks(spark, pg, "events", messages, first_offset=1, key_text_format="hex")
    assert query(pg, "SELECT id, reading FROM events ORDER BY id") == [(0, 1.0), (1, 21.5)]


@pytest.mark.parametrize("mode", ["exactly-once", "prepared", "direct"])
def test_every_write_mode_continues_quixs_table(pg: dict[str, Any], mode: str) -> None:
    """Driven as the Spark glue drives the sink (tasks write, the driver commits), without
    Spark: the metadata columns adapt in every write mode, a key that is not UTF-8 is
    refused alone (on_error=skip)."""
    write_with_quix(pg, "events", [("sensor-1", b'{"id": 0, "tags": {"a": 1}}')])
    kafka = pa.table(
        {
            "key": pa.array([b"sensor-2", b"\xff", None], pa.binary()),
            "value": pa.array([b'{"id": 1, "tags": {"b": [5]}}', b'{"id": 2}', b'{"id": 3}']),
            "topic": ["events"] * 3,
            "partition": pa.array([0] * 3, pa.int32()),
            "offset": pa.array([1, 2, 3], pa.int64()),
            "timestamp": pa.array(
                [EPOCH + timedelta(milliseconds=BASE_MS + i) for i in (1, 2, 3)],
                pa.timestamp("us", "UTC"),
            ),
            "timestampType": pa.array([0] * 3, pa.int32()),
        }
    )
    options = {"table_name": "events", "write_mode": mode, "on_error": "skip"}
    sink = make_sink(pg, kafka.schema, include_metadata="true", key_column="auto", **options)
    context = WriteContext("bench", 0, 0, uuid.uuid4().hex, False)
    task = Task(context, sink.options.retry_policy(), refusals=Refusals("postgresql", "skip"))
    receipt: Receipt[Any] = Receipt("bench", 0, 0, context.attempt_id)
    assert sink.records is not None
    try:
        sink.setup(task)
        receipt.staged.append(sink.write(SinkBatch(kafka, sink.records, context, task=task)))
    finally:
        task.close()
    commit(sink, [receipt])
    assert task.refusals.count == 1
    assert column_types(pg, "events") == {
        "timestamp": "timestamp without time zone",
        "__key": "text",
        "id": "bigint",
        "tags": "jsonb",
    }
    assert query(pg, 'SELECT "timestamp", __key, id, tags FROM events ORDER BY id') == [
        (record_time(0), "sensor-1", 0, {"a": 1}),
        (record_time(1), "sensor-2", 1, {"b": [5]}),
        (record_time(3), None, 3, None),
    ]
    assert staging_tables(pg) == []
