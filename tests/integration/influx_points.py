"""What the tests of both InfluxDB sinks share (``influxdb1``, ``influxdb3``): writing through
Spark, reading points back with InfluxQL, and the behaviours both sinks must show (the same
rows-to-points model, replays, backpressure). Each test module passes its format name and
its server fixture (``influx1`` or ``influx``: ``server``, ``database``, ``options``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.core.sink import Sink
from quixsinks.testing import faulty

from .streams import run_available_now, write_input_files


def write(fmt: str, df: Any, influx: dict[str, Any], **options: str) -> None:
    """A batch write of ``df`` in format ``fmt`` with the fixture's options and ``options``."""
    writer = df.write.format(fmt).mode("append")
    for key, value in {**influx["options"], **options}.items():
        writer = writer.option(key, value)
    writer.save()


def points(influx: dict[str, Any], influxql: str) -> list[dict[str, Any]]:
    return list(influx["server"].query(influx["database"], influxql))


def sent(influx: dict[str, Any]) -> list[Any]:
    """The write requests of this test's database, as the server's front saw them."""
    return [r for r in influx["server"].requests if r["database"] == influx["database"]]


def readings(spark: Any) -> Any:
    """30 rows: 3 sensors, one site, a time per second, and fields of four types."""
    return spark.sql(
        """
        SELECT concat('s', cast(id % 3 AS string)) AS sensor, 'eu west' AS site,
               timestamp_millis(1714521600000 + id * 1000) AS timestamp,
               id AS count, cast(id AS double) / 4 AS temp, id % 2 = 0 AS ok,
               concat('say "', cast(id AS string), '"') AS note
        FROM range(30)
        """
    )


def check_points_land(fmt: str, readings: Any, influx: dict[str, Any]) -> None:
    """Tags, fields of every type and the time of ``readings`` read back as written."""
    write(
        fmt,
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


def check_precision(fmt: str, spark: Any, influx: dict[str, Any], precision: str) -> None:
    """The record time written in ``precision`` reads back floored to it."""
    df = spark.sql("SELECT timestamp_micros(1714521600123456) AS timestamp, 1 AS v")
    write(fmt, df, influx, measurement="p", time_precision=precision)
    expected = {
        "s": 1714521600_000000000,
        "ms": 1714521600_123000000,
        "us": 1714521600_123456000,
        "ns": 1714521600_123456000,
    }[precision]
    assert points(influx, "SELECT v FROM p")[0]["time"] == expected


def check_replay(
    sink: type[Sink[Any, Any]], spark: Any, influx: dict[str, Any], tmp_path: Path
) -> None:
    """A micro-batch failed after its points were written and replayed leaves each point once
    (the replay really sent them twice)."""
    quixsinks.register(spark, faulty(sink))
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
    fmt = f"faulty_{sink.name}"
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", fmt, tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", fmt, tmp_path / "ck", options)
    rows = points(influx, "SELECT id FROM orders")
    assert sorted(r["id"] for r in rows) == ids
    assert sum(r["lines"] for r in sent(influx)) > len(ids)  # batch 1 was really sent twice


def check_retried(fmt: str, readings: Any, influx: dict[str, Any], **options: str) -> None:
    """All 30 points land once the server's injected faults are retried away."""
    write(fmt, readings.coalesce(1), influx, measurement="env", fields_keys="temp", **options)
    assert points(influx, "SELECT count(temp) FROM env")[0]["count"] == 30


def check_gives_up(fmt: str, readings: Any, influx: dict[str, Any], retry_after: str) -> None:
    """Backpressure past the attempts fails the write, saying how long it tried."""
    influx["server"].faults.add(429, count=50, retry_after=retry_after)
    with pytest.raises(Exception, match="gave up after 2 attempt"):
        write(
            fmt,
            readings.coalesce(1),
            influx,
            measurement="env",
            fields_keys="temp",
            retry_max_attempts="2",
        )
