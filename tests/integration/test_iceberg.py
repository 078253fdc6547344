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
from quixsinks.core.errors import LedgerFenceError, OptionError, RecordError
from quixsinks.core.sink import CommitContext, Receipt
from quixsinks.sinks.iceberg import IcebergOptions, IcebergSink
from quixsinks.sinks.iceberg.client import load_catalog
from quixsinks.testing import faulty

from .streams import run_available_now, write_input_files

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

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
        2024, 5, 1, 0, 0, 1, tzinfo=datetime.UTC
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
    ice: dict[str, Any],
    rows: pa.Table,
    sink_id: str = "sink-a",
    query_id: str = "query-a",
    batch: int = 4,
) -> tuple[Any, Any]:
    """A planned sink and the receipt of one task of micro-batch ``batch`` that wrote
    ``rows`` (no Spark)."""
    sink = IcebergSink(IcebergOptions.from_options(ice["options"]))
    sink.prepare(rows.schema)
    assert sink.records is not None
    context = WriteContext(sink_id, batch, 0, "a0", True, query_id)
    staged = sink.write(SinkBatch(rows, sink.records, context))
    receipt: Receipt[Any] = Receipt(sink_id, batch, 0, "a0", query_id=query_id, staged=[staged])
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


def test_a_lost_answer_then_another_writers_rewrite_keeps_the_batchs_files(
    ice: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 5 lands, its answer is lost, and another writer rewrites the table before the
    retry: the retry finds batch 5 committed and deletes only files no snapshot names, so
    batch 5's snapshot (time travel, incremental readers) still reads."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import CommitStateUnknownException

    sink, receipt = _sink_with_files(ice, pa.table({"id": pa.array([1], pa.int64())}))
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    real = SqlCatalog.commit_table

    def lost_then_rewritten(self: Any, *args: Any, **kwargs: Any) -> Any:
        real(self, *args, **kwargs)  # applied; its answer is lost
        monkeypatch.setattr(SqlCatalog, "commit_table", real)
        table = self.load_table("db.events")
        table.overwrite(table.scan().to_arrow())  # a compaction, say: the same rows
        raise CommitStateUnknownException("504 after the commit")

    monkeypatch.setattr(SqlCatalog, "commit_table", lost_then_rewritten)
    _, receipt5 = _sink_with_files(ice, pa.table({"id": pa.array([2, 3], pa.int64())}), batch=5)
    sink.commit(CommitContext("sink-a", 5, True, "query-a"), [receipt5])
    table = ice["table"]()
    [batch5] = [
        s for s in table.metadata.snapshots
        if s.summary.additional_properties.get("quixsinks.batch-id") == "5"
    ]  # fmt: skip
    assert sorted(table.scan(snapshot_id=batch5.snapshot_id).to_arrow()["id"].to_pylist()) == [
        1,
        2,
        3,
    ]
    assert ice["ids"]() == [1, 2, 3]


def _commit_elsewhere(ice: dict[str, Any], batch: int, rows: pa.Table) -> None:
    """Commit ``batch`` of sink-a as another process would: from a table it loads itself,
    leaving this process's kept table (core.tables.commit) as it was."""
    from quixsinks.core.tables import commit as table_commit
    from quixsinks.sinks.iceberg.client import catalog_of

    options = IcebergOptions.from_options(ice["options"])
    key = (catalog_of(options).key, options.table_name)
    kept = table_commit._COMMITTED.take(key, lambda: None)
    assert kept is not None, "the first commit left its table for the next one"
    sink, receipt = _sink_with_files(ice, rows, batch=batch)
    sink.commit(CommitContext("sink-a", batch, True, "query-a"), [receipt])
    table_commit._COMMITTED.clear()
    table_commit._COMMITTED.give_back(key, kept, keep=True)  # stale now


def test_a_commit_from_a_stale_kept_table_still_sees_what_landed_since(
    ice: dict[str, Any],
) -> None:
    """A process's next commit starts from the table its last commit left. When another
    process committed the same batch in between (a zombie driver, a replay elsewhere),
    the catalog refuses the stale commit, and the fresh load finds the batch: no
    duplicate."""
    rows = pa.table({"id": pa.array(range(5), pa.int64())})
    sink, receipt = _sink_with_files(ice, rows)
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    batch5 = pa.table({"id": pa.array(range(100, 103), pa.int64())})
    _commit_elsewhere(ice, 5, batch5)
    _, replay = _sink_with_files(ice, batch5, batch=5)
    sink.commit(CommitContext("sink-a", 5, True, "query-a"), [replay])  # from the stale table
    assert [s["quixsinks.batch-id"] for s in snapshots(ice["table"]())] == ["4", "5"]
    assert ice["ids"]() == [0, 1, 2, 3, 4, 100, 101, 102]
    # and the next batch commits on top of both
    _, receipt6 = _sink_with_files(ice, pa.table({"id": pa.array([200], pa.int64())}), batch=6)
    sink.commit(CommitContext("sink-a", 6, True, "query-a"), [receipt6])
    assert [s["quixsinks.batch-id"] for s in snapshots(ice["table"]())] == ["4", "5", "6"]


def test_a_commit_from_a_kept_table_whose_schema_changed_since_uses_the_new_schema(
    ice: dict[str, Any],
) -> None:
    from pyiceberg.types import StringType

    rows = pa.table({"id": pa.array(range(3), pa.int64())})
    sink, receipt = _sink_with_files(ice, rows)
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    table = ice["table"]()
    with table.update_schema() as update:  # another writer adds a column
        update.add_column("note", StringType())
    current = ice["table"]().metadata.current_schema_id
    _, receipt5 = _sink_with_files(ice, rows, batch=5)
    sink.commit(CommitContext("sink-a", 5, True, "query-a"), [receipt5])
    latest = ice["table"]().metadata
    assert latest.snapshot_by_id(latest.current_snapshot_id).schema_id == current
    assert ice["ids"]() == sorted([0, 1, 2] * 2)


def test_a_replay_after_the_table_was_rolled_back_is_committed_again(
    ice: dict[str, Any],
) -> None:
    """The kept table says "committed already", but an operator rolled the main branch
    back since: the decision is made again on the current table, and the replay lands."""
    sink, receipt = _sink_with_files(ice, pa.table({"id": pa.array([1, 2], pa.int64())}))
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    batch5 = pa.table({"id": pa.array([3, 4], pa.int64())})
    _, receipt5 = _sink_with_files(ice, batch5, batch=5)
    sink.commit(CommitContext("sink-a", 5, True, "query-a"), [receipt5])
    table = ice["table"]()
    with table.manage_snapshots() as manage:  # another process: batch 5 is undone
        manage.rollback_to_snapshot(table.metadata.current_snapshot().parent_snapshot_id)
    assert ice["ids"]() == [1, 2]
    _, replay = _sink_with_files(ice, batch5, batch=5)
    sink.commit(CommitContext("sink-a", 5, True, "query-a"), [replay])  # the kept table
    assert ice["ids"]() == [1, 2, 3, 4]


def test_a_new_query_on_a_recreated_table_is_not_fenced_by_the_kept_table(
    ice: dict[str, Any],
) -> None:
    """The table was dropped and created again, the checkpoint deleted: the kept table
    still holds the old query's entries; the fence is read on the current table."""
    sink, receipt = _sink_with_files(ice, pa.table({"id": pa.array([1], pa.int64())}))
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    catalog = load_catalog(IcebergOptions.from_options(ice["options"]))
    schema = ice["table"]().schema()
    catalog.drop_table("db.events")
    catalog.create_table("db.events", schema=schema)
    rows = pa.table({"id": pa.array([7], pa.int64())})
    _, receipt0 = _sink_with_files(ice, rows, batch=0, query_id="query-b")
    sink.commit(CommitContext("sink-a", 0, True, "query-b"), [receipt0])
    assert ice["ids"]() == [7]


def test_a_kept_table_changed_since_costs_no_commit_attempt(ice: dict[str, Any]) -> None:
    """With commit_max_attempts=1, another writer's append since this process's last
    commit does not fail the batch: the commit made again from the current table is part
    of the same attempt."""
    options = {**ice["options"], "commit_max_attempts": "1"}
    one = {**ice, "options": options}
    sink, receipt = _sink_with_files(one, pa.table({"id": pa.array([1], pa.int64())}))
    sink.commit(CommitContext("sink-a", 4, True, "query-a"), [receipt])
    ice["table"]().append(pa.table({"id": pa.array([50], pa.int64())}))  # another writer
    _, receipt5 = _sink_with_files(one, pa.table({"id": pa.array([2], pa.int64())}), batch=5)
    sink.commit(CommitContext("sink-a", 5, True, "query-a"), [receipt5])
    assert ice["ids"]() == [1, 2, 50]


def test_a_column_dropped_by_another_writer_after_planning_fails_the_commit(
    ice: dict[str, Any],
) -> None:
    """Another writer drops column ``name`` and adds it again (a new field id) between two
    micro-batches: the batch planned before (field ids cached per process) is not
    committed with values that would read as null; its replay plans again and lands."""
    from pyiceberg.types import StringType

    from quixsinks.core.tables.commit import ColumnsGone

    def batch(batch_id: int, ident: int, name: str) -> tuple[Any, Any]:
        rows = pa.table({"id": pa.array([ident], pa.int64()), "name": [name]})
        return _sink_with_files(ice, rows, batch=batch_id)

    sink, receipt = batch(0, 1, "one")
    sink.commit(CommitContext("sink-a", 0, True, "query-a"), [receipt])
    sink, receipt = batch(1, 2, "two")  # planned, written: then the schema changes
    with ice["table"]().update_schema() as update:
        update.delete_column("name")
    with ice["table"]().update_schema() as update:
        update.add_column("name", StringType())
    with pytest.raises(ColumnsGone, match="no longer has"):
        sink.commit(CommitContext("sink-a", 1, True, "query-a"), [receipt])
    sink, receipt = batch(1, 2, "two")  # the replay
    sink.commit(CommitContext("sink-a", 1, True, "query-a"), [receipt])
    rows = ice["table"]().scan().to_arrow().sort_by("id").to_pylist()
    assert rows == [{"id": 1, "name": None}, {"id": 2, "name": "two"}]


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


def _azure(azurite: Any) -> dict[str, str]:
    authority = f"{azurite.host}:{azurite.port}"
    return {
        "catalog.adls.account-name": azurite.account,
        "catalog.adls.account-key": azurite.account_key,
        "catalog.adls.blob-storage-authority": authority,
        "catalog.adls.dfs-storage-authority": authority,
        "catalog.adls.blob-storage-scheme": "http",
        "catalog.adls.dfs-storage-scheme": "http",
    }


def test_sql_catalog_with_an_azure_warehouse_streams_exactly_once(
    spark: Any, tmp_path: Path, azurite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """abfs:// on Azurite through pyiceberg's pyarrow FileIO (pyarrow's AzureFileSystem):
    a commit that landed and then failed is replayed once; no stray file; the orphan sweep
    lists the container."""
    container = f"ice-{uuid.uuid4().hex[:10]}"
    azurite.create_container(container)
    options = {
        "table_name": "db.events",
        "catalog_uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"abfs://{container}/warehouse",
        **_azure(azurite),
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
    opts = IcebergOptions.from_options(options)
    table = load_catalog(opts).load_table("db.events")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == ids
    assert table.location() == f"abfs://{container}/warehouse/db/events"
    assert [s["quixsinks.batch-id"] for s in snapshots(table)] == ["0", "1"]
    with azurite.service_client() as service:
        blobs = service.get_container_client(container).list_blobs("warehouse/db/events/data/")
        # (pyarrow's AzureFileSystem leaves a directory marker blob, data/)
        files = {f"abfs://{container}/{b.name}" for b in blobs if not b.name.endswith("/")}
    assert files == {t.file.file_path for t in table.scan().plan_files()}
    assert azurite.account_key not in repr(opts)
    # the orphan sweep lists and deletes on Azure too: a file no snapshot names
    sink, dead = _sink_with_files({"options": options}, pa.table({"id": pa.array([99])}))
    assert sink._sweep_orphans(force=True) == 0  # too young
    _later(monkeypatch, 2)
    assert sink._sweep_orphans(force=True) == 1
    with azurite.service_client() as service:
        blobs = service.get_container_client(container).list_blobs("warehouse/db/events/data/")
        left = {f"abfs://{container}/{b.name}" for b in blobs if not b.name.endswith("/")}
    assert left == files
    assert dead.staged[0][0].file_path not in left
    table = load_catalog(opts).load_table("db.events")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == ids


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


# ----------------------------------------------------------------------------- Kafka JSON values

T0_MS = 1714521600000


def kafka_rows(records: list[tuple[str | None, str | None]], start: int = 0) -> pa.Table:
    """Rows in Spark's Kafka source schema: binary key and JSON value, a day apart."""
    n = len(records)
    return pa.table(
        {
            "key": pa.array(
                [k.encode() if k is not None else None for k, _ in records], pa.binary()
            ),
            "value": pa.array(
                [v.encode() if v is not None else None for _, v in records], pa.binary()
            ),
            "topic": pa.array(["orders"] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(start, start + n), pa.int64()),
            "timestamp": pa.array(
                [(T0_MS + (start + i) * 86_400_000) * 1000 for i in range(n)],
                pa.timestamp("us", "UTC"),
            ),
            "timestampType": pa.array([0] * n, pa.int32()),
        }
    )


def commit_kafka_batch(
    ice: dict[str, Any], batch_id: int, records: list[tuple[str | None, str | None]]
) -> None:
    """Plan, write and commit one micro-batch of Kafka-shaped rows (no Spark), in two task
    partitions so that two JSON shapes evolve the table in one batch."""
    rows = kafka_rows(records, start=batch_id * 100)
    sink = IcebergSink(IcebergOptions.from_options(ice["options"]))
    sink.prepare(rows.schema)
    assert sink.records is not None
    assert sink.records.value_json
    half = max(1, rows.num_rows // 2)
    receipts: list[Receipt[Any]] = []
    for partition, part in enumerate([rows.slice(0, half), rows.slice(half)]):
        context = WriteContext("sink-k", batch_id, partition, f"a{partition}", True, "query-k")
        staged = sink.write(SinkBatch(part, sink.records, context))
        receipts.append(
            Receipt(
                "sink-k", batch_id, partition, f"a{partition}", query_id="query-k", staged=[staged]
            )
        )
    sink.commit(CommitContext("sink-k", batch_id, True, "query-k"), receipts)


def _subset(expected: Any, got: Any) -> bool:
    """Whether every key of ``expected`` (JSON) is in ``got`` (read back) with its value;
    keys the table has besides are null."""
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and all(k in got and _subset(v, got[k]) for k, v in expected.items())
            and all(v is None for k, v in got.items() if k not in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(_subset(e, g) for e, g in zip(expected, got, strict=True))
        )
    if isinstance(expected, float) or isinstance(got, float):
        return got is not None and expected is not None and float(got) == float(expected)
    return bool(got == expected)


KAFKA_BATCHES: list[list[tuple[str | None, str | None]]] = [
    # a tombstone first, a JSON null, nested objects and arrays
    [
        ("k0", None),
        ("k1", '{"id": 1, "v": 10, "geo": {"lat": 1.5, "lon": 2.5}}'),
        ("k2", '{"id": 2, "v": 20, "tags": ["a", "b"]}'),
        ("k3", "null"),
    ],
    # new keys appear (one null-only: no type yet), an int in the double column, a
    # date-like string, a key missing from some rows
    [
        ("k4", '{"id": 4, "geo": {"lat": 3, "lon": 4.25, "alt": 100}, "note": null}'),
        ("k5", '{"id": 5, "at": "2024-05-01", "tags": [], "flag": true}'),
        (None, '{"id": 6, "v": 60, "empty": {}}'),
    ],
    # the null-only key gets a value, keys change again
    [
        ("k7", '{"id": 7, "note": "now text", "score": 0.5}'),
        ("k8", '{"id": 8, "tags": ["c"], "deep": {"a": {"b": [1, 2]}}}'),
    ],
]


def test_kafka_json_values_are_written_in_quix_layout_with_every_key(
    ice: dict[str, Any],
) -> None:
    import json

    for batch_id, records in enumerate(KAFKA_BATCHES):
        commit_kafka_batch(ice, batch_id, records)
    table = ice["table"]()
    # Quix's layout and default partitioning
    names = [f.name for f in table.schema().fields]
    assert names[:2] == ["_key", "_timestamp"]
    assert [str(f.field_type) for f in table.schema().fields[:2]] == ["string", "timestamptz"]
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("_key", "identity"),
        ("_timestamp_day", "day"),
    ]
    assert not {"key", "value", "topic", "partition", "offset", "timestamp"} & set(names)
    # every JSON key that ever held a value is a column
    every_key = {
        k
        for records in KAFKA_BATCHES
        for _, v in records
        if v not in (None, "null")
        for k, item in json.loads(v).items()
        if item not in (None, {})
    }
    assert set(names) == {"_key", "_timestamp"} | every_key
    assert str(table.schema().find_type("geo.alt")) == "long"
    assert str(table.schema().find_type("deep.a.b.element")) == "long"
    assert str(table.schema().find_type("geo.lat")) == "double"
    assert str(table.schema().find_type("geo.lon")) == "double"
    assert str(table.schema().find_type("note")) == "string"
    # every record, once, every key with its value
    back = table.scan().to_arrow().to_pylist()
    assert len(back) == sum(map(len, KAFKA_BATCHES))
    by_time = {r["_timestamp"]: r for r in back}
    for batch_id, records in enumerate(KAFKA_BATCHES):
        for i, (key, value) in enumerate(records):
            stamp = datetime.datetime.fromtimestamp(
                (T0_MS + (batch_id * 100 + i) * 86_400_000) / 1000, tz=datetime.UTC
            )
            row = by_time.pop(stamp)
            assert row["_key"] == key
            parsed = json.loads(value) if value is not None else None
            got = {k: v for k, v in row.items() if k not in ("_key", "_timestamp")}
            expected = {k: v for k, v in (parsed or {}).items() if v not in (None, {})}
            assert _subset(expected, got), (key, expected, got)
    assert by_time == {}
    summaries = snapshots(table)
    assert [s["quixsinks.batch-id"] for s in summaries] == ["0", "1", "2"]


def test_kafka_json_tasks_adding_columns_at_once_all_land(ice: dict[str, Any]) -> None:
    """Four tasks of one batch, each with a JSON key the table lacks, evolve the schema at
    the same moment: the losers of each schema commit reload and add theirs; one commit."""
    commit_kafka_batch(ice, 0, [("k0", '{"id": 0}')])
    rows = [kafka_rows([(f"k{i}", f'{{"id": {i}, "new_{i}": {i * 10}}}')]) for i in range(1, 5)]
    sink = IcebergSink(IcebergOptions.from_options(ice["options"]))
    sink.prepare(rows[0].schema)
    assert sink.records is not None
    records = sink.records
    barrier = threading.Barrier(len(rows))
    receipts: list[Receipt[Any]] = []
    errors: list[BaseException] = []

    def task(partition: int) -> None:
        context = WriteContext("sink-k", 1, partition, f"a{partition}", True, "query-k")
        try:
            barrier.wait()
            staged = sink.write(SinkBatch(rows[partition], records, context))
            receipts.append(
                Receipt(
                    "sink-k", 1, partition, f"a{partition}", query_id="query-k", staged=[staged]
                )
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=task, args=(i,)) for i in range(len(rows))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    sink.commit(CommitContext("sink-k", 1, True, "query-k"), receipts)
    table = ice["table"]()
    assert {f.name for f in table.schema().fields} == {
        "_key",
        "_timestamp",
        "id",
        *(f"new_{i}" for i in range(1, 5)),
    }
    back = {r["_key"]: r for r in table.scan().to_arrow().to_pylist()}
    for i in range(1, 5):
        assert back[f"k{i}"]["id"] == i
        assert back[f"k{i}"][f"new_{i}"] == i * 10
    assert [s["quixsinks.batch-id"] for s in snapshots(table)] == ["0", "1"]


def test_kafka_json_stream_through_spark(spark: Any, tmp_path: Path, ice: dict[str, Any]) -> None:
    """The Kafka-shaped stream every sink gets (tests/integration/test_kafka_stream.py):
    batches 0 and 1 land with every key; batch 2 turns `v` from a number into a string,
    which the table refuses, naming the column."""
    from .test_kafka_stream import run

    with pytest.raises(Exception, match=r"JSON of batch 2 is incompatible.*\bv\b"):
        run(spark, tmp_path, "iceberg", ice["options"])
    table = ice["table"]()
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("_key", "string"),
        ("_timestamp", "timestamptz"),
        ("id", "long"),
        ("v", "long"),
        ("tag", "string"),
        ("at", "string"),
    ]
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["_key"])
    assert [(r["_key"], r["id"], r["v"], r["tag"], r["at"]) for r in rows] == [
        ("k0", None, None, None, None),
        ("k1", 1, 10, None, None),
        ("k2", 2, 20, None, None),
        ("k3", 3, 30, "a", "2024-05-01"),
        ("k4", None, None, None, None),
    ]
    assert [s["quixsinks.batch-id"] for s in snapshots(table)] == ["0", "1"]


def test_kafka_json_schema_freeze_refuses_a_new_key_and_takes_known_ones(
    ice: dict[str, Any],
) -> None:
    commit_kafka_batch(ice, 0, [("k1", '{"id": 1, "v": 10}')])
    ice["options"]["schema_mode"] = "freeze"
    commit_kafka_batch(ice, 1, [("k2", '{"id": 2}'), ("k3", None), ("k4", '{"v": null}')])
    with pytest.raises(
        RecordError, match=r"the JSON of batch 2 does not fit .*schema_mode=freeze.*extra"
    ):
        commit_kafka_batch(ice, 2, [("k5", '{"id": 5, "extra": "x"}')])
    rows = ice["table"]().scan().to_arrow().sort_by("_key").to_pylist()
    assert [(r["_key"], r["id"], r["v"]) for r in rows] == [
        ("k1", 1, 10),
        ("k2", 2, None),
        ("k3", None, None),
        ("k4", None, None),
    ]
    assert [f.name for f in ice["table"]().schema().fields] == ["_key", "_timestamp", "id", "v"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"id": "one"}', r"incompatible with table db\.events.*\bid\b"),
        ('{"id": 1.5}', r"incompatible with table db\.events.*\bid\b"),
        ('{"_key": "mine"}', r"has a key '_key' \(row 0\), which Quix's layout uses"),
    ],
)
def test_kafka_json_values_the_table_cannot_take_fail_naming_the_key(
    ice: dict[str, Any], value: str, message: str
) -> None:
    commit_kafka_batch(ice, 0, [("k1", '{"id": 1}')])
    with pytest.raises(RecordError, match=message):
        commit_kafka_batch(ice, 1, [("k2", value)])
    assert ice["ids"]() == [1]


def test_kafka_keys_that_are_not_text_fail_naming_the_row(ice: dict[str, Any]) -> None:
    rows = kafka_rows([("k1", '{"id": 1}')]).set_column(
        0, "key", pa.array([b"\xff\xfe"], pa.binary())
    )
    sink = IcebergSink(IcebergOptions.from_options(ice["options"]))
    sink.prepare(rows.schema)
    assert sink.records is not None
    context = WriteContext("sink-k", 0, 0, "a0", True, "query-k")
    with pytest.raises(RecordError, match="row 0 of batch 0 has a key that is not UTF-8"):
        sink.write(SinkBatch(rows, sink.records, context))


# ----------------------------------------------------------------------------- snapshot expiry


def commit_ids(
    ice: dict[str, Any], sink_id: str, query_id: str, batch_id: int, ids: range
) -> IcebergSink:
    """Write and commit one batch of ``ids`` (query_id "": a batch write); no Spark."""
    rows = pa.table({"id": pa.array(ids, pa.int64())})
    sink = IcebergSink(IcebergOptions.from_options(ice["options"]))
    sink.prepare(rows.schema)
    assert sink.records is not None
    streaming = bool(query_id)
    context = WriteContext(sink_id, batch_id, 0, "a0", streaming, query_id)
    staged = sink.write(SinkBatch(rows, sink.records, context))
    receipt: Receipt[Any] = Receipt(sink_id, batch_id, 0, "a0", query_id=query_id, staged=[staged])
    sink.commit(CommitContext(sink_id, batch_id, streaming, query_id), [receipt])
    return sink


def _later(monkeypatch: pytest.MonkeyPatch, days: float) -> None:
    """The sink's clock ``days`` ahead (snapshots keep their real commit times)."""
    import quixsinks.sinks.iceberg.sink as sink_module

    real = sink_module._now_ms
    monkeypatch.setattr(sink_module, "_now_ms", lambda: real() + days * 86_400_000)


def test_expire_snapshots_older_than_carries_each_streaming_sink_ids_newest_entry(
    ice: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ice["options"]["expire_snapshots_older_than"] = "7d"
    commit_ids(ice, "sink-old", "query-old", 0, range(0, 3))  # a query that stopped
    commit_ids(ice, "write-1", "", 0, range(3, 6))  # a batch write: never replayed
    for batch in range(5):
        commit_ids(ice, "sink-a", "query-a", batch, range(10 + batch * 3, 13 + batch * 3))
    assert len(ice["table"]().metadata.snapshots) == 7  # all younger than 7 days
    _later(monkeypatch, 8)
    commit_ids(ice, "sink-a", "query-a", 5, range(25, 28))
    table = ice["table"]()
    assert [(s["quixsinks.sink-id"], s["quixsinks.batch-id"]) for s in snapshots(table)] == [
        ("sink-a", "5")
    ]
    # the stopped query's newest entry went into a table property with the expiry; the
    # batch write's did not (a batch write is never replayed)
    carried = {k: v for k, v in table.properties.items() if k.startswith("quixsinks.")}
    assert carried == {"quixsinks.ledger.sink-old": "0:query-old"}
    every = [*range(0, 6), *range(10, 28)]
    assert ice["ids"]() == every
    # the old query restarted from its checkpoint replays its last batch: recognised
    commit_ids(ice, "sink-old", "query-old", 0, range(0, 3))
    commit_ids(ice, "sink-a", "query-a", 5, range(25, 28))
    assert ice["ids"]() == every
    assert len(ice["table"]().metadata.snapshots) == 1
    # and the sink id still belongs to it: a new checkpoint reusing it is fenced
    with pytest.raises(LedgerFenceError, match="belongs to streaming query query-old"):
        commit_ids(ice, "sink-old", "query-new", 0, range(100, 103))
    assert ice["ids"]() == every
    # the old query goes on; when its new snapshot is expired, the carried entry follows
    commit_ids(ice, "sink-old", "query-old", 1, range(3, 4))
    commit_ids(ice, "sink-a", "query-a", 6, range(28, 29))
    table = ice["table"]()
    assert [s["quixsinks.batch-id"] for s in snapshots(table)] == ["6"]
    assert table.properties["quixsinks.ledger.sink-old"] == "1:query-old"
    commit_ids(ice, "sink-old", "query-old", 1, range(3, 4))  # a replay: recognised
    assert ice["ids"]() == sorted([*every, 3, 28])


def test_a_takeover_survives_the_expiry_of_its_marker(
    ice: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """query-b takes sink-x over from query-a (the marker is in query-b's first snapshot);
    once every snapshot of both is expired, query-b still owns sink-x and query-a's
    entries do not come back."""
    ice["options"]["expire_snapshots_older_than"] = "1d"
    commit_ids(ice, "sink-x", "query-a", 0, range(0, 1))
    commit_ids(ice, "sink-x", "query-a", 1, range(1, 2))
    ice["options"]["takeover_query_id"] = "query-a"
    commit_ids(ice, "sink-x", "query-b", 0, range(2, 3))
    del ice["options"]["takeover_query_id"]
    commit_ids(ice, "sink-x", "query-b", 1, range(3, 4))
    summaries = snapshots(ice["table"]())
    assert summaries[2]["quixsinks.takeover-of"] == "query-a"
    _later(monkeypatch, 2)
    for batch in range(3):
        commit_ids(ice, "sink-y", "query-y", batch, range(10 + batch, 11 + batch))
    table = ice["table"]()
    assert [s["quixsinks.sink-id"] for s in snapshots(table)] == ["sink-y"]
    assert table.properties["quixsinks.ledger.sink-x"] == "1:query-b"
    commit_ids(ice, "sink-x", "query-b", 1, range(3, 4))  # query-b's replay: recognised
    commit_ids(ice, "sink-x", "query-b", 2, range(4, 5))  # and it goes on
    with pytest.raises(LedgerFenceError, match="belongs to streaming query query-b"):
        commit_ids(ice, "sink-x", "query-a", 2, range(100, 101))
    assert ice["ids"]() == [0, 1, 2, 3, 4, 10, 11, 12]


def test_keep_snapshots_carries_the_ledger_entry_of_another_sink_id(ice: dict[str, Any]) -> None:
    ice["options"]["keep_snapshots"] = "2"
    commit_ids(ice, "sink-old", "query-old", 7, range(0, 3))
    for batch in range(6):
        commit_ids(ice, "sink-a", "query-a", batch, range(10 + batch, 11 + batch))
    table = ice["table"]()
    # expired in bulk at the 5th snapshot (more to expire than the 2 kept): sink-old's
    # snapshot went, its entry is in a table property
    assert [s["quixsinks.batch-id"] for s in snapshots(table)] == ["2", "3", "4", "5"]
    assert table.properties["quixsinks.ledger.sink-old"] == "7:query-old"
    commit_ids(ice, "sink-old", "query-old", 7, range(0, 3))  # its replay: recognised
    assert ice["ids"]() == [0, 1, 2, *range(10, 16)]
    # once the branch holds a newer entry of sink-old, the carried one is removed
    for batch in (6, 7, 8):
        commit_ids(ice, "sink-a", "query-a", batch, range(10 + batch, 11 + batch))
    commit_ids(ice, "sink-old", "query-old", 8, range(3, 4))
    table = ice["table"]()
    assert [(s["quixsinks.sink-id"], s["quixsinks.batch-id"]) for s in snapshots(table)] == [
        ("sink-a", "8"),
        ("sink-old", "8"),
    ]
    assert "quixsinks.ledger.sink-old" not in table.properties
    commit_ids(ice, "sink-old", "query-old", 8, range(3, 4))  # its replay: recognised
    assert ice["ids"]() == [0, 1, 2, 3, *range(10, 19)]


def test_keep_snapshots_carries_the_entry_of_a_tagged_snapshot_cut_off_the_branch(
    ice: dict[str, Any],
) -> None:
    """A tag keeps sink-old's snapshot from expiry, but the snapshots after it go, so the
    main branch's ancestry no longer reaches it: its entry is carried all the same, and
    its replay and the fence still see it."""
    commit_ids(ice, "sink-old", "query-old", 0, range(0, 2))
    table = ice["table"]()
    with table.manage_snapshots() as manage:
        manage.create_tag(table.metadata.current_snapshot_id, "audit")
    ice["options"]["keep_snapshots"] = "2"
    for batch in range(8):
        commit_ids(ice, "sink-a", "query-a", batch, range(10 + batch, 11 + batch))
    table = ice["table"]()
    assert len(table.metadata.snapshots) < 9  # expired, the tagged one kept
    assert table.properties["quixsinks.ledger.sink-old"] == "0:query-old"
    commit_ids(ice, "sink-old", "query-old", 0, range(0, 2))  # its replay: recognised
    assert ice["ids"]() == [0, 1, *range(10, 18)]
    with pytest.raises(LedgerFenceError):
        commit_ids(ice, "sink-old", "query-new", 0, range(100, 101))


def test_keep_snapshots_with_an_age_limit_expires_only_old_snapshots_past_the_newest_n(
    ice: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ice["options"]["keep_snapshots"] = "2"
    ice["options"]["expire_snapshots_older_than"] = "1h"
    for batch in range(6):
        commit_ids(ice, "sink-a", "query-a", batch, range(batch, batch + 1))
    assert len(ice["table"]().metadata.snapshots) == 6  # past 2N, but none is an hour old
    _later(monkeypatch, 1 / 12)  # two hours on
    commit_ids(ice, "sink-a", "query-a", 6, range(6, 7))
    table = ice["table"]()
    assert [s["quixsinks.batch-id"] for s in snapshots(table)] == ["5", "6"]
    assert ice["ids"]() == list(range(7))
