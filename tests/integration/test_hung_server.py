"""A hung server: every sink's write fails in bounded time, saying it timed out and where.

DESIGN's fault model: "a server that accepts connections and never answers (every call has a
timeout)". Each test points one sink at a :class:`~tests.services.blackhole.BlackHole` (a
listener on 127.0.0.1 that accepts and never answers) with its timeout option at 2 s and one
attempt (``retry_max_attempts=1``), runs a real small Spark write, and checks that

* the write raises,
* its error says it timed out and names the destination (a secret option given to the sink
  never shows),
* it ended, under a liveness guard of :data:`GUARD_SECONDS`: a write still running then fails
  the test instead of hanging the suite. The guard is not a speed check; the durations are
  printed (``-s``) and are a few seconds each.

Most sinks check their destination while planning, so the black hole stops them there;
where an option skips that check (Pub/Sub's ``check_topic``) or another endpoint can be
pointed at the black hole alone (BigQuery's gRPC Storage Write endpoint while its REST one
answers), the executors' calls are tested too. The driver's commit of the ``iceberg`` sink
is tested against the REST catalog stand-in hanging its commits while it answers everything
else, in a streaming query.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.streams import INPUT_SCHEMA, stream_from, write_input_files
from tests.services.blackhole import BlackHole

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

#: the liveness guard: a write against a hung server that runs longer than this is a hang
GUARD_SECONDS = 120.0
#: the timeout option every test gives its sink
TIMEOUT = "2"
SECRET = "hung-Server-s3cret"
#: Azurite's well-known development key (public; not a secret of anyone's)
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
ONE_ATTEMPT = {"retry_max_attempts": "1"}


@pytest.fixture
def hole() -> Iterator[BlackHole]:
    with BlackHole() as black_hole:
        yield black_hole


def rows(spark: Any) -> Any:
    """Three rows. Made with createDataFrame, which makes the session the active one of the
    calling thread's JVM thread: a write in a new Python thread (the guard's) needs that to
    find the Python data sources."""
    return spark.createDataFrame(
        [(i, str(i), i * 1.5, dt.datetime(2024, 5, 1)) for i in range(3)],
        "id BIGINT, key STRING, amount DOUBLE, timestamp TIMESTAMP",
    )


def guarded(what: str, run: Callable[[], None], on_hang: Callable[[], None]) -> tuple[str, float]:
    """Run ``run`` (a Spark write that must fail) in a thread under the liveness guard: the
    error's text and the seconds it took. A write still running after :data:`GUARD_SECONDS`
    fails the test; ``on_hang`` (from the main thread, whose py4j connection is free) cancels
    it as far as Spark can. A signal cannot do this: the main thread's py4j call would wait
    for the JVM's answer before any clean-up call went through."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        started = time.monotonic()
        try:
            run()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=target, name=f"hung-{what}", daemon=True)
    thread.start()
    thread.join(GUARD_SECONDS)
    if thread.is_alive():
        on_hang()
        pytest.fail(f"{what}: the write was still waiting after {GUARD_SECONDS:g} s: a hang")
    seconds = float(outcome["seconds"])
    print(f"{what}: failed after {seconds:.1f} s")
    assert "error" in outcome, f"{what}: the write against a hung server succeeded"
    return str(outcome["error"]), seconds


def failed_write(spark: Any, fmt: str, options: dict[str, str]) -> str:
    """A small batch write that must fail; its error's text."""

    def run() -> None:
        rows(spark).write.format(fmt).mode("append").options(**options).save()

    text, _ = guarded(fmt, run, spark.sparkContext.cancelAllJobs)
    return text


def assert_timed_out(text: str, *where: str) -> None:
    assert re.search(r"timed out", text), text[-3000:]
    for name in where:
        assert name in text, f"{name!r} is not named in: {text[-3000:]}"
    assert SECRET not in text


# ---------------------------------------------------------------------- Iceberg catalogs


def test_iceberg_rest_catalog_that_never_answers_fails_planning(
    spark: Any, hole: BlackHole, tmp_path: Path
) -> None:
    table = f"db.hung_{uuid.uuid4().hex[:8]}"
    options = {
        "table_name": table,
        "catalog_type": "rest",
        "catalog_uri": hole.url,
        "catalog.token": SECRET,
        "warehouse": str(tmp_path / "warehouse"),
        "catalog_timeout_seconds": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "iceberg", options)
    assert_timed_out(text, f"iceberg table {table} (rest catalog)", "catalog_timeout_seconds")


def test_iceberg_table_creation_in_a_hanging_rest_catalog_fails_planning(
    spark: Any, iceberg_rest: Any
) -> None:
    """A new table is created by a staged create and a commit: the catalog answers the
    first and hangs the second."""
    table = f"db.hung_{uuid.uuid4().hex[:8]}"
    options = {
        "table_name": table,
        "catalog_type": "rest",
        "catalog_uri": iceberg_rest.url,
        "catalog_timeout_seconds": TIMEOUT,
        **ONE_ATTEMPT,
    }
    iceberg_rest.hang_next_commits(1)
    try:
        text = failed_write(spark, "iceberg", options)
    finally:
        iceberg_rest.release_hung()
    assert_timed_out(text, f"creating the table failed for iceberg table {table}")


def test_iceberg_streaming_commit_to_a_hanging_rest_catalog_fails_the_query(
    spark: Any, iceberg_rest: Any, tmp_path: Path
) -> None:
    """The table exists (a batch write made it); then every commit hangs, while the
    catalog still answers config and loads: the stream's planning and its data files go
    through, and the driver's commit times out on each of its attempts. The query fails
    with a CommitError naming the table, and the table is as the batch write left it."""
    table = f"db.hung_{uuid.uuid4().hex[:8]}"
    options = {
        "table_name": table,
        "catalog_type": "rest",
        "catalog_uri": iceberg_rest.url,
        "catalog_timeout_seconds": TIMEOUT,
        "commit_max_attempts": "2",
        **ONE_ATTEMPT,
    }
    write_input_files(tmp_path / "in", files=1, rows_per_file=5)
    batch = spark.read.schema(INPUT_SCHEMA).json(str(tmp_path / "in"))
    batch.withColumnRenamed("ts", "timestamp").write.format("iceberg").mode("append").options(
        **options
    ).save()
    query: Any = None

    def run() -> None:
        nonlocal query
        rows(spark)  # the session becomes this thread's active one (see rows())
        writer = stream_from(spark, tmp_path / "in").writeStream.format("iceberg")
        writer = writer.options(**options, checkpointLocation=str(tmp_path / "checkpoint"))
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()

    def stop() -> None:
        if query is not None:  # stop() waits for the hung commit: not on the main thread
            threading.Thread(target=query.stop, daemon=True).start()

    hung_before = iceberg_rest.hung
    iceberg_rest.hang_next_commits()
    try:
        text, _ = guarded("iceberg commit", run, stop)
    finally:
        iceberg_rest.release_hung()
    assert iceberg_rest.hung - hung_before == 2  # both attempts reached the commit and hung
    assert_timed_out(text, f"not committed to {table} after 2 attempts", "catalog_timeout_seconds")
    assert len(iceberg_rest.catalog.load_table(table).snapshots()) == 1  # the batch write's


def test_tsdatalake_catalog_that_never_answers_fails_planning(
    spark: Any, hole: BlackHole, tmp_path: Path
) -> None:
    options = {
        "path": str(tmp_path / "lake"),
        "table_name": "hung",
        "catalog_url": hole.url,
        "catalog_auth_token": SECRET,
        "catalog_timeout_seconds": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "tsdatalake", options)
    assert_timed_out(text, f"catalog at {hole.url}", "catalog_timeout_seconds")


# ---------------------------------------------------------------------- object stores


def test_file_on_s3_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    options = {
        "path": "s3://hung-bucket/out",
        "endpoint_url": hole.url,
        "region_name": "us-east-1",
        "aws_access_key_id": "AKIAHUNG",
        "aws_secret_access_key": SECRET,
        "storage_timeout_seconds": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "file", options)
    assert_timed_out(text, "s3://hung-bucket/out", "storage_timeout_seconds")


def test_file_on_azure_blob_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    connection_string = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={hole.url}/devstoreaccount1;"
    )
    options = {
        "path": "abfs://hung-container@devstoreaccount1.dfs.core.windows.net/out",
        "azure_connection_string": connection_string,
        "storage_timeout_seconds": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "file", options)
    assert_timed_out(text, "devstoreaccount1/hung-container/out", "storage_timeout_seconds")
    assert AZURITE_KEY not in text


def test_file_on_gcs_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    options = {
        "path": "gs://hung-bucket/out",
        "gcs_endpoint": hole.url,
        "storage_timeout_seconds": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "file", options)
    assert_timed_out(text, "gs://hung-bucket/out", "storage_timeout_seconds")


# ---------------------------------------------------------------------- databases and streams


def test_postgresql_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    """libpq's connect_timeout (``connection_timeout_seconds``, 2 s at least) covers the
    connection: TCP, then the startup message that the black hole never answers. A server
    that hangs later, mid-statement, is not covered: psycopg2 has no read timeout (see
    docs/sinks/postgresql.md)."""
    options = {
        "host": "127.0.0.1",
        "port": str(hole.port),
        "dbname": "hung",
        "password": SECRET,
        "table_name": "events",
        "connection_timeout_seconds": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "postgresql", options)
    assert_timed_out(text, f"127.0.0.1:{hole.port}/hung", "connection_timeout_seconds")


def test_redis_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    options = {
        "host": "127.0.0.1",
        "port": str(hole.port),
        "password": SECRET,
        "socket_timeout": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "redis", options)
    assert_timed_out(text, f"redis 127.0.0.1:{hole.port} db 0", "socket_timeout")


def test_influxdb3_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    options = {
        "host": hole.url,
        "token": SECRET,
        "database": "hung",
        "measurement": "m",
        "request_timeout_ms": "2000",
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "influxdb3", options)
    assert_timed_out(text, hole.url, "request_timeout_ms")


def test_influxdb1_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    options = {
        "host": "127.0.0.1",
        "port": str(hole.port),
        "username": "u",
        "password": SECRET,
        "database": "hung",
        "measurement": "m",
        "request_timeout_ms": "2000",
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "influxdb1", options)
    assert_timed_out(text, f"http://127.0.0.1:{hole.port}", "request_timeout_ms")


def test_kinesis_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    options = {
        "stream_name": "hung-stream",
        "endpoint_url": hole.url,
        "region_name": "us-east-1",
        "aws_access_key_id": "AKIAHUNG",
        "aws_secret_access_key": SECRET,
        "request_timeout_seconds": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "kinesis", options)
    assert_timed_out(text, "kinesis stream 'hung-stream'", "request_timeout_seconds")


def test_mqtt_broker_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    """The CONNACK never comes: the wait ends after mqtt_flush_timeout_seconds."""
    options = {
        "client_id": "hung",
        "server": "127.0.0.1",
        "port": str(hole.port),
        "topic_root": "hung",
        "username": "u",
        "password": SECRET,
        "tls_enabled": "false",
        "mqtt_flush_timeout_seconds": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "mqtt", options)
    assert_timed_out(
        text, f"mqtt broker mqtt://127.0.0.1:{hole.port}", "mqtt_flush_timeout_seconds"
    )


def test_pubsub_that_never_answers_fails_the_topic_check(spark: Any, hole: BlackHole) -> None:
    """The emulator endpoint is plain gRPC: the channel connects and waits for the server's
    HTTP/2 settings until ``publish_timeout``, the call's deadline. (Pub/Sub proper is TLS
    with Google credentials; the deadline bounds the handshake the same way.)"""
    options = {
        "project_id": "hung-project",
        "topic_id": "hung-topic",
        "emulator_host": hole.address,
        "publish_timeout": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "pubsub", options)
    assert_timed_out(text, "projects/hung-project/topics/hung-topic", "publish_timeout")


def test_pubsub_publishes_to_a_server_that_never_answers_fail(spark: Any, hole: BlackHole) -> None:
    """``check_topic=false``: the executors publish; every publish request passes its gRPC
    deadline (``publish_timeout``, gRPC's DEADLINE_EXCEEDED), or has no result within
    ``flush_timeout``, and the write fails with every message undelivered."""
    options = {
        "project_id": "hung-project",
        "topic_id": "hung-topic",
        "emulator_host": hole.address,
        "check_topic": "false",
        "publish_timeout": TIMEOUT,
        "flush_timeout": TIMEOUT,
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "pubsub", options)
    assert re.search(r"DEADLINE_EXCEEDED|DeadlineExceeded|no result in flush_timeout", text)
    assert "not delivered" in text
    assert "projects/hung-project/topics/hung-topic" in text


def test_bigquery_rest_api_that_never_answers_fails(spark: Any, hole: BlackHole) -> None:
    options = {
        "project_id": "hung-project",
        "dataset_id": "hung",
        "table_name": "events",
        "api_endpoint": hole.url,
        "grpc_endpoint": hole.address,
        "ddl_timeout": TIMEOUT,
        "insert_timeout": TIMEOUT,
        "retry_timeout": "1",
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "bigquery", options)
    assert_timed_out(text, "bigquery table hung-project.hung.events", "ddl_timeout")


def test_bigquery_storage_write_api_that_never_answers_fails(
    spark: Any, hole: BlackHole, bigquery_sink: dict[str, Any]
) -> None:
    """The REST API (the emulator) answers planning; the gRPC Storage Write endpoint is the
    black hole: the executors' CreateWriteStream passes its deadline (``ddl_timeout``)."""
    options = {
        **bigquery_sink["options"],
        "grpc_endpoint": hole.address,
        "ddl_timeout": TIMEOUT,
        "insert_timeout": TIMEOUT,
        "retry_timeout": "1",
        **ONE_ATTEMPT,
    }
    text = failed_write(spark, "bigquery", options)
    assert_timed_out(text, f"bigquery table {bigquery_sink['table']}", "ddl_timeout")
    assert hole.accepted >= 1
