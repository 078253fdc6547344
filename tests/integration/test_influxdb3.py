"""The `influxdb3` sink through Spark against a real line-protocol server (see conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.sinks.influxdb3 import InfluxDB3Sink
from quixsinks.testing import faulty

from .streams import run_available_now, write_input_files


def write(df: Any, influx: dict[str, Any], **options: str) -> None:
    writer = df.write.format("influxdb3").mode("append")
    for key, value in {**influx["options"], **options}.items():
        writer = writer.option(key, value)
    writer.save()


def points(influx: dict[str, Any], influxql: str) -> list[dict[str, Any]]:
    return list(influx["server"].query(influx["database"], influxql))


@pytest.fixture
def readings(spark: Any) -> Any:
    return spark.sql(
        """
        SELECT concat('s', cast(id % 3 AS string)) AS sensor, 'eu west' AS site,
               timestamp_millis(1714521600000 + id * 1000) AS timestamp,
               id AS count, cast(id AS double) / 4 AS temp, id % 2 = 0 AS ok,
               concat('say "', cast(id AS string), '"') AS note
        FROM range(30)
        """
    )


def test_points_land_with_tags_fields_and_time(readings: Any, influx: dict[str, Any]) -> None:
    write(
        readings,
        influx,
        measurement="env",
        tags_keys="sensor,site",
        fields_keys="count,temp,ok,note",
        time_precision="ms",
    )
    rows = points(influx, "SELECT * FROM env WHERE count = 7")
    assert len(rows) == 1
    row = rows[0]
    assert (row["sensor"], row["site"], row["count"], row["temp"], row["ok"], row["note"]) == (
        "s1",
        "eu west",
        7,
        1.75,
        False,
        'say "7"',
    )
    assert row["time"] == (1714521600000 + 7000) * 1_000_000
    assert points(influx, "SELECT count(temp) FROM env")[0]["count"] == 30


@pytest.mark.parametrize("precision", ["s", "ms", "us", "ns"])
def test_every_precision_writes_the_record_time(
    spark: Any, influx: dict[str, Any], precision: str
) -> None:
    df = spark.sql("SELECT timestamp_micros(1714521600123456) AS timestamp, 1 AS v")
    write(df, influx, measurement="p", time_precision=precision)
    expected = {
        "s": 1714521600_000000000,
        "ms": 1714521600_123000000,
        "us": 1714521600_123456000,
        "ns": 1714521600_123456000,
    }[precision]
    assert points(influx, "SELECT v FROM p")[0]["time"] == expected


def test_a_replayed_micro_batch_leaves_no_duplicate_points(
    spark: Any, influx: dict[str, Any], tmp_path: Path
) -> None:
    quixsinks.register(spark, faulty(InfluxDB3Sink))
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=20)
    options = {
        **influx["options"],
        "measurement": "orders",
        "tags_keys": "key",
        "fields_keys": "id,amount",
        "fail_batch": "1",
        "fail_phase": "commit-after",
        "fail_marker": str(tmp_path / "fired"),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_influxdb3", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_influxdb3", tmp_path / "ck", options)
    rows = points(influx, "SELECT id FROM orders")
    assert sorted(r["id"] for r in rows) == ids
    writes = [r for r in influx["server"].requests if r["database"] == influx["database"]]
    assert sum(r["lines"] for r in writes) > len(ids)  # batch 1 was really sent twice


def test_429_with_retry_after_is_waited_out(readings: Any, influx: dict[str, Any]) -> None:
    influx["server"].faults.add(429, count=2, retry_after="1")
    write(readings.coalesce(1), influx, measurement="env", fields_keys="temp")
    assert points(influx, "SELECT count(temp) FROM env")[0]["count"] == 30


def test_503_is_retried_with_backoff(readings: Any, influx: dict[str, Any]) -> None:
    influx["server"].faults.add(503, count=1)
    write(
        readings.coalesce(1),
        influx,
        measurement="env",
        fields_keys="temp",
        retry_backoff_seconds="0.1",
    )
    assert points(influx, "SELECT count(temp) FROM env")[0]["count"] == 30


def test_backpressure_past_the_deadline_fails_with_the_history(
    readings: Any, influx: dict[str, Any]
) -> None:
    influx["server"].faults.add(429, count=50, retry_after="1")
    with pytest.raises(Exception, match="gave up after 2 attempt"):
        write(
            readings.coalesce(1),
            influx,
            measurement="env",
            fields_keys="temp",
            retry_max_attempts="2",
        )


def test_retention_422_skips_the_request_with_a_count(
    readings: Any, influx: dict[str, Any]
) -> None:
    influx["server"].faults.add(
        422, count=1, body='{"error": "partial write: points beyond retention policy dropped=30"}'
    )
    write(readings.coalesce(1), influx, measurement="env", fields_keys="temp")
    assert points(influx, "SELECT count(temp) FROM env") == []


def test_retention_422_can_be_an_error(readings: Any, influx: dict[str, Any]) -> None:
    influx["server"].faults.add(422, count=1, body='{"error": "beyond retention policy"}')
    with pytest.raises(Exception, match="retention"):
        write(
            readings.coalesce(1),
            influx,
            measurement="env",
            fields_keys="temp",
            raise_on_retention_violation="true",
        )


def test_a_wrong_token_fails_before_any_task(readings: Any, influx: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="token was refused"):
        write(readings, influx, measurement="env", token="wrong")


def test_a_down_server_fails_clearly_before_any_task(readings: Any, influx: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="cannot reach the server"):
        write(readings, influx, measurement="env", host="http://127.0.0.1:9")


def test_requests_are_gzipped_and_batched(readings: Any, influx: dict[str, Any]) -> None:
    write(readings.coalesce(1), influx, measurement="env", fields_keys="temp", batch_size="7")
    sent = [r for r in influx["server"].requests if r["database"] == influx["database"]]
    assert [r["lines"] for r in sent] == [7, 7, 7, 7, 2]
    assert all(r["gzip"] for r in sent)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"tags_keys": "sensor", "fields_keys": "sensor"}, "both a tag and a field"),
        ({"time_key": "note"}, "must be a timestamp or an integer"),
        ({"time_precision": "minute"}, "time_precision"),
        ({"measurement": ""}, "measurement"),
        ({"fields_keys": "nested"}, "cannot be a field"),
    ],
)
def test_bad_options_fail_before_any_data_moves(
    spark: Any, influx: dict[str, Any], options: dict[str, str], match: str
) -> None:
    df = spark.sql(
        "SELECT 's' AS sensor, 'n' AS note, named_struct('a', 1) AS nested, "
        "current_timestamp() AS timestamp, 1 AS v"
    )
    with pytest.raises(Exception, match=match):
        write(df, influx, **{"measurement": "m", **options})
    assert [r for r in influx["server"].requests if r["database"] == influx["database"]] == []


def test_a_field_type_conflict_is_a_record_error_naming_the_line(
    spark: Any, influx: dict[str, Any]
) -> None:
    first = spark.sql("SELECT timestamp_millis(1714521600000) AS timestamp, 1 AS v")
    write(first, influx, measurement="conflict")
    second = spark.sql("SELECT timestamp_millis(1714521600001) AS timestamp, 'text' AS v")
    with pytest.raises(Exception, match=r"(?s)HTTP 400.*field type conflict.*\[line \d+: "):
        write(second, influx, measurement="conflict")
    assert len(points(influx, "SELECT v FROM conflict")) == 1
