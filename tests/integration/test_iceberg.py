"""The `iceberg` sink through Spark, on the embedded SQLite SqlCatalog with a local
warehouse: tables read back with pyiceberg's scan."""

from __future__ import annotations

import datetime
import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import quixsinks
from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.errors import OptionError
from quixsinks.core.sink import CommitContext, Receipt
from quixsinks.sinks.iceberg import IcebergOptions, IcebergSink
from quixsinks.sinks.iceberg.catalog import load_catalog
from quixsinks.testing import faulty

from .streams import run_available_now, write_input_files

pytest.importorskip("pyiceberg")


@pytest.fixture
def ice(tmp_path: Path) -> dict[str, Any]:
    warehouse = tmp_path / "warehouse"
    options = {"warehouse": str(warehouse), "table_name": "db.events"}

    def table(name: str = "db.events") -> Any:
        opts = IcebergOptions.from_options({**options, "table_name": name})
        return load_catalog(opts).load_table(name)

    def ids(name: str = "db.events") -> list[int]:
        return sorted(table(name).scan().to_arrow().column("id").to_pylist())

    return {"options": options, "table": table, "ids": ids, "warehouse": warehouse}


def write(df: Any, options: dict[str, str], mode: str = "append", fmt: str = "iceberg") -> None:
    df.write.format(fmt).mode(mode).options(**options).save()


def snapshots(table: Any) -> list[dict[str, str]]:
    return [
        dict(s.summary.additional_properties)
        for s in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    ]


def test_batch_write_creates_the_table_from_the_dataframe_schema(
    spark: Any, ice: dict[str, Any]
) -> None:
    df = spark.sql(
        "SELECT id, concat('n', cast(id AS string)) AS name, cast(id AS double) / 2 AS amount, "
        "timestamp_millis(1714521600000 + id * 1000) AS ts, cast(id % 100 AS tinyint) AS small "
        "FROM range(50)"
    )
    write(df, ice["options"])
    table = ice["table"]()
    assert [(f.field_id, f.name, str(f.field_type)) for f in table.schema().fields] == [
        (1, "id", "long"),
        (2, "name", "string"),
        (3, "amount", "double"),
        (4, "ts", "timestamptz"),
        (5, "small", "int"),
    ]
    assert table.spec().is_unpartitioned()
    rows = table.scan().to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == list(range(50))
    assert rows.column("name")[7].as_py() == "n7"
    assert rows.column("ts")[1].as_py() == datetime.datetime(
        2024, 5, 1, 0, 0, 1, tzinfo=datetime.timezone.utc
    )
    write(df, ice["options"])
    assert ice["ids"]() == sorted(list(range(50)) * 2)
    assert len(snapshots(ice["table"]())) == 2


def test_stream_commits_one_snapshot_per_micro_batch_with_the_batch_in_its_summary(
    spark: Any, tmp_path: Path, ice: dict[str, Any]
) -> None:
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    run_available_now(spark, tmp_path / "in", "iceberg", tmp_path / "ck", ice["options"])
    assert ice["ids"]() == ids
    summaries = snapshots(ice["table"]())
    assert [s["quixsinks.batch-id"] for s in summaries] == ["0", "1", "2"]
    query_ids = {s["quixsinks.query-id"] for s in summaries}
    assert len(query_ids) == 1
    assert {s["quixsinks.sink-id"] for s in summaries} == query_ids
    # a restart from the checkpoint with nothing new writes nothing
    run_available_now(spark, tmp_path / "in", "iceberg", tmp_path / "ck", ice["options"])
    assert ice["ids"]() == ids


@pytest.mark.parametrize("phase", ["write", "commit-before", "commit-after"])
def test_a_failed_micro_batch_is_replayed_exactly_once(
    spark: Any, tmp_path: Path, ice: dict[str, Any], phase: str
) -> None:
    quixsinks.register(spark, faulty(IcebergSink), check_workers=False)
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    options = {
        **ice["options"],
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_iceberg", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_iceberg", tmp_path / "ck", options)
    assert ice["ids"]() == ids
    table = ice["table"]()
    assert [s["quixsinks.batch-id"] for s in snapshots(table)] == ["0", "1", "2"]
    # no data file of a failed attempt is left next to the table's files
    live = {t.file.file_path for t in table.scan().plan_files()}
    on_disk = {
        f"file://{p}" for p in (ice["warehouse"] / "db" / "events" / "data").rglob("*.parquet")
    }
    if phase != "write":  # a failed task's files are left for the orphan sweep
        assert on_disk == live


def _sink_with_files(
    ice: dict[str, Any], rows: pa.Table, sink_id: str = "sink-a", query_id: str = "query-a"
) -> tuple[Any, Any]:
    """A planned sink and the receipt of one task that wrote ``rows`` (no Spark)."""
    sink = IcebergSink(IcebergOptions.from_options(ice["options"]))
    sink.prepare(rows.schema)
    assert sink.records is not None
    context = WriteContext(sink_id, 4, 0, "a0", True, query_id)
    staged = sink.write(SinkBatch(rows, sink.records, context))
    receipt: Receipt[Any] = Receipt(sink_id, 4, 0, "a0", query_id=query_id, staged=[staged])
    return sink, receipt


def test_two_committers_of_one_batch_land_it_once(ice: dict[str, Any]) -> None:
    """A zombie driver commits the same micro-batch concurrently: one snapshot only."""
    rows = pa.table({"id": pa.array(range(20), pa.int64())})
    sink, receipt = _sink_with_files(ice, rows)
    context = CommitContext("sink-a", 4, True, "query-a")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            barrier.wait()
            sink.commit(context, [receipt])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=commit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    table = ice["table"]()
    assert len(table.metadata.snapshots) == 1
    assert ice["ids"]() == list(range(20))


def test_two_queries_committing_to_one_table_at_once_both_land(ice: dict[str, Any]) -> None:
    """Optimistic concurrency: the loser of each race reloads, re-checks and commits again."""
    sinks = [
        _sink_with_files(
            ice,
            pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}),
            sink_id=f"sink-{i}",
            query_id=f"query-{i}",
        )
        for i in range(4)
    ]
    barrier = threading.Barrier(len(sinks))
    errors: list[BaseException] = []

    def commit(i: int) -> None:
        sink, receipt = sinks[i]
        try:
            barrier.wait()
            sink.commit(CommitContext(f"sink-{i}", 4, True, f"query-{i}"), [receipt])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(len(sinks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert ice["ids"]() == list(range(40))
    assert len(ice["table"]().metadata.snapshots) == 4


def test_a_commit_whose_outcome_was_lost_is_not_committed_twice(
    ice: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog commits, then the response is lost (CommitStateUnknownException): the
    retry finds the batch in the table's history and stops."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import CommitStateUnknownException

    rows = pa.table({"id": pa.array(range(5), pa.int64())})
    sink, receipt = _sink_with_files(ice, rows)
    real = SqlCatalog.commit_table
    calls = []

    def lost_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            raise CommitStateUnknownException("504 gateway timeout after the commit")
        return result

    monkeypatch.setattr(SqlCatalog, "commit_table", lost_response)
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    assert len(calls) == 1
    assert ice["ids"]() == list(range(5))
    assert len(ice["table"]().metadata.snapshots) == 1


def test_keep_snapshots_expires_old_history_and_keeps_the_ledger_working(
    ice: dict[str, Any],
) -> None:
    ice["options"]["keep_snapshots"] = "2"
    rows = pa.table({"id": pa.array(range(3), pa.int64())})
    sink, _ = _sink_with_files(ice, rows)
    for batch in range(5):
        context = WriteContext("sink-a", batch, 0, "a0", True, "query-a")
        assert sink.records is not None
        staged = sink.write(SinkBatch(rows, sink.records, context))
        receipt: Receipt[Any] = Receipt(
            "sink-a", batch, 0, "a0", query_id="query-a", staged=[staged]
        )
        sink.commit(CommitContext("sink-a", batch, True, "query-a"), [receipt])
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])  # a replay: skipped
    table = ice["table"]()
    assert len(table.metadata.snapshots) == 2
    assert ice["ids"]() == sorted([0, 1, 2] * 5)


def test_old_data_files_no_snapshot_names_are_swept(ice: dict[str, Any]) -> None:
    """A task attempt that died before its receipt reached the driver leaves files that no
    abort knows of: a later commit deletes them once older than staging_max_age_hours."""
    import os
    import time

    rows = pa.table({"id": pa.array(range(5), pa.int64())})
    _, dead = _sink_with_files(ice, rows)  # written, never committed nor aborted
    dead_paths = [f.file_path.removeprefix("file://") for f in dead.staged[0]]
    sink, receipt = _sink_with_files(ice, rows, sink_id="sink-b", query_id="query-b")
    sink.commit(CommitContext("sink-b", 4, True, "query-b"), [receipt])
    assert sink._sweep_orphans(force=True) == 0  # too young
    hours_ago = time.time() - 25 * 3600
    data = ice["warehouse"] / "db" / "events" / "data"
    for path in data.rglob("*.parquet"):
        os.utime(path, (hours_ago, hours_ago))
    assert sink._sweep_orphans(force=True) == len(dead_paths)
    assert not any(Path(p).exists() for p in dead_paths)
    assert ice["ids"]() == list(range(5))  # the committed files stay


def test_abort_after_a_landed_commit_keeps_the_files(ice: dict[str, Any]) -> None:
    rows = pa.table({"id": pa.array(range(5), pa.int64())})
    sink, receipt = _sink_with_files(ice, rows)
    context = CommitContext("sink-a", 4, True, "query-a")
    sink.commit(context, [receipt])
    sink.abort(context, [receipt])
    assert ice["ids"]() == list(range(5))  # the scan reads every file


def test_abort_of_an_uncommitted_batch_deletes_its_files(ice: dict[str, Any]) -> None:
    rows = pa.table({"id": pa.array(range(5), pa.int64())})
    sink, receipt = _sink_with_files(ice, rows)
    paths = [f.file_path.removeprefix("file://") for f in receipt.staged[0]]
    assert all(Path(p).exists() for p in paths)
    sink.abort(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    assert not any(Path(p).exists() for p in paths)


def test_a_new_checkpoint_reusing_the_sink_id_is_fenced_in_the_driver_too(
    ice: dict[str, Any],
) -> None:
    rows = pa.table({"id": pa.array(range(5), pa.int64())})
    sink, receipt = _sink_with_files(ice, rows)
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    _, receipt_b = _sink_with_files(ice, rows)
    with pytest.raises(Exception, match="belongs to streaming query query-a"):
        sink.commit(CommitContext("sink-a", 4, True, "query-b"), [receipt_b])
    assert ice["ids"]() == list(range(5))


def test_overwrite_replaces_the_table_contents_in_one_snapshot(
    spark: Any, ice: dict[str, Any]
) -> None:
    write(spark.range(10), ice["options"])
    write(spark.range(100, 103), ice["options"], mode="overwrite")
    assert ice["ids"]() == [100, 101, 102]


@pytest.mark.parametrize(
    ("partition_by", "fields"),
    [
        (
            "day(ts), bucket(4, id), truncate(5, name), identity(city)",
            ["ts_day", "id_bucket_4", "name_truncate_5", "city"],
        ),
        ("city, hour(ts)", ["city", "ts_hour"]),
    ],
)
def test_partition_by_transforms(
    spark: Any, ice: dict[str, Any], partition_by: str, fields: list[str]
) -> None:
    df = spark.sql(
        "SELECT id, concat('name', cast(id AS string)) AS name, "
        "concat('c', cast(id % 3 AS string)) AS city, "
        "timestamp_millis(1714521600000 + id * 3600000) AS ts FROM range(60)"
    )
    write(df, {**ice["options"], "partition_by": partition_by})
    table = ice["table"]()
    assert [f.name for f in table.spec().fields] == fields
    assert ice["ids"]() == list(range(60))
    for position in range(len(fields)):  # every transform splits the rows
        assert len({t.file.partition[position] for t in table.scan().plan_files()}) > 1


def test_quix_columns_get_quix_default_layout(spark: Any, ice: dict[str, Any]) -> None:
    df = spark.sql(
        "SELECT concat('k', cast(id % 2 AS string)) AS _key, "
        "timestamp_millis(1714521600000 + id * 86400000) AS _timestamp, id FROM range(6)"
    )
    write(df, ice["options"])
    table = ice["table"]()
    assert [str(f.transform) for f in table.spec().fields] == ["identity", "day"]
    assert [f.name for f in table.spec().fields] == ["_key", "_timestamp_day"]
    assert ice["ids"]() == list(range(6))


def test_schema_evolves_by_union_of_names(spark: Any, ice: dict[str, Any]) -> None:
    write(spark.sql("SELECT id, cast(id AS int) AS n FROM range(3)"), ice["options"])
    write(
        spark.sql("SELECT id, cast(id AS bigint) AS n, 'x' AS extra FROM range(3, 5)"),
        ice["options"],
    )
    table = ice["table"]()
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("id", "long"),
        ("n", "long"),
        ("extra", "string"),
    ]
    rows = table.scan().to_arrow().sort_by("id")
    assert rows.column("extra").to_pylist() == [None, None, None, "x", "x"]


def test_schema_freeze_and_incompatible_changes_fail_before_any_data_moves(
    spark: Any, ice: dict[str, Any]
) -> None:
    write(spark.sql("SELECT id, cast(id AS bigint) AS n FROM range(3)"), ice["options"])
    frozen = {**ice["options"], "schema_mode": "freeze"}
    with pytest.raises(Exception, match="schema_mode=freeze: it would need"):
        write(spark.sql("SELECT id, 1 AS n, 'x' AS extra FROM range(3)"), frozen)
    with pytest.raises(Exception, match=r"incompatible with table db\.events"):
        write(spark.sql("SELECT id, 'text' AS n FROM range(3)"), ice["options"])
    assert ice["ids"]() == [0, 1, 2]
    assert len(ice["table"]().metadata.snapshots) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"catalog_type": "oracle"}, "unknown catalog_type 'oracle'"),
        ({"table_name": "events"}, "must be namespace.table"),
        ({"partition_by": "bucket(id)"}, "bucket\\(\\) needs a positive width"),
        ({"partition_by": "day(nope)"}, "names column 'nope'"),
        ({"warehouse": ""}, "needs 'warehouse'"),
        ({"partition_by": "hour(ts), year(ts)"}, "ts_year conflicts with ts_hour"),
    ],
)
def test_bad_options_fail_at_planning(
    ice: dict[str, Any], options: dict[str, str], message: str
) -> None:
    opts = {**ice["options"], **options}
    if options.get("warehouse") == "":
        opts.pop("warehouse")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", "UTC"))])
    with pytest.raises(OptionError, match=message):
        IcebergSink(IcebergOptions.from_options(opts)).prepare(schema)


def test_a_bad_option_fails_the_spark_write_before_any_data_moves(
    spark: Any, ice: dict[str, Any]
) -> None:
    with pytest.raises(Exception, match="unknown catalog_type 'oracle'"):
        write(spark.range(3), {**ice["options"], "catalog_type": "oracle"})
    assert not ice["warehouse"].exists()


def test_types_iceberg_lacks_fail_with_the_column_named(spark: Any, ice: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="column 'nothing' has no type"):
        write(spark.sql("SELECT id, NULL AS nothing FROM range(3)"), ice["options"])


def test_missing_namespace_fails_when_told_not_to_create_it(
    spark: Any, ice: dict[str, Any]
) -> None:
    with pytest.raises(Exception, match="namespace 'db' does not exist"):
        write(spark.range(3), {**ice["options"], "create_namespace": "false"})


def test_a_catalog_that_is_down_fails_clearly_without_its_password(
    spark: Any, ice: dict[str, Any]
) -> None:
    options = {
        **ice["options"],
        "catalog_uri": "postgresql+psycopg2://user:s3cr3t-pw@127.0.0.1:9/nothing",
    }
    with pytest.raises(Exception, match="opening the catalog failed") as raised:
        write(spark.range(3), options)
    assert "s3cr3t-pw" not in str(raised.value)


def test_catalog_properties_pass_through_and_secrets_are_redacted() -> None:
    opts = IcebergOptions.from_options(
        {
            "table_name": "a.b",
            "warehouse": "/tmp/w",
            "catalog.s3.secret-access-key": "very-secret",
            "catalog.s3.endpoint": "http://127.0.0.1:1",
            "catalog.token": "tok-secret",
        }
    )
    assert dict(opts.catalog_properties)["s3.secret-access-key"] == "very-secret"
    text = repr(opts) + repr(opts.redacted()) + repr(IcebergSink(opts))
    assert "very-secret" not in text
    assert "tok-secret" not in text
    assert "http://127.0.0.1:1" in repr(opts)


def test_quix_aws_names_are_accepted() -> None:
    opts = IcebergOptions.from_options(
        {
            "table_name": "a.b",
            "data_catalog_spec": "aws_glue",
            "aws_s3_uri": "s3://bucket/warehouse",
            "aws_region": "eu-west-1",
            "aws_access_key_id": "AKIA",
            "aws_secret_access_key": "hidden",
        }
    )
    assert opts.catalog_type == "glue"
    assert opts.warehouse == "s3://bucket/warehouse"
    assert "hidden" not in repr(opts)
    with pytest.raises(OptionError, match="unknown catalog_type"):
        IcebergOptions.from_options({"table_name": "a.b", "catalog_type": "nope"})


# ----------------------------------------------------------------------------- S3 and Glue


def _aws(s3_server: Any) -> dict[str, str]:
    opts = s3_server.options()
    return {
        "aws_endpoint_url": opts["endpoint_url"],
        "aws_region": opts["region_name"],
        "aws_access_key_id": opts["aws_access_key_id"],
        "aws_secret_access_key": opts["aws_secret_access_key"],
    }


def test_sql_catalog_with_an_s3_warehouse_streams_exactly_once(
    spark: Any, tmp_path: Path, s3_server: Any
) -> None:
    bucket = f"ice-{uuid.uuid4().hex[:10]}"
    s3_server.create_bucket(bucket)
    options = {
        "table_name": "db.events",
        "catalog_uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"s3://{bucket}/warehouse",
        **_aws(s3_server),
    }
    quixsinks.register(spark, faulty(IcebergSink), check_workers=False)
    ids = write_input_files(tmp_path / "in", files=2, rows_per_file=10)
    failing = {
        **options,
        "fail_batch": "1",
        "fail_phase": "commit-after",
        "fail_marker": str(tmp_path / "fired"),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_iceberg", tmp_path / "ck", failing)
    run_available_now(spark, tmp_path / "in", "faulty_iceberg", tmp_path / "ck", failing)
    table = load_catalog(IcebergOptions.from_options(options)).load_table("db.events")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == ids
    assert table.location().startswith(f"s3://{bucket}/warehouse")
    keys = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="warehouse/db/events/data/")
    files = {f"s3://{bucket}/{o['Key']}" for o in keys["Contents"] if o["Key"][-1] != "/"}
    assert files == {t.file.file_path for t in table.scan().plan_files()}


def test_glue_catalog_with_quix_names(spark: Any, tmp_path: Path, s3_server: Any) -> None:
    bucket = f"glue-{uuid.uuid4().hex[:10]}"
    s3_server.create_bucket(bucket)
    aws = _aws(s3_server)
    options = {
        "table_name": f"db_{uuid.uuid4().hex[:8]}.events",
        "data_catalog_spec": "aws_glue",
        "aws_s3_uri": f"s3://{bucket}/warehouse",
        **aws,
    }
    write(spark.range(10), options)
    write(spark.range(10, 20), options)
    opts = IcebergOptions.from_options(options)
    table = load_catalog(opts).load_table(options["table_name"])
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(20))
    assert len(table.snapshots()) == 2
    refused = {**options, "aws_secret_access_key": "wrong-secret-value"}
    with s3_server.enforce_auth(), pytest.raises(Exception, match="iceberg: ") as raised:
        write(spark.range(3), {**refused, "table_name": "other.events"})
    assert "wrong-secret-value" not in str(raised.value)


def test_sql_catalog_on_postgresql(spark: Any, tmp_path: Path, pg: dict[str, Any]) -> None:
    o = pg["options"]
    uri = f"postgresql+psycopg2://{o['user']}:{o['password']}@{o['host']}:{o['port']}/{o['dbname']}"
    options = {"table_name": "db.events", "catalog_uri": uri, "warehouse": str(tmp_path / "wh")}
    write(spark.range(20), options)
    table = load_catalog(IcebergOptions.from_options(options)).load_table("db.events")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(20))
    assert "sqlite" not in repr(IcebergOptions.from_options(options))
    assert o["password"] not in repr(IcebergOptions.from_options(options))


# ----------------------------------------------------------------------------- REST catalog


def _rest_options(iceberg_rest: Any) -> dict[str, str]:
    return {
        "table_name": f"db.events_{uuid.uuid4().hex[:8]}",
        "catalog_type": "rest",
        "catalog_uri": iceberg_rest.url,
        "catalog.token": "rest-secret-token",
    }


def test_rest_catalog_streams_exactly_once(spark: Any, tmp_path: Path, iceberg_rest: Any) -> None:
    options = _rest_options(iceberg_rest)
    ids = write_input_files(tmp_path / "in", files=2, rows_per_file=10)
    run_available_now(spark, tmp_path / "in", "iceberg", tmp_path / "ck", options)
    table = iceberg_rest.catalog.load_table(options["table_name"])
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == ids
    assert len(table.snapshots()) == 2


@pytest.mark.parametrize("status", [409, 504])
def test_rest_conflict_and_lost_response_are_retried_without_a_second_snapshot(
    iceberg_rest: Any, status: int
) -> None:
    options = _rest_options(iceberg_rest)
    rows = pa.table({"id": pa.array(range(5), pa.int64())})
    sink, receipt = _sink_with_files({"options": options}, rows)
    before = iceberg_rest.commits
    iceberg_rest.fail_next_commits(status)
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    table = iceberg_rest.catalog.load_table(options["table_name"])
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(5))
    assert len(table.snapshots()) == 1
    assert iceberg_rest.commits - before == 1  # 409: refused, then one commit; 504: landed
    assert "rest-secret-token" not in repr(sink) + repr(sink.options)


def test_hostile_column_names_and_values_round_trip(ice: dict[str, Any]) -> None:
    rows = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "a b": ["x", "y"],
            "ünï 😀": ["emoji 😀", "line1\nline2"],
            'quote"s\\': ["'; DROP TABLE x; --", "\x00nul"],
        }
    )
    ice["options"]["table_name"] = "db.`odd`-table"
    sink, receipt = _sink_with_files(ice, rows)
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    back = ice["table"]("db.`odd`-table").scan().to_arrow().sort_by("id")
    assert back.to_pylist() == rows.to_pylist()
