"""The `tsdatalake` sink: Hive-partitioned Parquet read back by pyarrow and Spark,
exactly once across failures, refusals before any data moves, object stores, Kafka JSON
values, and per-key silence detection in a real streaming query."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import quixsinks
from quixsinks.sinks.tsdatalake import TSDataLakeSink, track
from quixsinks.sinks.tsdatalake.silence import decode_key as decode
from quixsinks.testing import faulty

from . import silence_callbacks
from .streams import run_available_now, write_input_files
from .test_object_storage import STORES, make_store

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

HOUR_MS = 3_600_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def hive(path: Path) -> pa.Table:
    return ds.dataset(str(path), partitioning="hive").to_table()


def data_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*.parquet"))


def readings(spark: Any, n: int = 96) -> Any:
    rows = [(i, f"s{i % 3}", float(i), BASE_MS + (i % 48) * HOUR_MS + i) for i in range(n)]
    return spark.createDataFrame(rows, "id long, sensor string, temp double, ts_ms long")


def write(df: Any, path: Path | str, **options: str) -> None:
    writer = df.write.format("tsdatalake").mode("append")
    for k, v in {"path": str(path), "table_name": "readings", **options}.items():
        writer = writer.option(k, v)
    writer.save()


def test_files_are_hive_partitioned_and_read_back_by_pyarrow_and_spark(
    spark: Any, tmp_path: Path
) -> None:
    write(readings(spark), tmp_path, hive_columns="year,month,day,hour,sensor")
    files = data_files(tmp_path / "readings")
    assert files
    assert all(p.name.startswith("data_") for p in files)
    rel = files[0].relative_to(tmp_path / "readings").parts
    assert [p.split("=")[0] for p in rel[:-1]] == ["year", "month", "day", "hour", "sensor"]
    assert rel[0] == "year=2026"
    assert rel[1] == "month=01"
    assert len(rel[2]) == len("day=01")
    assert len(rel[3]) == len("hour=00")
    # the partition columns are not in the files; the timestamp column is
    assert pq.read_schema(files[0]).names == ["id", "temp", "ts_ms"]
    table = hive(tmp_path / "readings")
    assert sorted(table.column("id").to_pylist()) == list(range(96))
    by_id = {r["id"]: r for r in table.to_pylist()}
    assert by_id[5]["sensor"] == "s2"
    assert by_id[5]["hour"] == 5
    assert by_id[30]["day"] == 2
    assert spark.read.parquet(str(tmp_path / "readings")).count() == 96
    # the state folder is outside the table
    assert not any(p.name.startswith("_") for p in (tmp_path / "readings").iterdir())


@pytest.mark.parametrize(
    ("unit", "scale"), [("s", 1 / 1000), ("ms", 1), ("us", 1000), ("ns", 1_000_000)]
)
def test_the_integer_unit_is_an_option_never_guessed(
    spark: Any, tmp_path: Path, unit: str, scale: float
) -> None:
    stamp = int((BASE_MS + 5 * HOUR_MS) * scale)  # 2026-01-01 05:00 UTC in `unit`
    df = spark.createDataFrame([(1, stamp)], "id long, ts long")
    write(
        df, tmp_path, hive_columns="year,month,day,hour", timestamp_column="ts", timestamp_unit=unit
    )
    (rel,) = [p.relative_to(tmp_path / "readings") for p in data_files(tmp_path / "readings")]
    assert str(rel.parent) == "year=2026/month=01/day=01/hour=05"


def test_a_spark_timestamp_column_is_partitioned_in_utc(spark: Any, tmp_path: Path) -> None:
    df = spark.sql("SELECT 1 AS id, TIMESTAMP '2026-03-07 23:30:00+02:00' AS ts")  # 21:30 UTC
    write(df, tmp_path, hive_columns="year,month,day,hour", timestamp_column="ts")
    (rel,) = [p.relative_to(tmp_path / "readings") for p in data_files(tmp_path / "readings")]
    assert str(rel.parent) == "year=2026/month=03/day=07/hour=21"


def test_nulls_and_hostile_values_round_trip_through_hive_readers(
    spark: Any, tmp_path: Path
) -> None:
    cities = ["a/b", "x=y", "100%", "Zürich", "über cool", None, "..", ""]
    df = spark.createDataFrame(
        [(i, c, BASE_MS if i else None) for i, c in enumerate(cities)],
        "id long, city string, ts_ms long",
    )
    write(df, tmp_path, hive_columns="day,city")
    table = hive(tmp_path / "readings").to_pylist()
    assert sorted(r["id"] for r in table) == list(range(len(cities)))  # no row dropped
    got = {r["id"]: r["city"] for r in table}
    for i, city in enumerate(cities):
        # the empty text goes to the null partition, as Spark's partitioned writer does
        expected = "__None__" if city in (None, "") else city
        assert got[i] == expected, (city, got[i])
    spark.read.parquet(str(tmp_path / "readings")).count()  # no `city=` folder: Spark reads it
    day_of_null = [r["day"] for r in table if r["id"] == 0]
    assert day_of_null == ["__None__"]


PHASES = ["write", "commit-before", "commit-after"]


@pytest.fixture(scope="module")
def faulty_tsdatalake(spark: Any) -> None:
    quixsinks.register(spark, faulty(TSDataLakeSink))


@pytest.mark.parametrize("phase", PHASES)
def test_streaming_is_exactly_once_after_a_failure(
    spark: Any, faulty_tsdatalake: None, tmp_path: Path, phase: str
) -> None:
    ids = write_input_files(tmp_path / "in", files=4, rows_per_file=25)
    marker = tmp_path / "fired"
    options = {
        "path": str(tmp_path / "lake"),
        "table_name": "events",
        "hive_columns": "year,month,day,key",
        "timestamp_column": "timestamp",
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(marker),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_tsdatalake", tmp_path / "ck", options)
    assert marker.exists()
    run_available_now(spark, tmp_path / "in", "faulty_tsdatalake", tmp_path / "ck", options)
    table = hive(tmp_path / "lake" / "events")
    assert sorted(table.column("id").to_pylist()) == ids
    staging = tmp_path / "lake" / "_quixsinks" / "events" / "staging"
    assert not staging.exists() or not any(p.is_file() for p in staging.rglob("*"))
    # one file per task partition and hive partition: a replay added no orphan
    files = data_files(tmp_path / "lake" / "events")
    assert sum(pq.read_metadata(p).num_rows for p in files) == len(ids)


def test_a_layout_that_disagrees_with_the_table_is_refused_before_any_data_moves(
    spark: Any, tmp_path: Path
) -> None:
    write(readings(spark, 6), tmp_path, hive_columns="year,month")
    before = data_files(tmp_path / "readings")
    with pytest.raises(Exception, match=r"partitioned as year/month, not year \(hive_columns\)"):
        write(readings(spark, 6), tmp_path, hive_columns="year")
    with pytest.raises(Exception, match="timestamp_unit"):
        write(readings(spark, 6), tmp_path, hive_columns="year,month", timestamp_unit="s")
    assert data_files(tmp_path / "readings") == before


def test_folders_written_by_another_tool_are_checked_too(spark: Any, tmp_path: Path) -> None:
    folder = tmp_path / "readings" / "year=2026" / "day=01"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": [1]}), folder / "data_quix.parquet")
    with pytest.raises(Exception, match=r"partitioned as year/day .*not year/month/day"):
        write(readings(spark, 6), tmp_path, hive_columns="year,month,day")
    assert len(data_files(tmp_path / "readings")) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"hive_columns": "city"}, "hive column 'city' is not a column of the DataFrame"),
        ({"hive_columns": "day", "timestamp_column": "when"}, "need timestamp_column 'when'"),
        ({"hive_columns": "day", "timestamp_column": "sensor"}, "has type string"),
        ({"hive_columns": "day,day"}, "each column once"),
        ({"table_name": "../etc"}, "table_name"),
        ({"catalog_url": "http://127.0.0.1:1/catalog"}, "catalog at http://127.0.0.1:1/catalog"),
        ({"timestamp_unit": "hours"}, "timestamp_unit"),
    ],
)
def test_bad_options_fail_before_any_data_moves(
    spark: Any, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        write(readings(spark, 3), tmp_path, **options)
    assert not data_files(tmp_path)


def test_a_derived_column_clashing_with_a_dataframe_column_is_refused(
    spark: Any, tmp_path: Path
) -> None:
    df = spark.createDataFrame([(1, 2026, BASE_MS)], "id long, year int, ts_ms long")
    with pytest.raises(Exception, match="also has a column 'year'"):
        write(df, tmp_path, hive_columns="year")


def test_kafka_json_values_keep_every_field_and_the_key(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    values = [
        {"ts_ms": BASE_MS + i * HOUR_MS, "sensor": f"s{i % 2}", "temp": i * 1.5, "extra": i}
        for i in range(10)
    ]
    rows = [
        (f"k{i}".encode(), json.dumps(v).encode(), "t", 0, i, None) for i, v in enumerate(values)
    ]
    df = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, ts timestamp"
    ).select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        F.current_timestamp().alias("timestamp"),
        F.lit(0).alias("timestampType"),
    )
    write(df, tmp_path, hive_columns="day,sensor")
    table = hive(tmp_path / "readings")
    assert sorted(table.column_names) == sorted(["_key", "ts_ms", "temp", "extra", "day", "sensor"])
    got = sorted(table.to_pylist(), key=lambda r: r["extra"])
    assert [r["_key"] for r in got] == [f"k{i}".encode() for i in range(10)]
    assert [r["sensor"] for r in got] == [v["sensor"] for v in values]


@pytest.mark.parametrize("kind", STORES)
def test_object_stores_get_the_same_layout_exactly_once(
    spark: Any, faulty_tsdatalake: None, request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    store = make_store(kind, request)
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=20)
    options = {
        "path": store.url,
        "table_name": "events",
        "hive_columns": "year,month,day",
        "timestamp_column": "timestamp",
        "fail_batch": "1",
        "fail_phase": "commit-after",
        "fail_marker": str(tmp_path / "fired"),
        **store.options,
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_tsdatalake", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_tsdatalake", tmp_path / "ck", options)
    dest = store.destination()
    keys = [k for k in dest.list("events/") if k.endswith(".parquet")]
    assert keys
    assert all(k.startswith("events/year=2024/month=05/day=01/data_") for k in keys)
    got = sorted(
        i
        for k in keys
        for i in pq.read_table(pa.BufferReader(dest.read_bytes(k))).column("id").to_pylist()
    )
    assert got == ids
    assert not [k for k in dest.list("_quixsinks/events/staging") if not k.endswith("/")]


# --------------------------------------------------------------------- silence detection


def test_silent_keys_fire_once_while_the_query_runs_and_when_all_input_stops(
    spark: Any, tmp_path: Path
) -> None:
    """Keys a and b; a stops: a's callback fires once within timeout + interval, b's never;
    then all input stops: b fires once too. The callback runs in this (the driver)
    process, named by import path in the options, which track() reads from the query
    object here (never from the spool file, which is private: 0600)."""
    silence_callbacks.FIRED.clear()
    timeout_ms = 10_000  # well above a micro-batch (see "Limits" in the docs page)
    source = tmp_path / "in"
    source.mkdir()

    def fired() -> list[str]:
        return [k for k, _ in silence_callbacks.FIRED if k != "warm-up"]

    def drop(n: int, keys: list[str]) -> None:
        rows = [json.dumps({"key": k, "v": n, "ts_ms": BASE_MS}) for k in keys]
        (source / f"f{n:03d}.json").write_text("\n".join(rows) + "\n")

    drop(0, ["warm-up"])  # the first micro-batch starts the Python workers: slow
    df = spark.readStream.schema("key string, v long, ts_ms long").json(str(source))
    query = (
        df.writeStream.format("tsdatalake")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .option("path", str(tmp_path / "lake"))
        .option("table_name", "t")
        .option("stream_timeout_ms", str(timeout_ms))
        .option("on_stream_timeout", "tests.integration.silence_callbacks:record")
        .option("stream_timeout_dir", str(tmp_path / "spool"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    watcher = track(query, directory=str(tmp_path / "spool"))
    spool = tmp_path / "spool" / f"{query.id}.json"
    try:
        deadline = time.time() + 180
        while not spool.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert spool.exists(), f"no commit in 180 s: {query.exception()}"
        assert stat.S_IMODE(spool.stat().st_mode) == 0o600  # it holds the record keys
        assert "on_stream_timeout" not in json.loads(spool.read_text())
        drop(1, ["a", "b"])

        def seen(key: str) -> float | None:
            keys = json.loads(spool.read_text())["keys"]
            return next((item[1] / 1000 for item in keys if decode(item[0]) == key), None)

        while seen("a") is None and time.time() < deadline:
            time.sleep(0.1)
        a_seen = seen("a")
        assert a_seen is not None, f"a not committed: {query.exception()}"
        n = 2
        while time.time() - a_seen < 90 and not fired():
            drop(n, ["b"])  # b keeps publishing until a has fired
            n += 1
            time.sleep(0.5)
        assert fired() == ["a"]
        interval_s = watcher.tracker.check_interval_ms / 1000 if watcher.tracker else 1
        a_fired = next(t for k, t in silence_callbacks.FIRED if k == "a")
        assert a_fired - a_seen <= timeout_ms / 1000 + interval_s + 1
        # now everything stops: b fires once, within timeout + a check interval (+ slack)
        deadline = time.time() + timeout_ms / 1000 + 30
        while time.time() < deadline and len(fired()) < 2:
            time.sleep(0.1)
        assert fired() == ["a", "b"]
        time.sleep(3 * watcher.tracker.check_interval_ms / 1000 if watcher.tracker else 3)
        # nothing fires twice
        assert fired() == ["a", "b"]
        assert [k for k, _ in silence_callbacks.FIRED].count("warm-up") == 1
    finally:
        query.stop()
        watcher.stop()
    assert set(hive(tmp_path / "lake" / "t").column("v").to_pylist()) == set(range(n))


@pytest.mark.parametrize("kind", STORES)
def test_a_missing_bucket_is_created_unless_auto_create_bucket_is_off(
    spark: Any, request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    import uuid

    store = make_store(kind, request, bucket=f"qs-new-{uuid.uuid4().hex[:10]}")
    df = readings(spark, 6)
    with pytest.raises(Exception, match=r"(?i)(not found|does not exist|NoSuchBucket)"):
        write(df, store.url, auto_create_bucket="false", **store.options)
    write(df, store.url, hive_columns="day", **store.options)
    keys = [k for k in store.destination().list("readings/") if k.endswith(".parquet")]
    assert (
        sum(
            pq.read_metadata(pa.BufferReader(store.destination().read_bytes(k))).num_rows
            for k in keys
        )
        == 6
    )


def test_a_json_field_named_like_a_derived_column_is_a_record_error(
    spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    value = json.dumps({"ts_ms": BASE_MS, "day": 7}).encode()
    df = spark.createDataFrame(
        [(b"k", value, "t", 0, 0)],
        "key binary, value binary, topic string, partition int, offset long",
    ).select("*", F.current_timestamp().alias("timestamp"), F.lit(0).alias("timestampType"))
    with pytest.raises(Exception, match="the JSON values also have a field 'day'"):
        write(df, tmp_path, hive_columns="day")
    assert not data_files(tmp_path)


# ----------------------------------------------------------------------------- catalog registration

TOKEN = "lake-catalog-t0ken"


@pytest.fixture(scope="module")
def rest() -> Any:
    """A REST catalog stand-in that wants a bearer token (tests isolate by table name)."""
    pytest.importorskip("pyiceberg")
    from tests.services.iceberg_rest import IcebergRestServer

    with IcebergRestServer(token=TOKEN) as server:
        yield server


def catalog_options(rest: Any, **extra: str) -> dict[str, str]:
    return {"catalog_url": rest.url, "catalog_auth_token": TOKEN, **extra}


def iceberg_table(rest: Any, table: str, namespace: str = "default") -> Any:
    return rest.catalog.load_table((namespace, table))


def iceberg_rows(rest: Any, table: str) -> list[dict[str, Any]]:
    return sorted(iceberg_table(rest, table).scan().to_arrow().to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("kind", ["epoch", "timestamp"])
def test_catalog_readers_and_hive_readers_see_the_same_rows(
    spark: Any, tmp_path: Path, rest: Any, kind: str
) -> None:
    df = readings(spark)
    if kind == "timestamp":
        df = df.selectExpr("id", "sensor", "temp", "timestamp_millis(ts_ms) AS ts_ms")
    table = f"readings_{kind}"
    options = catalog_options(rest, hive_columns="year,month,day,hour,sensor", table_name=table)
    write(df, tmp_path, **options)
    hive_rows = sorted(hive(tmp_path / table).to_pylist(), key=lambda r: r["id"])
    ice = iceberg_table(rest, table)
    rows = iceberg_rows(rest, table)
    assert [r["id"] for r in rows] == [r["id"] for r in hive_rows] == list(range(96))
    # identity values are not in the files: the Iceberg reader takes them from the manifest
    assert [r["sensor"] for r in rows] == [r["sensor"] for r in hive_rows]
    spec = {(f.name, str(f.transform)) for f in ice.spec().fields}
    if kind == "timestamp":  # one time transform: hour(ts) stands for year/month/day/hour
        assert spec == {("ts_ms_hour", "hour"), ("sensor", "identity")}
        cut = "2026-01-02T00:00:00+00:00"
        files = list(ice.scan(row_filter=f"ts_ms >= '{cut}'").plan_files())
        assert 0 < len(files) < len(list(ice.scan().plan_files()))  # hour pruning works
    else:  # an integer epoch: the derived columns are identity strings, as Hive readers see
        assert spec == {(c, "identity") for c in ("year", "month", "day", "hour", "sensor")}
        assert [(r["day"], r["hour"]) for r in rows[30:31]] == [("02", "06")]
    # the files stay where the Hive layout puts them; the Iceberg metadata is under the state
    paths = {t.file.file_path for t in ice.scan().plan_files()}
    assert paths == {f"file://{p}" for p in data_files(tmp_path / table)}
    assert ice.location().endswith(f"/_quixsinks/{table}/iceberg")
    assert rest.unauthorized == 0


@pytest.mark.parametrize("phase", PHASES)
def test_catalog_registration_is_exactly_once_after_a_failure(
    spark: Any, faulty_tsdatalake: None, tmp_path: Path, rest: Any, phase: str
) -> None:
    ids = write_input_files(tmp_path / "in", files=4, rows_per_file=25)
    marker = tmp_path / "fired"
    table = f"events_{phase.replace('-', '_')}"
    options = {
        "path": str(tmp_path / "lake"),
        "table_name": table,
        "hive_columns": "year,month,day,key",
        "timestamp_column": "timestamp",
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(marker),
        **catalog_options(rest),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_tsdatalake", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_tsdatalake", tmp_path / "ck", options)
    assert [r["id"] for r in iceberg_rows(rest, table)] == ids
    assert sorted(hive(tmp_path / "lake" / table).column("id").to_pylist()) == ids
    snapshots = iceberg_table(rest, table).snapshots()
    batches = [s.summary.additional_properties["quixsinks.batch-id"] for s in snapshots]
    assert sorted(batches) == ["0", "1", "2", "3"]  # one registration per micro-batch


def test_old_snapshots_are_expired_and_a_replay_is_still_recognised(
    spark: Any, faulty_tsdatalake: None, tmp_path: Path, rest: Any
) -> None:
    """catalog_keep_snapshots=2 over six micro-batches: the history is cut in bulk (the
    rows stay: the current snapshot names every file), and the last batch, registered
    before its driver failed, is not registered again by the replay."""
    ids = write_input_files(tmp_path / "in", files=6, rows_per_file=10)
    options = {
        "path": str(tmp_path / "lake"),
        "table_name": "expiring",
        "hive_columns": "key",
        "catalog_keep_snapshots": "2",
        "fail_batch": "5",
        "fail_phase": "commit-after",
        "fail_marker": str(tmp_path / "fired"),
        **catalog_options(rest),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_tsdatalake", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_tsdatalake", tmp_path / "ck", options)
    table = iceberg_table(rest, "expiring")
    batches = [s.summary.additional_properties["quixsinks.batch-id"] for s in table.snapshots()]
    # expired at the 5th snapshot (3 expirable > 2 kept), then one more batch; the replay
    # of batch 5 added nothing
    assert sorted(batches, key=int) == ["3", "4", "5"]
    assert [r["id"] for r in iceberg_rows(rest, "expiring")] == ids
    assert sorted(hive(tmp_path / "lake" / "expiring").column("id").to_pylist()) == ids


def test_files_published_but_not_registered_are_registered_by_the_replay(
    spark: Any, tmp_path: Path, rest: Any
) -> None:
    """The catalog refuses every commit of batch 1 (after its files were published): the
    query fails; the restarted query registers the published files, once."""
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    options = {
        "path": str(tmp_path / "lake"),
        "table_name": "published_first",
        "hive_columns": "key",
        "catalog_commit_max_attempts": "2",
        **catalog_options(rest),
    }
    stop = tmp_path / "in-later"
    stop.mkdir()
    for extra in sorted((tmp_path / "in").iterdir())[1:]:
        extra.rename(stop / extra.name)
    run_available_now(spark, tmp_path / "in", "tsdatalake", tmp_path / "ck", options)
    for extra in sorted(stop.iterdir()):
        extra.rename(tmp_path / "in" / extra.name)
    # both attempts refused, and the commit from the table the process kept from batch 0
    # (free: the same attempt goes on from a fresh load); unused refusals meet the replay
    rest.fail_next_commits(409, 409, 409)
    with pytest.raises(Exception, match=r"was not committed to default\.published_first"):
        run_available_now(spark, tmp_path / "in", "tsdatalake", tmp_path / "ck", options)
    # batch 1 is published for Hive readers, not yet in the catalog
    assert len(hive(tmp_path / "lake" / "published_first")) == 20
    assert len(iceberg_rows(rest, "published_first")) == 10
    run_available_now(spark, tmp_path / "in", "tsdatalake", tmp_path / "ck", options)
    assert [r["id"] for r in iceberg_rows(rest, "published_first")] == ids
    assert sorted(hive(tmp_path / "lake" / "published_first").column("id").to_pylist()) == ids


def test_a_lost_catalog_answer_does_not_register_a_batch_twice(
    spark: Any, tmp_path: Path, rest: Any
) -> None:
    ids = write_input_files(tmp_path / "in", files=2, rows_per_file=10)
    options = {"path": str(tmp_path / "lake"), "table_name": "lost", **catalog_options(rest)}
    # applied, then answered 504 (the outcome is unknown): the table's creation, then the
    # first batch's registration
    rest.fail_next_commits(504, 504)
    run_available_now(spark, tmp_path / "in", "tsdatalake", tmp_path / "ck", options)
    assert [r["id"] for r in iceberg_rows(rest, "lost")] == ids
    assert len(iceberg_table(rest, "lost").snapshots()) == 2


def test_a_catalog_table_with_another_layout_is_refused_before_any_data_moves(
    spark: Any, tmp_path: Path, rest: Any
) -> None:
    options = catalog_options(rest, table_name="layouts", hive_columns="year,month")
    write(readings(spark, 6), tmp_path / "a", **options)
    other = {**options, "hive_columns": "year,sensor"}
    message = r"partitioned by year, month, which is not the hive columns year/sensor"
    with pytest.raises(Exception, match=message):
        write(readings(spark, 6), tmp_path / "b", **other)
    assert not data_files(tmp_path / "b")


def test_auto_discover_false_needs_the_table_and_a_wrong_token_fails_clearly(
    spark: Any, tmp_path: Path, rest: Any
) -> None:
    options = catalog_options(rest, table_name="absent", auto_discover="false")
    with pytest.raises(Exception, match=r"does not exist in the catalog .* auto_discover=false"):
        write(readings(spark, 3), tmp_path, **options)
    wrong = {**options, "catalog_auth_token": "not-the-token", "auto_discover": "true"}
    with pytest.raises(Exception, match="catalog") as failure:
        write(readings(spark, 3), tmp_path, **wrong)
    assert "not-the-token" not in str(failure.value)
    assert not data_files(tmp_path)


def test_kafka_json_values_are_registered_and_new_fields_evolve_the_table(
    spark: Any, tmp_path: Path, rest: Any
) -> None:
    from pyspark.sql import functions as F

    def kafka(values: list[dict[str, Any]], first: int) -> Any:
        rows = [
            (f"k{i}".encode(), json.dumps(v).encode(), "t", 0, first + i)
            for i, v in enumerate(values)
        ]
        return spark.createDataFrame(
            rows, "key binary, value binary, topic string, partition int, offset long"
        ).select("*", F.current_timestamp().alias("timestamp"), F.lit(0).alias("timestampType"))

    options = catalog_options(rest, table_name="kafka_json", hive_columns="day,sensor")
    first = [{"ts_ms": BASE_MS + i * HOUR_MS, "sensor": f"s{i % 2}", "n": i} for i in range(4)]
    write(kafka(first, 0), tmp_path, **options)
    second = [{"ts_ms": BASE_MS, "sensor": "s9", "n": 10 + i, "new": "x"} for i in range(2)]
    write(kafka(second, 4), tmp_path, **options)
    table = iceberg_table(rest, "kafka_json")
    assert set(table.schema().column_names) >= {"_key", "ts_ms", "n", "new", "day", "sensor"}
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["n"])
    assert [r["n"] for r in rows] == [0, 1, 2, 3, 10, 11]
    assert [r["sensor"] for r in rows] == ["s0", "s1", "s0", "s1", "s9", "s9"]
    assert [r["new"] for r in rows] == [None] * 4 + ["x", "x"]
    assert rows[0]["_key"] == b"k0"


def test_nulls_and_hostile_values_reach_catalog_readers(
    spark: Any, tmp_path: Path, rest: Any
) -> None:
    cities = ["a/b", "x=y", "100%", "Zürich", None, ".."]
    df = spark.createDataFrame(
        [(i, c, BASE_MS) for i, c in enumerate(cities)], "id long, city string, ts_ms long"
    )
    write(df, tmp_path, **catalog_options(rest, table_name="hostile", hive_columns="city"))
    got = {r["id"]: r["city"] for r in iceberg_rows(rest, "hostile")}
    assert got == dict(enumerate(cities))  # __None__ in the path is a null in the catalog


def test_a_lake_on_s3_is_registered_with_the_sinks_credentials(
    spark: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    from tests.services.iceberg_rest import IcebergRestServer

    store = make_store("s3", request)
    o = store.options
    s3 = {
        "s3.endpoint": o["endpoint_url"],
        "s3.region": o["region_name"],
        "s3.access-key-id": o["aws_access_key_id"],
        "s3.secret-access-key": o["aws_secret_access_key"],
        "s3.force-virtual-addressing": "false",
    }
    with IcebergRestServer(token=TOKEN, properties=s3) as rest:
        options = {**store.options, **catalog_options(rest, hive_columns="day,sensor")}
        write(readings(spark, 24), store.url, **options)
        table = RestCatalog("r", uri=rest.url, token=TOKEN, **s3).load_table("default.readings")
        assert table.location() == f"{store.url}/_quixsinks/readings/iceberg"
        rows = table.scan().to_arrow().to_pylist()
        assert sorted(r["id"] for r in rows) == list(range(24))
        assert {r["sensor"] for r in rows} == {"s0", "s1", "s2"}


def test_catalog_registration_refuses_the_stores_it_has_not_been_tested_on(
    spark: Any, request: pytest.FixtureRequest, rest: Any
) -> None:
    store = make_store("azure", request)
    with pytest.raises(Exception, match="supports tables on local disk and S3"):
        write(readings(spark, 3), store.url, **store.options, **catalog_options(rest))
