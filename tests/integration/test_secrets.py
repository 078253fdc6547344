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
import re
import socket
import subprocess
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from quixsinks.core.options import SinkOptions
from quixsinks.core.secrets import is_secret_name
from quixsinks.sinks.file import FileSink
from quixsinks.spark.registry import BUILTIN_SINKS, load_data_source
from tests.integration.streams import stream_from, write_input_files

MARK = "qsMRK"


def documented_redaction_regex() -> str:
    """The value docs/security.md gives for spark.redaction.regex (read from the page, so
    the test checks what users are told)."""
    page = (Path(__file__).parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    found = re.findall(r'--conf "spark\.redaction\.regex=([^"]+)"', page)
    assert len(found) == 1, "docs/security.md gives one spark.redaction.regex setting"
    return found[0]


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Markers:
    """Unique marker values, and what each one was given to."""

    def __init__(self) -> None:
        self.given: dict[str, str] = {}

    def __call__(self, what: str) -> str:
        value = f"{MARK}{len(self.given):03d}{uuid.uuid4().hex[:6]}"
        self.given[value] = what
        return value

    def found_in(self, text: str) -> list[str]:
        found = [f"{m} ({what})" for m, what in self.given.items() if m in text]
        return found or ([MARK] if MARK in text else [])


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
        "influxdb1": {
            "host": "127.0.0.1",
            "port": str(port),
            "username": "u",
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
        "mqtt": {
            "client_id": "c",
            "server": "127.0.0.1",
            "port": str(port),
            "topic_root": "t",
            "username": "u",
            "tls_enabled": "false",
            "mqtt_flush_timeout_seconds": "2",
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


def start_failing_stream(spark: Any, name: str, options: dict[str, str], tmp: Path) -> Any:
    """A streaming query of three rows into the sink, started (it runs on its own)."""
    source = tmp / f"in-{uuid.uuid4().hex[:6]}"
    write_input_files(source, files=1, rows_per_file=3)
    writer = stream_from(spark, source).writeStream.format(name).options(**options)
    checkpoint = str(tmp / f"cp-{uuid.uuid4().hex[:6]}")
    return writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()


def failed_stream_texts(spark: Any, query: Any) -> str:
    """What a failed streaming query shows: its exception, progress, status; its plan is
    printed (capfd has it)."""
    with pytest.raises(Exception) as raised:  # noqa: PT011 - any failure; its text is checked
        query.awaitTermination(timeout=180)
    assert not query.isActive, "the query neither failed nor ended in 180 s"
    texts = [error_texts(raised.value, spark)]
    if query.exception() is not None:
        texts.append(error_texts(query.exception(), spark))
    texts += [
        json.dumps(query.lastProgress, default=str),
        json.dumps(query.recentProgress, default=str),
        json.dumps(query.status, default=str),
    ]
    query.explain(True)
    return "\n".join(texts)


def spark_sql_executions(spark: Any) -> str:
    """What Spark's SQL status store holds of every query so far: the descriptions, plans
    and error messages the UI's SQL tab and the event log's SQLExecution events show."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    texts = []
    for i in range(executions.size()):
        execution = executions.apply(i)
        texts += [
            str(execution.description()),
            str(execution.details()),
            str(execution.physicalPlanDescription()),
            str(execution.errorMessage()),
            str(execution.modifiedConfigs()),
        ]
    return "\n".join(texts)


def start_checks(runs: dict[str, dict[str, str]], tmp: Path) -> Callable[[], str]:
    """Start ``python -m quixsinks check`` of each sink (one interpreter runs them all,
    through the same ``main`` as the command line); the returned function waits for it,
    checks that each failed and gives everything it printed."""
    script = (
        "import json, sys\n"
        "from quixsinks.cli import main\n"
        "for name, options in json.load(open(sys.argv[1])).items():\n"
        "    args = ['check', '--format', name, '--column', 'id:int64', '--column', 'key:string']\n"
        "    for key, value in options.items():\n"
        "        args += ['-o', f'{key}={value}']\n"
        "    print('exit', name, main(args), flush=True)\n"
    )
    arguments = tmp / f"check-{uuid.uuid4().hex[:6]}.json"
    arguments.write_text(json.dumps(runs), encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(arguments)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def result() -> str:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        for name in runs:
            assert f"exit {name} 1" in out, out[-3000:]
        return out + err

    return result


def check_outputs(runs: dict[str, dict[str, str]], tmp: Path) -> str:
    return start_checks(runs, tmp)()


# ----------------------------------------------------------------------------- the test


def assert_no_marker(mark: Markers, where: str, text: str) -> None:
    found = mark.found_in(text)
    if found:
        at = text.find(found[0].split()[0])
        shown = text[max(0, at - 300) : at + 80]
        pytest.fail(f"{where}: secret marker {found[0]} shown: ...{shown}")


def test_no_secret_in_anything_a_failing_write_of_any_sink_prints(
    spark: Any, capfd: Any, tmp_path: Path, listener_events: list[str]
) -> None:
    mark = Markers()
    port = closed_port()
    jvm = jvm_output()
    runs = {name: sink_options(name, mark, port, tmp_path / name) for name in sorted(BUILTIN_SINKS)}
    for name, options in runs.items():
        assert any(is_secret_name(k) for k in options) or name == "csvfile", name
    # everything runs side by side: the checks, the streaming queries, the batch writes
    checks = start_checks(runs, tmp_path)
    queries = {name: start_failing_stream(spark, name, o, tmp_path) for name, o in runs.items()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        writes = {
            name: pool.submit(failing_batch_write, spark, name, o) for name, o in runs.items()
        }
        texts = {f"{name}: batch write": future.result() for name, future in writes.items()}
    for name, query in queries.items():
        texts[f"{name}: streaming query"] = failed_stream_texts(spark, query)
    texts["check"] = checks()
    texts["listener events"] = "\n".join(listener_events)
    texts["SQL executions (UI, event log)"] = spark_sql_executions(spark)
    printed = capfd.readouterr()
    texts["driver stdout"] = printed.out
    texts["driver stderr"] = printed.err
    texts["JVM and Python workers"] = jvm()

    for where, text in texts.items():
        assert_no_marker(mark, where, text)
    for name in runs:  # each failure said something (and was not a marker-free crash)
        assert texts[f"{name}: batch write"].strip()
    assert "WriteToMicroBatchDataSource" in texts["driver stdout"]  # the plans were printed


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
        query = start_failing_stream(spark, "redis", options, tmp_path)
        texts[what] = failing_batch_write(spark, "redis", options)
        texts[f"{what} stream"] = failed_stream_texts(spark, query)
    texts["check"] = check_outputs({"redis": wrong}, tmp_path) + check_outputs(
        {"redis": url}, tmp_path
    )
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
    query = start_failing_stream(spark, "postgresql", options, tmp_path)
    texts = {
        "batch": failing_batch_write(spark, "postgresql", options),
        "stream": failed_stream_texts(spark, query),
        "check": check_outputs({"postgresql": options}, tmp_path),
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


def test_spark_shows_no_write_option_of_a_python_data_source(
    spark: Any, capfd: Any, tmp_path: Path, listener_events: list[str]
) -> None:
    """Spark keeps a Python data source's write options to itself: its plans say
    ``AppendData file`` and ``WriteToMicroBatchDataSource file``, a stream's sink is
    ``PythonTable@<hash>``. Checked on a write that succeeds (quixsinks says nothing)."""
    mark = Markers()
    options = {
        "path": str(tmp_path / "out"),
        "azure_connection_string": f"AccountName=a;AccountKey={mark('connection string')}",
        "endpoint_url": f"http://u:{mark('endpoint password')}@127.0.0.1:1",
        "sink_id": "spark-shows",
    }
    (tmp_path / "out").mkdir()
    rows(spark).write.format("file").mode("append").options(**options).save()
    source = tmp_path / "in"
    write_input_files(source, files=1, rows_per_file=2)
    query = (
        stream_from(spark, source)
        .writeStream.format("file")
        .options(**options)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout=180)
    assert query.exception() is None
    query.explain(True)
    texts = {
        "progress": json.dumps(query.recentProgress, default=str),
        "listener events": "\n".join(listener_events),
        "SQL executions (UI, event log)": spark_sql_executions(spark),
        "printed": capfd.readouterr().out,
    }
    assert "PythonTable" in texts["progress"]  # the sink's description
    assert "AppendData file" in texts["SQL executions (UI, event log)"]
    for where, text in texts.items():
        assert_no_marker(mark, where, text)


def spark_redact(spark: Any, regex: str | None, pairs: dict[str, str]) -> dict[str, str]:
    """Spark's own redaction of configuration pairs (what the UI's Environment tab and
    the event log's EnvironmentUpdate show) under ``spark.redaction.regex``."""
    jvm = spark.sparkContext._jvm
    conf = jvm.org.apache.spark.SparkConf(False)
    if regex is not None:
        conf.set("spark.redaction.regex", regex)
    items = jvm.java.util.ArrayList()
    for key, value in pairs.items():
        items.add(jvm.scala.Tuple2(key, value))
    seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(items).toSeq()
    redacted = jvm.org.apache.spark.util.Utils.redact(conf, seq)
    out = {}
    for i in range(redacted.size()):
        pair = redacted.apply(i)
        out[str(pair._1())] = str(pair._2())
    return out


def test_the_documented_spark_redaction_regex_hides_credentials_passed_as_environment(
    spark: Any,
) -> None:
    """Credentials given to executors as environment variables (``spark.executorEnv.*``,
    read by options with an environment default) show in Spark's UI and event log unless
    their names match ``spark.redaction.regex``: Spark's default misses an Azure account
    key and connection string; the value docs/security.md gives hides every one."""
    env = {
        f"spark.{where}.{name}": f"{MARK}-{name}"
        for where in ("executorEnv", "kubernetes.driverEnv")
        for name in (
            "PGPASSWORD",
            "REDIS_PASSWORD",
            "INFLUXDB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AZURE_STORAGE_KEY",
            "AZURE_STORAGE_CONNECTION_STRING",
        )
    }
    plain = {"spark.executorEnv.AWS_REGION": "eu-west-1", "spark.app.name": "x"}
    default = spark_redact(spark, None, {**env, **plain})
    shown_by_default = [k for k, v in default.items() if v.startswith(MARK)]
    assert "spark.executorEnv.AZURE_STORAGE_KEY" in shown_by_default  # why the docs say so
    documented = spark_redact(spark, documented_redaction_regex(), {**env, **plain})
    assert [k for k, v in documented.items() if v.startswith(MARK)] == []
    assert documented["spark.executorEnv.AWS_REGION"] == "eu-west-1"
    assert documented["spark.app.name"] == "x"
