"""The `bigquery` sink through Spark against bqemulator (REST + Storage Write API gRPC).

What the emulator does and does not check is in tests/services/README.md (BigQuery).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.sinks.bigquery import BigQuerySink
from quixsinks.testing import faulty

from .streams import run_available_now, write_input_files

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)


def write(df: Any, sink: dict[str, Any], mode: str = "append", **options: str) -> None:
    writer = df.write.format(options.pop("fmt", "bigquery")).mode(mode)
    for key, value in {**sink["options"], **options}.items():
        writer = writer.option(key, value)
    writer.save()


def rows(sink: dict[str, Any], table: str | None = None, order: str = "id") -> list[dict[str, Any]]:
    name = table or sink["table"]
    result = sink["client"].query(f"SELECT * FROM `{name}` ORDER BY {order}").result()
    return [dict(r.items()) for r in result]


_LEGACY = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL", "STRUCT": "RECORD"}


def schema(sink: dict[str, Any], table: str | None = None) -> dict[str, tuple[str, str]]:
    """Column -> (type, mode), in standard SQL names (BigQuery answers legacy ones)."""
    t = sink["client"].get_table(table or sink["table"])
    return {f.name: (_LEGACY.get(f.field_type, f.field_type), f.mode) for f in t.schema}


def ledger(sink: dict[str, Any]) -> list[dict[str, Any]]:
    name = f"{sink['options']['project_id']}.{sink['dataset']}._quixsinks_ledger"
    return rows(sink, name, "batch_id")


def staging(sink: dict[str, Any]) -> list[dict[str, Any]]:
    return rows(sink, sink["table"] + "_qs_staging", "_qs_token")


def test_batch_write_creates_dataset_and_table_with_int64_not_float64(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    df = spark.sql(
        "SELECT id, concat('k', cast(id AS string)) AS key, cast(id AS double) / 4 AS temp, "
        "id % 2 = 0 AS ok FROM range(25)"
    )
    write(df, bigquery_sink)
    got = rows(bigquery_sink)
    assert [r["id"] for r in got] == list(range(25))
    assert got[5] == {"__key": "k5", "id": 5, "temp": 1.25, "ok": False}
    assert schema(bigquery_sink) == {
        "__key": ("STRING", "NULLABLE"),
        "id": ("INT64", "NULLABLE"),
        "temp": ("FLOAT64", "NULLABLE"),
        "ok": ("BOOL", "NULLABLE"),
    }
    assert staging(bigquery_sink) == []
    assert ledger(bigquery_sink) == []  # a batch write keeps no ledger row


def test_spark_types_round_trip_with_numeric_datetime_repeated_and_record(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    df = spark.sql(
        """
        SELECT id, CAST(id AS TINYINT) AS tiny, CAST(id * 1.25 AS DECIMAL(10, 2)) AS price,
               DATE'2024-02-29' AS day, TIMESTAMP'2024-05-01 12:30:00.123456 UTC' AS at,
               TIMESTAMP_NTZ'2024-05-01 12:30:00' AS local, X'00FF' AS raw, 'é "q"' AS text,
               array(id, id + 1) AS nums, named_struct('a', id, 'b', 'x') AS rec,
               map('k', id) AS tags, CAST(NULL AS STRING) AS missing
        FROM range(3)
        """
    )
    write(df, bigquery_sink)
    assert schema(bigquery_sink) == {
        "id": ("INT64", "NULLABLE"),
        "tiny": ("INT64", "NULLABLE"),
        "price": ("NUMERIC", "NULLABLE"),
        "day": ("DATE", "NULLABLE"),
        "at": ("TIMESTAMP", "NULLABLE"),
        "local": ("DATETIME", "NULLABLE"),
        "raw": ("BYTES", "NULLABLE"),
        "text": ("STRING", "NULLABLE"),
        "nums": ("INT64", "REPEATED"),
        "rec": ("RECORD", "NULLABLE"),
        "tags": ("RECORD", "REPEATED"),
        "missing": ("STRING", "NULLABLE"),
    }
    row = rows(bigquery_sink)[2]
    assert row["price"] == decimal.Decimal("2.50")
    assert row["day"] == dt.date(2024, 2, 29)
    assert row["at"] == dt.datetime(2024, 5, 1, 12, 30, 0, 123456, tzinfo=dt.UTC)
    assert row["local"] == dt.datetime(2024, 5, 1, 12, 30)
    assert row["raw"] == b"\x00\xff"
    assert row["text"] == 'é "q"'
    assert row["nums"] == [2, 3]
    assert row["rec"] == {"a": 2, "b": "x"}
    assert row["tags"] == [{"key": "k", "value": 2}]
    assert row["missing"] is None


@pytest.mark.parametrize(
    ("select", "match"),
    [
        ("DATE'0001-01-01' - 1 AS day", r"column 'day', row 0: outside BigQuery's range"),
        ("array(1, NULL) AS nums", r"column 'nums', row 0: an array holding a null element"),
    ],
)
def test_values_bigquery_cannot_hold_are_a_record_error_and_nothing_lands(
    spark: Any, bigquery_sink: dict[str, Any], select: str, match: str
) -> None:
    df = spark.sql(f"SELECT id, {select} FROM range(1)")
    with pytest.raises(Exception, match=match):
        write(df, bigquery_sink)
    assert rows(bigquery_sink) == []
    assert staging(bigquery_sink) == []


def test_a_decimal_past_numeric_scale_into_a_numeric_column_is_a_record_error(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    write(spark.sql("SELECT 1 AS id, CAST(1.5 AS DECIMAL(10, 2)) AS price"), bigquery_sink)
    df = spark.sql("SELECT 2 AS id, CAST('0.1234567891' AS DECIMAL(20, 10)) AS price")
    with pytest.raises(Exception, match=r"column 'price', row 0: the value does not fit"):
        write(df, bigquery_sink)
    assert [r["id"] for r in rows(bigquery_sink)] == [1]


def test_new_fields_become_nullable_columns(spark: Any, bigquery_sink: dict[str, Any]) -> None:
    write(spark.sql("SELECT 1 AS id, 'a' AS name"), bigquery_sink)
    write(spark.sql("SELECT 2 AS id, 7 AS score"), bigquery_sink)
    assert schema(bigquery_sink) == {
        "id": ("INT64", "NULLABLE"),
        "name": ("STRING", "NULLABLE"),
        "score": ("INT64", "NULLABLE"),
    }
    assert rows(bigquery_sink) == [
        {"id": 1, "name": "a", "score": None},
        {"id": 2, "name": None, "score": 7},
    ]


def test_a_missing_dataset_without_schema_auto_update_fails_before_any_task(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    with pytest.raises(Exception, match=r"does not exist .*schema_auto_update is false"):
        write(spark.sql("SELECT 1 AS id"), bigquery_sink, schema_auto_update="false")
    datasets = [d.dataset_id for d in bigquery_sink["client"].list_datasets()]
    assert bigquery_sink["dataset"] not in datasets


def test_a_table_whose_column_conflicts_is_a_clear_error_before_data_moves(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    write(spark.sql("SELECT 1 AS id"), bigquery_sink)
    with pytest.raises(Exception, match=r"column 'id' conflicts .*rows hold STRING.* is INT64"):
        write(spark.sql("SELECT 'x' AS id"), bigquery_sink)
    with pytest.raises(Exception, match=r"column 'id' conflicts"):
        write(spark.sql("SELECT array(1) AS id"), bigquery_sink)
    assert rows(bigquery_sink) == [{"id": 1}]


def test_a_service_account_json_that_does_not_parse_is_never_echoed(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    secret = '{"type": "service_account", "private_key": "SECRET-KEY-123"'
    with pytest.raises(Exception, match="service_account_json") as info:
        write(spark.sql("SELECT 1 AS id"), bigquery_sink, service_account_json=secret)
    assert "not valid JSON" in str(info.value)
    assert "SECRET-KEY-123" not in str(info.value)
    bad_key = json.dumps({"type": "service_account", "private_key": "SECRET-KEY-123"})
    with pytest.raises(Exception, match="service_account_json") as info:
        write(spark.sql("SELECT 1 AS id"), bigquery_sink, service_account_json=bad_key)
    assert "not a usable service account key" in str(info.value)
    assert "SECRET-KEY-123" not in str(info.value)


def test_a_row_too_large_for_one_append_request_is_a_record_error(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    df = spark.sql("SELECT id, repeat('x', IF(id = 3, 5000, 10)) AS text FROM range(6)")
    with pytest.raises(Exception, match=r"row \d+ of this batch is \d+ bytes .* more than one"):
        write(df.coalesce(1), bigquery_sink, max_request_bytes="2048")
    assert rows(bigquery_sink) == []
    write(df.where("id != 3").coalesce(1), bigquery_sink, max_request_bytes="2048")
    assert [r["id"] for r in rows(bigquery_sink)] == [0, 1, 2, 4, 5]  # several requests


def test_overwrite_replaces_the_rows_in_one_transaction(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    write(spark.sql("SELECT id FROM range(5)"), bigquery_sink)
    write(spark.sql("SELECT id + 100 AS id FROM range(2)"), bigquery_sink, mode="overwrite")
    assert [r["id"] for r in rows(bigquery_sink)] == [100, 101]


def test_kafka_json_values_become_columns_with_metadata(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    df = spark.sql(
        """
        SELECT CAST(concat('k', id) AS BINARY) AS key,
               CAST(concat('{"id": ', id, ', "name": "n', id, '"}') AS BINARY) AS value,
               'topic' AS topic, 0 AS partition, id AS offset,
               timestamp_seconds(1714521600 + id) AS timestamp,
               0 AS timestampType
        FROM range(3)
        """
    )
    write(df, bigquery_sink)
    got = rows(bigquery_sink)
    assert got[1] == {
        "timestamp": dt.datetime(2024, 5, 1, 0, 0, 1, tzinfo=dt.UTC),
        "__key": b"k1",
        "id": 1,
        "name": "n1",
    }


@pytest.mark.parametrize("phase", ["write", "commit-before", "commit-after"])
def test_streaming_lands_each_row_exactly_once_across_failures_and_repartitioning(
    spark: Any, bigquery_sink: dict[str, Any], tmp_path: Path, phase: str
) -> None:
    quixsinks.register(spark, faulty(BigQuerySink))
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    options = {
        **bigquery_sink["options"],
        "value_columns": "id,name",
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
    }
    failure = ""
    try:
        run_available_now(
            spark,
            tmp_path / "in",
            "faulty_bigquery",
            tmp_path / "ck",
            options,
            prepare=lambda df: df.repartition(3),
        )
    except Exception as exc:  # the query fails; the restart replays from the checkpoint
        failure = str(exc)
    assert "injected failure" in failure
    run_available_now(
        spark,
        tmp_path / "in",
        "faulty_bigquery",
        tmp_path / "ck",
        options,
        prepare=lambda df: df.repartition(2),
    )
    got = rows(bigquery_sink)
    assert [r["id"] for r in got] == ids
    assert got[0]["name"] == 'name "0", ok'
    assert [e["batch_id"] for e in ledger(bigquery_sink)] == [0, 1, 2]
    assert staging(bigquery_sink) == []


def test_direct_mode_commits_pending_streams_on_the_table(
    spark: Any, bigquery_sink: dict[str, Any], tmp_path: Path
) -> None:
    ids = write_input_files(tmp_path / "in", files=2, rows_per_file=5)
    options = {**bigquery_sink["options"], "value_columns": "id", "write_mode": "direct"}
    run_available_now(spark, tmp_path / "in", "bigquery", tmp_path / "ck", options)
    assert [r["id"] for r in rows(bigquery_sink)] == ids
    tables = [t.table_id for t in bigquery_sink["client"].list_tables(bigquery_sink["dataset"])]
    assert tables == ["events"]  # no staging, no ledger


def test_an_unreachable_server_is_a_clear_error_before_any_task(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    from tests.services.common import free_port

    down = {**bigquery_sink, "options": dict(bigquery_sink["options"])}
    down["options"]["api_endpoint"] = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(Exception, match=r"cannot reach BigQuery .*api_endpoint"):
        write(spark.sql("SELECT 1 AS id"), down, retry_timeout="1")


def test_throttled_query_jobs_are_retried_and_every_row_lands_once(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    from tests.services.bigquery_faults import BigQueryThrottle

    server = bigquery_sink["server"]
    with BigQueryThrottle(server.api_endpoint) as front:
        throttled = {**bigquery_sink, "options": dict(bigquery_sink["options"])}
        throttled["options"]["api_endpoint"] = front.url
        write(spark.sql("SELECT 1 AS id"), throttled)  # dataset and table exist now
        front.throttle(2, "/jobs")  # the next two query-job inserts answer 429
        write(spark.sql("SELECT id + 2 AS id FROM range(5)"), throttled)
        assert front.throttled == 2
    assert [r["id"] for r in rows(bigquery_sink)] == [1, 2, 3, 4, 5, 6]
    assert staging(bigquery_sink) == []


def test_json_columns_are_written_as_bigquery_json(
    spark: Any, bigquery_sink: dict[str, Any]
) -> None:
    df = spark.sql(
        "SELECT 1 AS id, named_struct('a', 1, 'b', array('x', 'y')) AS payload, "
        "map('k', 2.5) AS attrs"
    )
    with pytest.raises(Exception, match="json_columns"):
        write(df, bigquery_sink, json_columns="payload,nope")
    write(df, bigquery_sink, json_columns="payload,attrs")
    assert schema(bigquery_sink)["payload"] == ("JSON", "NULLABLE")
    row = rows(bigquery_sink)[0]
    assert row["payload"] == {"a": 1, "b": ["x", "y"]}
    assert row["attrs"] == {"k": 2.5}


def _staged_batch(
    bigquery_sink: dict[str, Any], batch_id: int, ids: list[int]
) -> tuple[BigQuerySink, Any]:
    """A planned sink and the receipt of one task of micro-batch ``batch_id`` that staged
    ``ids`` (no Spark: the commit runs in this process)."""
    import pyarrow as pa

    from quixsinks.core.batch import SinkBatch, WriteContext
    from quixsinks.core.sink import Receipt
    from quixsinks.sinks.bigquery import BigQueryOptions

    sink = BigQuerySink(BigQueryOptions.from_options(bigquery_sink["options"]))
    table = pa.table({"id": pa.array(ids, pa.int64())})
    sink.prepare(table.schema)
    sink.preflight()
    context = WriteContext("direct-commit", batch_id, 0, f"a{batch_id}", True, "query-1")
    staged = sink.write(SinkBatch(table, sink.records, context))
    receipt = Receipt(
        "direct-commit", batch_id, 0, f"a{batch_id}", query_id="query-1", staged=[staged]
    )
    return sink, receipt


def test_staged_rows_gone_before_the_commit_fail_it_and_record_nothing(
    bigquery_sink: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's sweep deletes the batch's staging rows (older than
    staging_max_age_hours) after the commit made its streams visible and before its
    transaction: the transaction counts them and fails, instead of recording the batch
    without its rows."""
    from quixsinks.core.errors import DestinationError
    from quixsinks.core.sink import CommitContext
    from quixsinks.sinks.bigquery import modes

    sink, receipt = _staged_batch(bigquery_sink, 3, [1, 2, 3])
    staging_table = bigquery_sink["table"] + "_qs_staging"
    real = modes.commit_streams

    def then_swept(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        bigquery_sink["client"].query(f"DELETE FROM `{staging_table}` WHERE TRUE").result()

    monkeypatch.setattr(modes, "commit_streams", then_swept)
    with pytest.raises(DestinationError, match="fewer than the 3 rows"):
        sink.commit(CommitContext("direct-commit", 3, True, "query-1", "bigquery"), [receipt])
    assert rows(bigquery_sink) == []
    assert [r for r in ledger(bigquery_sink) if r["sink_id"] == "direct-commit"] == []


def test_a_commit_job_that_outlives_its_wait_is_stopped_not_submitted_again(
    bigquery_sink: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait for the commit transaction times out while the job may still run: it is
    cancelled and polled until it has stopped (here it had committed), and no second
    transaction is submitted beside it (two appending transactions would both land)."""
    from google.cloud.bigquery import Client
    from google.cloud.bigquery.job import QueryJob

    from quixsinks.core.sink import CommitContext

    sink, receipt = _staged_batch(bigquery_sink, 4, [7, 8])
    submitted: list[str] = []
    cancelled: list[str] = []
    real_query, real_result, real_cancel = Client.query, QueryJob.result, QueryJob.cancel

    def query(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        if sql.startswith("BEGIN TRANSACTION"):
            submitted.append(sql)
        return real_query(self, sql, *args, **kwargs)

    def result(self: Any, *args: Any, **kwargs: Any) -> Any:
        outcome = real_result(self, *args, **kwargs)
        if self.query.startswith("BEGIN TRANSACTION") and not cancelled:
            raise TimeoutError("the wait ended first")
        return outcome

    def cancel(self: Any, *args: Any, **kwargs: Any) -> Any:
        cancelled.append(self.job_id)
        return real_cancel(self, *args, **kwargs)

    monkeypatch.setattr(Client, "query", query)
    monkeypatch.setattr(QueryJob, "result", result)
    monkeypatch.setattr(QueryJob, "cancel", cancel)
    sink.commit(CommitContext("direct-commit", 4, True, "query-1", "bigquery"), [receipt])
    assert len(submitted) == 1
    assert len(cancelled) == 1
    assert [r["id"] for r in rows(bigquery_sink)] == [7, 8]
