"""No secret shows anywhere: every sink, every secret-like option, every failure path.

For each built-in sink (found through the registry, so a new sink joins on its own), every
option the secret rule (:mod:`quixsinks.core.secrets`) calls secret gets a unique marker,
and every option that is a URL gets a marker as its password. The sink points at a closed
port on 127.0.0.1 (PostgreSQL and Redis also at a real server with wrong credentials).
Then a batch write and a streaming query must fail, and the marker must appear in none of:

* what the process printed (``capfd``: the driver; the JVM and the Python workers write to
  the JVM's stderr, which this test reads through ``/proc``),
* the exception chains, str and repr, with the JVM side (Spark's ``exceptionString``),
* ``df.explain(True)`` and ``query.explain(True)``, ``lastProgress``/``recentProgress``,
  ``query.exception()``, the events a StreamingQueryListener receives,
* ``python -m quixsinks check`` output,
* pickled receipts of a micro-batch whose commit failed.

Spark itself shows write options in its plans (the JVM's ``WriteToDataSourceV2`` and
friends hold the options map): the last tests show what it shows by default and that the
setting docs/security.md gives (``spark.sql.redaction.options.regex``) hides them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import socket
import subprocess
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quixsinks.core.options import SinkOptions
from quixsinks.core.secrets import is_secret_name
from quixsinks.sinks.file import FileSink
from quixsinks.spark.registry import BUILTIN_SINKS, load_data_source
from tests.integration.streams import stream_from, write_input_files

MARK = "qsMRK"

#: the value docs/security.md gives for spark.sql.redaction.options.regex
DOCUMENTED_OPTIONS_REGEX = (
    "(?i)url|uri|dsn|secret|password|token|credential|authorization|key|"
    "connection.?string|sas|sig|service.?account|connect.?options"
)


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Markers:
    """Unique marker values, and every one handed out."""

    def __init__(self) -> None:
        self.given: list[str] = []

    def __call__(self, what: str) -> str:
        value = f"{MARK}{len(self.given):02d}{uuid.uuid4().hex[:6]}"
        self.given.append(value)
        return value

    def found_in(self, text: str) -> list[str]:
        return [m for m in self.given if m in text] + ([MARK] if MARK in text else [])


def base_options(name: str, port: int, mark: Markers, tmp: Path) -> dict[str, str]:
    """What a sink needs besides its secrets to try to reach 127.0.0.1:``port``; URL
    options carry a marker as their password. A sink missing here fails the test."""
    url = f"http://user:{mark('url')}@127.0.0.1:{port}"
    one_attempt = {"retry_max_attempts": "1"}
    table = {
        "bigquery": {
            "project_id": "p",
            "dataset_id": "d",
            "table_name": "t",
            "api_endpoint": url,
            "grpc_endpoint": f"127.0.0.1:{port}",
            "ddl_timeout": "2",
            "insert_timeout": "2",
            "retry_timeout": "1",
        },
        "csvfile": {"path": str(tmp / "missing-dir" / "out.csv")},
        "file": {
            "path": "s3://bucket/out",
            "endpoint_url": url,
            "region_name": "us-east-1",
            "storage_timeout_seconds": "2",
        },
        "influxdb3": {
            "host": url,
            "database": "d",
            "measurement": "m",
            "request_timeout_ms": "2000",
        },
        "iceberg": {
            "table_name": "db.t",
            "catalog_type": "rest",
            "catalog_uri": url,
            "catalog_timeout_seconds": "2",
            "catalog.header.Authorization": f"Bearer {mark('header')}",
            "catalog.adls.connection-string": f"AccountName=a;AccountKey={mark('adls')}",
            "catalog.s3.endpoint": f"http://s3:{mark('s3endpoint')}@127.0.0.1:{port}",
            "warehouse": str(tmp / "warehouse"),
        },
        "kinesis": {
            "stream_name": "s",
            "endpoint_url": url,
            "region_name": "us-east-1",
            "request_timeout_seconds": "2",
        },
        "postgresql": {
            "host": "127.0.0.1",
            "port": str(port),
            "dbname": "d",
            "table_name": "t",
            "connection_timeout_seconds": "2",
        },
        "pubsub": {
            "project_id": "p",
            "topic_id": "t",
            "emulator_host": f"127.0.0.1:{port}",
            "publish_timeout": "2",
        },
        "redis": {"host": "127.0.0.1", "port": str(port), "socket_timeout": "2"},
        "tsdatalake": {
            "path": str(tmp / "lake"),
            "table_name": "t",
            "catalog_url": url,
            "catalog_timeout_seconds": "2",
        },
    }
    assert name in table, f"sink {name!r} has no entry here: add one (its required options)"
    return {**table[name], **one_attempt}


def secret_options(options_class: type[SinkOptions], mark: Markers, port: int) -> dict[str, str]:
    """Every option the rule calls secret, with a marker (a URL or DSN where it is one)."""
    out: dict[str, str] = {}
    for spec in options_class.specs():
        if not spec.is_secret:
            continue
        marker = mark(spec.name)
        if spec.name in ("catalog_uri", "url"):
            scheme = "redis" if spec.name == "url" else "http"
            out[spec.name] = f"{scheme}://user:{marker}@127.0.0.1:{port}/"
        elif spec.name == "connect_options":
            out[spec.name] = f"sslpassword={marker}"
        else:
            out[spec.name] = marker
    return out


def sink_options(name: str, mark: Markers, port: int, tmp: Path) -> dict[str, str]:
    options_class = load_data_source(name).sink_class.options_class
    options = {**base_options(name, port, mark, tmp), **secret_options(options_class, mark, port)}
    if name == "redis":
        options.pop("url", None)  # url and host are exclusive; url is tested on its own below
    if name == "postgresql":
        options.pop("connect_options", None)  # sslpassword with sslmode=prefer is tried too
        options["connect_options"] = f"application_name=x sslpassword={mark('sslpassword')}"
    return options


# ----------------------------------------------------------------------------- capture


def jvm_output() -> Callable[[], str]:
    """A reader of what the JVM (and the Python workers it started) print from now on: its
    stdout and stderr, read through /proc when they are files (pytest's capture)."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    assert sc is not None
    pid = sc._gateway.proc.pid  # type: ignore[union-attr]
    readers = []
    for fd in (1, 2):
        path = f"/proc/{pid}/fd/{fd}"
        if not os.path.isfile(path):  # a terminal or a pipe: reading it would steal output
            pytest.fail(
                f"the JVM's fd {fd} is not a file ({os.path.realpath(path)}): run this test "
                "with pytest's default fd capture (not -s), which gives the JVM a file"
            )
        handle = open(path, "rb")  # noqa: SIM115 - read at the end of the test
        handle.seek(0, io.SEEK_END)
        readers.append(handle)

    def read() -> str:
        text = ""
        for handle in readers:
            text += handle.read().decode("utf-8", "replace")
            handle.close()
        return text

    return read


def error_texts(exc: BaseException, spark: Any) -> str:
    """Everything an exception shows: each link of its chain (str, repr, traceback) and,
    for a Spark exception, the JVM's exception with its causes and stack."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        parts += [str(link), repr(link), repr(vars(link)) if hasattr(link, "__dict__") else ""]
        origin = getattr(link, "_origin", None)
        if origin is not None:
            jvm = spark.sparkContext._jvm
            parts.append(str(jvm.org.apache.spark.util.Utils.exceptionString(origin)))
        for name in ("getMessage", "getSqlState", "getErrorClass"):
            with contextlib.suppress(Exception):
                parts.append(str(getattr(link, name)()))
        link = link.__cause__ or link.__context__
    return "\n".join(parts)


@pytest.fixture
def listener_events(spark: Any) -> Iterator[list[str]]:
    """The JSON of every streaming listener event while the test runs."""
    from pyspark.sql.streaming import StreamingQueryListener

    events: list[str] = []

    class Recorder(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            events.append(repr(vars(event)) + str(event.name))

        def onQueryProgress(self, event: Any) -> None:
            events.append(event.progress.json)

        def onQueryIdle(self, event: Any) -> None:
            events.append(repr(vars(event)))

        def onQueryTerminated(self, event: Any) -> None:
            events.append(f"{event.exception} {event.errorClassOnException}")

    recorder = Recorder()
    spark.streams.addListener(recorder)
    yield events
    spark.streams.removeListener(recorder)


def rows(spark: Any) -> Any:
    return spark.createDataFrame(
        [(i, f"k{i}", i * 1.5) for i in range(3)], "id BIGINT, key STRING, amount DOUBLE"
    )


def failing_batch_write(spark: Any, name: str, options: dict[str, str]) -> str:
    with pytest.raises(Exception) as raised:  # noqa: PT011 - any failure; its text is checked
        rows(spark).write.format(name).mode("append").options(**options).save()
    return error_texts(raised.value, spark)


def failing_stream(spark: Any, name: str, options: dict[str, str], tmp: Path) -> str:
    """A streaming query that fails: its exception, progress, status and plan."""
    source = tmp / f"in-{uuid.uuid4().hex[:6]}"
    write_input_files(source, files=1, rows_per_file=3)
    writer = stream_from(spark, source).writeStream.format(name).options(**options)
    query = writer.option("checkpointLocation", str(tmp / f"cp-{uuid.uuid4().hex[:6]}")).trigger(
        availableNow=True
    )
    started = query.start()
    texts = []
    with pytest.raises(Exception) as raised:  # noqa: PT011
        started.awaitTermination(timeout=120)
    assert not started.isActive, "the query neither failed nor ended in 120 s"
    texts.append(error_texts(raised.value, spark))
    if started.exception() is not None:
        texts.append(error_texts(started.exception(), spark))
    texts += [
        json.dumps(started.lastProgress),
        json.dumps(started.recentProgress),
        json.dumps(started.status),
    ]
    started.explain(True)  # printed: capfd has it
    return "\n".join(texts)


def check_output(name: str, options: dict[str, str]) -> str:
    args = [sys.executable, "-m", "quixsinks", "check", "--format", name]
    for key, value in options.items():
        args += ["-o", f"{key}={value}"]
    args += ["--column", "id:int64", "--column", "key:string", "--column", "amount:double"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0, result.stdout
    return result.stdout + result.stderr


# ----------------------------------------------------------------------------- the test


def assert_no_marker(mark: Markers, where: str, text: str) -> None:
    found = mark.found_in(text)
    if found:
        at = text.find(found[0])
        pytest.fail(
            f"{where}: secret marker {found[0]} shown: ...{text[max(0, at - 300) : at + 80]}"
        )


@pytest.mark.parametrize("name", sorted(BUILTIN_SINKS))
def test_no_secret_in_anything_a_failing_write_prints(
    name: str, spark: Any, capfd: Any, tmp_path: Path, listener_events: list[str]
) -> None:
    mark = Markers()
    port = closed_port()
    options = sink_options(name, mark, port, tmp_path)
    secret_names = [k for k in options if is_secret_name(k)]
    assert secret_names or name == "csvfile", f"{name}: no secret-like option was set"
    jvm = jvm_output()

    texts = {"batch write": failing_batch_write(spark, name, options)}
    texts["streaming query"] = failing_stream(spark, name, options, tmp_path)
    rows(spark).explain(True)
    texts["check"] = check_output(name, options)
    texts["listener events"] = "\n".join(listener_events)
    printed = capfd.readouterr()
    texts["driver stdout"] = printed.out
    texts["driver stderr"] = printed.err
    texts["JVM and workers"] = jvm()

    for where, text in texts.items():
        assert_no_marker(mark, f"{name}: {where}", text)
    assert texts["batch write"].strip()  # something was said about the failure


def test_redis_url_password_and_wrong_credentials_never_show(
    spark: Any, capfd: Any, redis_server: Any, tmp_path: Path
) -> None:
    mark = Markers()
    jvm = jvm_output()
    wrong = {
        "host": redis_server.options["host"],
        "port": str(redis_server.options["port"]),
        "password": mark("password"),
        "retry_max_attempts": "1",
    }
    url = {
        "url": f"redis://default:{mark('url')}@127.0.0.1:{redis_server.options['port']}/0",
        "retry_max_attempts": "1",
    }
    texts = {}
    for what, options in (("wrong password", wrong), ("url", url)):
        texts[what] = failing_batch_write(spark, "redis", options)
        texts[f"{what} stream"] = failing_stream(spark, "redis", options, tmp_path)
        texts[f"{what} check"] = check_output("redis", options)
    printed = capfd.readouterr()
    texts["printed"] = printed.out + printed.err + jvm()
    assert "credentials were refused" in texts["wrong password"]
    for where, text in texts.items():
        assert_no_marker(mark, f"redis {where}", text)


def test_postgresql_wrong_password_never_shows(
    spark: Any, capfd: Any, pg: dict[str, Any], tmp_path: Path
) -> None:
    mark = Markers()
    jvm = jvm_output()
    options = {
        **pg["options"],
        "password": mark("password"),
        "connect_options": f"sslpassword={mark('sslpassword')}",
        "table_name": "t",
        "retry_max_attempts": "1",
    }
    texts = {
        "batch": failing_batch_write(spark, "postgresql", options),
        "stream": failing_stream(spark, "postgresql", options, tmp_path),
        "check": check_output("postgresql", options),
    }
    printed = capfd.readouterr()
    texts["printed"] = printed.out + printed.err + jvm()
    assert "authentication failed" in texts["batch"]
    for where, text in texts.items():
        assert_no_marker(mark, f"postgresql {where}", text)


# ----------------------------------------------------------------------------- a failed commit


class ReceiptProbeSink(FileSink):
    """The file sink whose commit keeps the pickled receipts it got, then fails."""

    name = "qs_secret_receipts"

    def commit(self, context: Any, receipts: Any) -> None:
        with open(os.path.join(self.options.path, "receipts.pickle"), "wb") as out:
            pickle.dump(receipts, out)
        raise RuntimeError(f"commit failed on purpose at {self.options.path}")


def test_receipts_of_a_failed_commit_hold_no_secret(spark: Any, capfd: Any, tmp_path: Path) -> None:
    import quixsinks

    quixsinks.register(spark, ReceiptProbeSink, check_workers=False)
    mark = Markers()
    options = {
        "path": str(tmp_path / "out"),
        **secret_options(ReceiptProbeSink.options_class, mark, closed_port()),
    }
    (tmp_path / "out").mkdir()
    jvm = jvm_output()
    text = failing_batch_write(spark, "qs_secret_receipts", options)
    assert "commit failed on purpose" in text
    data = (tmp_path / "out" / "receipts.pickle").read_bytes()
    receipts = pickle.loads(data)
    assert receipts, "the commit got no receipts"
    printed = capfd.readouterr()
    assert_no_marker(mark, "pickled receipts", data.decode("latin-1"))
    assert_no_marker(mark, "receipts", repr(receipts) + repr([vars(r) for r in receipts]))
    assert_no_marker(mark, "printed", printed.out + printed.err + jvm() + text)


# ----------------------------------------------------------------------------- Spark's own


def test_spark_redacts_write_options_with_the_documented_setting(
    spark: Any, capfd: Any, tmp_path: Path
) -> None:
    """What Spark itself prints of a Python data source's options, without and with the
    setting of docs/security.md. The sink succeeds here (a local file sink), so what is
    shown is only Spark's."""
    mark = Markers()
    marker = mark("connection-string")
    options = {
        "path": str(tmp_path / "out"),
        "azure_connection_string": f"AccountName=a;AccountKey={marker}",
        "retry_max_attempts": "1",
    }
    (tmp_path / "out").mkdir()

    def run_query(sub: str) -> str:
        source = tmp_path / f"in-{sub}"
        write_input_files(source, files=1, rows_per_file=2)
        query = (
            stream_from(spark, source)
            .writeStream.format("file")
            .options(**options)
            .option("checkpointLocation", str(tmp_path / f"cp-{sub}"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(timeout=120)
        assert query.exception() is None
        query.explain(True)
        return json.dumps(query.recentProgress) + capfd.readouterr().out

    previous = spark.conf.get("spark.sql.redaction.options.regex")
    try:
        shown_by_default = run_query("default")
        spark.conf.set("spark.sql.redaction.options.regex", DOCUMENTED_OPTIONS_REGEX)
        shown_redacted = run_query("redacted")
    finally:
        spark.conf.set("spark.sql.redaction.options.regex", previous)
    assert marker in shown_by_default, "Spark no longer shows write options: update the docs"
    assert_no_marker(mark, "with the documented setting", shown_redacted)
