"""The `influxdb1` sink through Spark against Debian's InfluxDB 1.x with auth-enabled (see
conftest: the front passes ``/write`` through and can inject faults); points read back
with InfluxQL. What both InfluxDB sinks share is in :mod:`.influx_points`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from quixsinks.sinks.influxdb1 import InfluxDB1Sink

from . import influx_points
from .influx_points import points, sent

write = functools.partial(influx_points.write, "influxdb1")


@pytest.fixture
def readings(spark: Any) -> Any:
    return influx_points.readings(spark)


def test_points_land_with_tags_fields_and_time(readings: Any, influx1: dict[str, Any]) -> None:
    influx_points.check_points_land("influxdb1", readings, influx1)
    types = influx1["server"].field_types(influx1["database"], "env")
    assert types == {"count": "integer", "temp": "float", "ok": "boolean", "note": "string"}


@pytest.mark.parametrize("precision", ["s", "ms", "us", "ns"])
def test_every_precision_writes_the_record_time(
    spark: Any, influx1: dict[str, Any], precision: str
) -> None:
    influx_points.check_precision("influxdb1", spark, influx1, precision)
    assert sent(influx1)[-1]["params"]["precision"] == {"ns": "n", "us": "u"}.get(
        precision, precision
    )


def test_a_replayed_micro_batch_leaves_no_duplicate_points(
    spark: Any, influx1: dict[str, Any], tmp_path: Path
) -> None:
    influx_points.check_replay(InfluxDB1Sink, spark, influx1, tmp_path)


def test_429_with_retry_after_is_waited_out(readings: Any, influx1: dict[str, Any]) -> None:
    influx1["server"].faults.add(429, count=2, retry_after="1")
    influx_points.check_retried("influxdb1", readings, influx1)
    assert sum(r["injected"] for r in sent(influx1)) == 2  # the start-up check's write too


def test_503_is_retried_with_backoff(readings: Any, influx1: dict[str, Any]) -> None:
    influx1["server"].faults.add(503, count=1)
    influx_points.check_retried("influxdb1", readings, influx1, retry_backoff_seconds="0.1")


def test_backpressure_past_the_attempts_fails_with_the_history(
    readings: Any, influx1: dict[str, Any]
) -> None:
    influx_points.check_gives_up("influxdb1", readings, influx1, retry_after="0.2")
    assert points(influx1, "SELECT count(temp) FROM env") == []


def test_a_field_type_conflict_is_a_record_error_naming_the_field(
    spark: Any, influx1: dict[str, Any]
) -> None:
    first = spark.sql("SELECT timestamp_millis(1714521600000) AS timestamp, 1 AS v")
    write(first, influx1, measurement="conflict")
    second = spark.sql("SELECT timestamp_millis(1714521600001) AS timestamp, 'text' AS v")
    with pytest.raises(Exception, match=r'(?s)RecordError.*HTTP 400.*field type conflict.*"v"'):
        write(second, influx1, measurement="conflict")
    assert len(points(influx1, "SELECT v FROM conflict")) == 1


def test_points_beyond_the_retention_policy_are_a_record_error(
    spark: Any, influx1: dict[str, Any]
) -> None:
    influx1["server"]._influxql(
        f'CREATE RETENTION POLICY "hour" ON "{influx1["database"]}" DURATION 1h REPLICATION 1',
        post=True,
    )
    old = spark.sql("SELECT timestamp_millis(1714521600000) AS timestamp, 1 AS v")
    with pytest.raises(Exception, match=r"(?s)RecordError.*beyond retention policy.*older than"):
        write(old, influx1, measurement="m", retention_policy="hour")


def test_retention_policy_and_consistency_reach_the_write_api(
    spark: Any, influx1: dict[str, Any]
) -> None:
    influx1["server"]._influxql(
        f'CREATE RETENTION POLICY "forever" ON "{influx1["database"]}" DURATION INF REPLICATION 1',
        post=True,
    )
    df = spark.sql("SELECT timestamp_millis(1714521600000) AS timestamp, 1 AS v")
    write(df, influx1, measurement="m", retention_policy="forever", consistency="one")
    assert points(influx1, 'SELECT v FROM "forever"."m"')[0]["v"] == 1
    assert points(influx1, "SELECT v FROM m") == []  # not in the default policy
    params = sent(influx1)[-1]["params"]
    assert (params["rp"], params["consistency"]) == ("forever", "one")


def test_a_missing_retention_policy_fails_before_any_task(
    spark: Any, influx1: dict[str, Any]
) -> None:
    df = spark.sql("SELECT timestamp_millis(1714521600000) AS timestamp, 1 AS v")
    with pytest.raises(Exception, match=r"DestinationNotFoundError.*retention policy not found"):
        write(df, influx1, measurement="m", retention_policy="nope")
    assert sum(r["lines"] for r in sent(influx1)) == 0


def test_credentials_can_travel_as_query_parameters(readings: Any, influx1: dict[str, Any]) -> None:
    write(readings, influx1, measurement="env", fields_keys="temp", auth_method="query")
    assert points(influx1, "SELECT count(temp) FROM env")[0]["count"] == 30
    assert all(r["auth"] is None and r["params"]["u"] == "writer" for r in sent(influx1))


def test_basic_auth_is_the_default(readings: Any, influx1: dict[str, Any]) -> None:
    write(readings, influx1, measurement="env", fields_keys="temp")
    assert {r["auth"] for r in sent(influx1)} == {"Basic ***"}
    assert all("p" not in r["params"] for r in sent(influx1))


def test_a_wrong_password_fails_before_any_task(readings: Any, influx1: dict[str, Any]) -> None:
    with pytest.raises(Exception, match=r"DestinationAccessDeniedError.*HTTP 401") as failure:
        write(readings, influx1, measurement="env", password="wrong")
    assert "wrong" not in str(failure.value)
    assert sum(r["lines"] for r in sent(influx1)) == 0


def test_a_user_without_write_privilege_fails_before_any_task(
    readings: Any, influx1: dict[str, Any]
) -> None:
    influx1["server"].create_user("reader", "reader-pw")
    with pytest.raises(Exception, match=r"DestinationAccessDeniedError.*HTTP 403"):
        write(readings, influx1, measurement="env", username="reader", password="reader-pw")


def test_a_missing_database_fails_before_any_task(readings: Any, influx1: dict[str, Any]) -> None:
    with pytest.raises(Exception, match=r"DestinationNotFoundError.*database not found"):
        write(readings, influx1, measurement="env", database="nope")


def test_a_down_server_fails_clearly_before_any_task(
    readings: Any, influx1: dict[str, Any]
) -> None:
    with pytest.raises(Exception, match="cannot reach the server"):
        write(readings, influx1, measurement="env", port="9")


def test_requests_are_batched_and_gzipped_when_asked(
    readings: Any, influx1: dict[str, Any]
) -> None:
    write(readings.coalesce(1), influx1, measurement="env", fields_keys="temp", batch_size="7")
    writes = [r for r in sent(influx1) if r["lines"]]
    assert [r["lines"] for r in writes] == [7, 7, 7, 7, 2]
    assert not any(r["gzip"] for r in writes)  # off by default, as in Quix
    write(readings.coalesce(1), influx1, measurement="env2", fields_keys="temp", enable_gzip="true")
    assert [r["gzip"] for r in sent(influx1) if r["lines"]][-1]
    assert points(influx1, "SELECT count(temp) FROM env2")[0]["count"] == 30


def test_kafka_json_values_become_points_as_in_influxdb3(
    spark: Any, influx1: dict[str, Any]
) -> None:
    df = spark.sql(
        """
        SELECT cast('k1' AS binary) AS key,
               cast('{"sensor": "a", "temp": 21.5, "n": 3}' AS binary) AS value,
               'readings' AS topic, 0 AS partition, cast(7 AS bigint) AS offset,
               timestamp_millis(1714521600000) AS timestamp, 0 AS timestampType
        """
    )
    write(df, influx1, measurement="env", tags_keys="sensor", include_metadata_tags="true")
    (row,) = points(influx1, "SELECT * FROM env")
    assert (row["sensor"], row["temp"], row["n"], row["__key"], row["__topic"]) == (
        "a",
        21.5,
        3,
        "k1",
        "readings",
    )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"tags_keys": "sensor", "fields_keys": "sensor"}, "both a tag and a field"),
        ({"time_key": "note"}, "must be a timestamp or an integer"),
        ({"time_precision": "minute"}, "time_precision"),
        ({"measurement": ""}, "measurement"),
        ({"fields_keys": "nested"}, "cannot be a field"),
        ({"password": None}, "'username' is set but 'password' is not"),
        ({"host": "ftp://127.0.0.1"}, "host"),
        ({"consistency": "most"}, "consistency"),
    ],
)
def test_bad_options_fail_before_any_data_moves(
    spark: Any, influx1: dict[str, Any], options: dict[str, str | None], match: str
) -> None:
    df = spark.sql(
        "SELECT 's' AS sensor, 'n' AS note, named_struct('a', 1) AS nested, "
        "current_timestamp() AS timestamp, 1 AS v"
    )
    given = {**influx1["options"], "measurement": "m", **options}
    writer = df.write.format("influxdb1").mode("append")
    for key, value in given.items():
        if value is not None:
            writer = writer.option(key, value)
    with pytest.raises(Exception, match=match):
        writer.save()
    assert sum(r["lines"] for r in sent(influx1)) == 0
