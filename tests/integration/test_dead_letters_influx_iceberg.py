"""Row-level errors of `influxdb3`, `influxdb1` and `iceberg` through Spark, with on_error.

Each poison row below meets one row-level error of the sink (the glue's unparseable JSON
too); the good rows land with the sink's guarantee and each bad row lands once in
``dead_letter_path``, also when a micro-batch fails after its dead letters were staged
and is replayed from the checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.testing import faulty

from .poison import SCHEMA as KAFKA_SCHEMA
from .poison import (
    assert_nothing_staged,
    dead_letter,
    dead_letter_offsets,
    kafka_shaped,
    read_dead_letters,
    write_kafka_batches,
)
from .streams import run_available_now

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)


def run_stream(
    spark: Any, tmp_path: Path, fmt: str, options: dict[str, str], batches: list[Any]
) -> None:
    """Stream the Kafka-shaped ``batches`` with ``t``, an epoch-ms time column that is the
    record time except in the row at offset 11 (a time InfluxDB cannot read as ms)."""
    folder = tmp_path / "in"
    if not folder.exists():
        write_kafka_batches(folder, batches)

    def prepare(df: Any) -> Any:
        shaped = kafka_shaped(df.withColumnRenamed("timestamp", "ts"))
        return shaped.selectExpr(
            "*", "CASE WHEN offset = 11 THEN 17 ELSE unix_millis(timestamp) END AS t"
        )

    run_available_now(
        spark, folder, fmt, tmp_path / "ck", options, prepare=prepare, schema=KAFKA_SCHEMA
    )


# ---------------------------------------------------------------------- InfluxDB 3 and 1.x

#: offset: why it is refused (the rows not listed land)
INFLUX_POISON = {
    1: "not JSON (the glue)",
    2: "a tag value with a newline",
    3: "NaN in a field (invalid_floats=error)",
    6: "a field holding an object",
    7: "a field key ending in a backslash",
    9: "a field type conflict the server refuses (v was a float)",
    11: "a time that is not epoch milliseconds",
}
INFLUX_BATCHES = [
    [
        ("k0", '{"sensor": "s0", "v": 0.5}'),
        ("k1", "{not json"),
        ("k2", '{"sensor": "s\\nx", "v": 2.0}'),
        ("k3", '{"sensor": "s3", "v": NaN}'),
        ("k4", '{"sensor": "s4"}'),  # no field: skipped and counted, not refused
        ("k5", '{"sensor": "s5", "v": 5.0}'),
    ],
    [
        ("k6", '{"sensor": "s6", "v": 6.0, "obj": {"x": 1}}'),
        ("k7", '{"sensor": "s7", "v": 7.0, "bad\\\\": 1}'),
        ("k8", '{"sensor": "s8", "v": 8.0}'),
    ],
    [
        ("k9", '{"sensor": "s9", "v": "nine"}'),
        ("k10", '{"sensor": "s10", "w": 10.0}'),
        ("k11", '{"sensor": "s11", "w": 11.0}'),
    ],
]
INFLUX_GOOD = ["s0", "s10", "s5", "s8"]


@pytest.fixture(params=["influxdb3", "influxdb1"])
def influx_any(request: Any) -> tuple[str, dict[str, Any]]:
    """Each InfluxDB sink with a fresh database of its server."""
    fixture = "influx" if request.param == "influxdb3" else "influx1"
    return request.param, request.getfixturevalue(fixture)


def influx_options(influx: dict[str, Any], **extra: str) -> dict[str, str]:
    return {
        **influx["options"],
        "value_columns": "value",  # `t` is no value
        "measurement": "m",
        "tags_keys": "sensor",
        "time_key": "t",
        "time_precision": "ms",
        **extra,
    }


def sensors(influx: dict[str, Any]) -> list[str]:
    rows = influx["server"].query(influx["database"], "SELECT * FROM m")
    return sorted(r["sensor"] for r in rows)


def test_influx_poison_rows_go_to_the_dead_letter_path_once(
    spark: Any, tmp_path: Path, influx_any: tuple[str, dict[str, Any]]
) -> None:
    fmt, influx = influx_any
    options = influx_options(influx, **dead_letter(tmp_path))
    run_stream(spark, tmp_path, fmt, options, INFLUX_BATCHES)
    assert sensors(influx) == INFLUX_GOOD
    assert dead_letter_offsets(tmp_path / "dead") == sorted(INFLUX_POISON)
    letters = {letter["row"]["offset"]: letter for letter in read_dead_letters(tmp_path / "dead")}
    assert {letter["sink"] for letter in letters.values()} == {fmt}
    assert {o: letters[o]["batch_id"] for o in (2, 7, 9, 11)} == {2: 0, 7: 1, 9: 2, 11: 2}
    assert {letter["error"]["type"] for letter in letters.values()} == {"RecordError"}
    assert "NaN" in letters[3]["error"]["message"]
    assert "conflict" in letters[9]["error"]["message"]
    assert letters[9]["row"]["value"] == '{"sensor": "s9", "v": "nine"}'
    assert_nothing_staged(tmp_path / "dead")


def test_influx_skip_drops_the_poison_rows(
    spark: Any, tmp_path: Path, influx_any: tuple[str, dict[str, Any]]
) -> None:
    fmt, influx = influx_any
    run_stream(spark, tmp_path, fmt, influx_options(influx, on_error="skip"), INFLUX_BATCHES)
    assert sensors(influx) == INFLUX_GOOD
    assert not (tmp_path / "dead").exists()


def test_influx_fail_names_the_rows_kafka_offset(
    spark: Any, tmp_path: Path, influx: dict[str, Any]
) -> None:
    batches = [[("k0", '{"sensor": "s0", "v": 1.0}'), ("k1", '{"sensor": "s1", "v": NaN}')]]
    with pytest.raises(Exception, match="topic 'orders' partition 0 offset 1 was refused"):
        run_stream(spark, tmp_path, "influxdb3", influx_options(influx), batches)


def test_influx_invalid_floats_drop_still_wins(
    spark: Any, tmp_path: Path, influx: dict[str, Any]
) -> None:
    """invalid_floats=drop leaves the NaN field out: the row lands with its other field."""
    batches = [[("k0", '{"sensor": "s0", "v": NaN, "w": 1.0}')]]
    options = influx_options(influx, invalid_floats="drop", **dead_letter(tmp_path))
    run_stream(spark, tmp_path, "influxdb3", options, batches)
    assert sensors(influx) == ["s0"]
    assert not list((tmp_path / "dead").glob("*.jsonl"))


def test_influxdb3_refuses_exactly_the_lines_the_server_numbers(
    spark: Any, tmp_path: Path, influx: dict[str, Any]
) -> None:
    """A partial write naming line 2: that row is refused, the other lines sent again."""
    influx["server"].faults.add(
        400,
        count=1,
        body=json.dumps(
            {
                "error": "partial write of line protocol occurred",
                "data": [{"line_number": 2, "error_message": "invalid column type"}],
            }
        ),
    )
    batches = [[(f"k{i}", f'{{"sensor": "s{i}", "v": {i}.5}}') for i in range(3)]]
    run_stream(
        spark, tmp_path, "influxdb3", influx_options(influx, **dead_letter(tmp_path)), batches
    )
    assert sensors(influx) == ["s0", "s2"]
    [letter] = read_dead_letters(tmp_path / "dead")
    assert letter["row"]["offset"] == 1
    assert "invalid column type" in letter["error"]["message"]


def test_influx_server_errors_never_become_dead_letters(
    spark: Any, tmp_path: Path, influx: dict[str, Any]
) -> None:
    """A server answering 500 fails the batch after its retries: nothing is dead-lettered."""
    influx["server"].faults.add(500, count=100)
    options = influx_options(influx, retry_max_attempts="2", **dead_letter(tmp_path))
    with pytest.raises(Exception, match="HTTP 500"):
        run_stream(spark, tmp_path, "influxdb3", options, INFLUX_BATCHES[:1])
    assert not list((tmp_path / "dead").glob("*.jsonl"))


def test_influx_a_failed_commit_replayed_keeps_each_dead_letter_once(
    spark: Any, tmp_path: Path, influx: dict[str, Any]
) -> None:
    from quixsinks.sinks.influxdb3 import InfluxDB3Sink

    quixsinks.register(spark, faulty(InfluxDB3Sink))
    options = influx_options(
        influx,
        fail_batch="0",
        fail_phase="commit-before",
        fail_marker=str(tmp_path / "fired"),
        **dead_letter(tmp_path),
    )
    with pytest.raises(Exception, match="injected failure"):
        run_stream(spark, tmp_path, "faulty_influxdb3", options, INFLUX_BATCHES)
    run_stream(spark, tmp_path, "faulty_influxdb3", options, INFLUX_BATCHES)
    assert sensors(influx) == INFLUX_GOOD
    assert dead_letter_offsets(tmp_path / "dead") == sorted(INFLUX_POISON)
    assert_nothing_staged(tmp_path / "dead")


# ---------------------------------------------------------------------- Iceberg

#: offset: why it is refused (the rows not listed land)
ICEBERG_POISON = {
    1: "not JSON (the glue)",
    2: "no value for the required column id",
    4: "a string in the bigint column v (no schema evolution allows it)",
    6: "a JSON key _key, which Quix's layout uses for the record key",
    8: "a fraction in the bigint column v (beside an integer of the same batch)",
}
ICEBERG_BATCHES = [
    [
        ("k0", '{"id": 0, "v": 1}'),
        ("k1", "{not json"),
        ("k2", '{"v": 2}'),
        ("k3", '{"id": 3, "v": 3}'),
    ],
    [("k4", '{"id": 4, "v": "four"}'), ("k5", '{"id": 5}'), ("k6", '{"id": 6, "_key": "x"}')],
    [("k7", '{"id": 7, "v": 7}'), ("k8", '{"id": 8, "v": 9.5}')],
]
ICEBERG_GOOD = [0, 3, 5, 7]


@pytest.fixture
def ice_table(tmp_path: Path) -> dict[str, Any]:
    """A table made beforehand with a required column: ``id bigint NOT NULL, v bigint``
    (plus Quix's ``_key`` and ``_timestamp``)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    from quixsinks.sinks.iceberg import IcebergOptions
    from quixsinks.sinks.iceberg.client import load_catalog

    options = {
        "warehouse": str(tmp_path / "warehouse"),
        "table_name": "db.events",
        "value_columns": "value",  # `t` is no value
    }
    catalog = load_catalog(IcebergOptions.from_options(options))
    catalog.create_namespace("db")
    catalog.create_table(
        "db.events",
        Schema(
            NestedField(1, "_key", StringType(), required=False),
            NestedField(2, "_timestamp", TimestamptzType(), required=False),
            NestedField(3, "id", LongType(), required=True),
            NestedField(4, "v", LongType(), required=False),
        ),
    )

    def ids() -> list[int]:
        table = catalog.load_table("db.events")
        return sorted(table.scan().to_arrow().column("id").to_pylist())

    return {"options": options, "ids": ids}


def test_iceberg_poison_rows_go_to_the_dead_letter_path_once_with_commit_records(
    spark: Any, tmp_path: Path, ice_table: dict[str, Any]
) -> None:
    options = {**ice_table["options"], "sink_id": "orders", **dead_letter(tmp_path)}
    run_stream(spark, tmp_path, "iceberg", options, ICEBERG_BATCHES)
    assert ice_table["ids"]() == ICEBERG_GOOD
    assert dead_letter_offsets(tmp_path / "dead") == sorted(ICEBERG_POISON)
    letters = {letter["row"]["offset"]: letter for letter in read_dead_letters(tmp_path / "dead")}
    assert {letter["sink"] for letter in letters.values()} == {"iceberg"}
    assert {o: letters[o]["batch_id"] for o in (2, 4, 6, 8)} == {2: 0, 4: 1, 6: 1, 8: 2}
    assert {letter["error"]["type"] for letter in letters.values()} == {"RecordError"}
    assert "required" in letters[2]["error"]["message"]
    assert_nothing_staged(tmp_path / "dead")

    records = quixsinks.commit_records("iceberg", **ice_table["options"], sink_id="orders")
    assert records.column("batch_id").to_pylist() == [0, 1, 2]
    assert records.column("rows").to_pylist() == [4, 3, 2]
    assert records.column("rows_written").to_pylist() == [2, 1, 1]
    assert records.column("dead_lettered").to_pylist() == [2, 2, 1]


def test_iceberg_skip_drops_the_poison_rows(
    spark: Any, tmp_path: Path, ice_table: dict[str, Any]
) -> None:
    options = {**ice_table["options"], "on_error": "skip"}
    run_stream(spark, tmp_path, "iceberg", options, ICEBERG_BATCHES)
    assert ice_table["ids"]() == ICEBERG_GOOD
    records = quixsinks.commit_records("iceberg", **ice_table["options"])
    assert records.column("skipped").to_pylist() == [2, 2, 1]


def test_iceberg_fail_names_the_rows_kafka_offset(
    spark: Any, tmp_path: Path, ice_table: dict[str, Any]
) -> None:
    batches = [[("k0", '{"id": 0, "v": 1}'), ("k1", '{"v": 2}')]]
    with pytest.raises(Exception, match="topic 'orders' partition 0 offset 1 was refused"):
        run_stream(spark, tmp_path, "iceberg", ice_table["options"], batches)
    assert ice_table["ids"]() == []


def test_iceberg_a_failed_commit_replayed_keeps_each_dead_letter_once(
    spark: Any, tmp_path: Path, ice_table: dict[str, Any]
) -> None:
    from quixsinks.sinks.iceberg import IcebergSink

    quixsinks.register(spark, faulty(IcebergSink), check_workers=False)
    options = {
        **ice_table["options"],
        "fail_batch": "1",
        "fail_phase": "commit-before",
        "fail_marker": str(tmp_path / "fired"),
        **dead_letter(tmp_path),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_stream(spark, tmp_path, "faulty_iceberg", options, ICEBERG_BATCHES)
    run_stream(spark, tmp_path, "faulty_iceberg", options, ICEBERG_BATCHES)
    assert ice_table["ids"]() == ICEBERG_GOOD
    assert dead_letter_offsets(tmp_path / "dead") == sorted(ICEBERG_POISON)
    assert_nothing_staged(tmp_path / "dead")
    records = quixsinks.commit_records("iceberg", **ice_table["options"])
    assert records.column("batch_id").to_pylist() == [0, 1, 2]
