"""The `influxdb3` sink through Spark against a real line-protocol server (see conftest);
what both InfluxDB sinks share is in :mod:`.influx_points`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from quixsinks.sinks.influxdb3 import InfluxDB3Sink

from . import influx_points
from .influx_points import points

write = functools.partial(influx_points.write, "influxdb3")


@pytest.fixture
def readings(spark: Any) -> Any:
    return influx_points.readings(spark)


def test_points_land_with_tags_fields_and_time(readings: Any, influx: dict[str, Any]) -> None:
    influx_points.check_points_land("influxdb3", readings, influx)


@pytest.mark.parametrize("precision", ["s", "ms", "us", "ns"])
def test_every_precision_writes_the_record_time(
    spark: Any, influx: dict[str, Any], precision: str
) -> None:
    influx_points.check_precision("influxdb3", spark, influx, precision)


def test_a_replayed_micro_batch_leaves_no_duplicate_points(
    spark: Any, influx: dict[str, Any], tmp_path: Path
) -> None:
    influx_points.check_replay(InfluxDB3Sink, spark, influx, tmp_path)


def test_429_with_retry_after_is_waited_out(readings: Any, influx: dict[str, Any]) -> None:
    influx["server"].faults.add(429, count=2, retry_after="1")
    influx_points.check_retried("influxdb3", readings, influx)


def test_503_is_retried_with_backoff(readings: Any, influx: dict[str, Any]) -> None:
    influx["server"].faults.add(503, count=1)
    influx_points.check_retried("influxdb3", readings, influx, retry_backoff_seconds="0.1")


def test_backpressure_past_the_deadline_fails_with_the_history(
    readings: Any, influx: dict[str, Any]
) -> None:
    influx_points.check_gives_up("influxdb3", readings, influx, retry_after="1")


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
