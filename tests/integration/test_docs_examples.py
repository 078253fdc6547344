"""Every Python example in README.md and docs/ runs, as printed, against the test servers.

Each fenced ``python`` block is executed in a namespace holding ``spark``, ``df``
(a DataFrame that is a stream for ``df.writeStream`` and a table for ``df.write``, with
the columns the examples name) and ``kafka`` (the same rows as Kafka records with JSON
values, a table); an example may define its own ``df`` (the README's does).
The examples name production addresses (``db.internal``, ``s3://my-bucket``,
``/data/...``, ``/tmp/...``); every DataFrame's writers point them at this session's
servers and a temporary folder when the write starts, and ``spark.read`` reads absolute
paths from that folder: the code is not edited, only where it writes and reads. Every
write must succeed; every started query must process its input and stop cleanly. A
broken example fails here.

A block that cannot run here (a Databricks magic, a Kafka broker, a cloud account, a
pipeline definition that only ``spark-pipelines`` runs) is preceded by
``<!-- not run: <why> -->``: it is compiled, not run, and the reason must say why.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import sys
import threading
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(
    r"(?:^<!-- not run: (?P<why>.*?) -->\n)?^```python\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


def blocks(run: bool) -> list[Any]:
    """The pages' Python blocks to run (``run``) or the ones marked not run, with ids."""
    found = []
    for page in PAGES:
        for index, match in enumerate(BLOCK.finditer(page.read_text())):
            if (match["why"] is None) == run:
                name = f"{page.relative_to(ROOT)}#{index + 1}"
                found.append(pytest.param(match["code"], match["why"], id=name))
    return found


def examples() -> list[Any]:
    return [pytest.param(*p.values[:1], id=p.id) for p in blocks(run=True)]


@pytest.mark.parametrize(("code", "why"), blocks(run=False))
def test_an_example_not_run_here_says_why_and_compiles(code: str, why: str) -> None:
    assert len(why.split()) >= 3, f"say why the example cannot run here: {why!r}"
    # notebook magics (%pip) are not Python; the rest must be
    python = "\n".join("" if line.startswith("%") else line for line in code.splitlines())
    compile(python, "<example>", "exec")


ROWS = [
    {
        "sensor": f"s{i % 3}",
        "site": "berlin" if i % 2 else "paris",
        "temperature": 20.0 + i,
        "humidity": 0.5 + i / 100,
        "customer_id": i,
        "key": f"k{i}",
        "timestamp": f"2024-05-01T00:00:{i:02d}Z",
    }
    for i in range(10)
]
SCHEMA = (
    "sensor STRING, site STRING, temperature DOUBLE, humidity DOUBLE, customer_id BIGINT, "
    "key STRING, timestamp TIMESTAMP"
)


class Webhook(http.server.BaseHTTPRequestHandler):
    """The custom-sink example's endpoint: records every POSTed body."""

    bodies: list[Any] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def webhook() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/in"
    server.shutdown()
    server.server_close()


class Servers:
    """Where each production address of the examples goes in this test session."""

    def __init__(self, request: pytest.FixtureRequest, tmp: Path, webhook: str) -> None:
        self.request = request
        self.tmp = tmp
        self.webhook = webhook
        self.writes: list[str] = []

    def server(self, fixture: str) -> Any:
        return self.request.getfixturevalue(fixture)

    def local(self, path: str) -> str:
        """``/data/x`` and ``s3a://bucket/x`` checkpoints -> the test's temporary folder.

        Its parent is created: in production ``/data`` exists.
        """
        if path.startswith(str(self.tmp)):
            return path
        local = self.tmp / re.sub(r"^[a-z0-9]+://", "", path).lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        return str(local)

    def rewrite(self, fmt: str, options: dict[str, str]) -> dict[str, str]:
        out = dict(options)
        for key in ("checkpointLocation", "dead_letter_path"):
            if key in out:
                out[key] = self.local(out[key])
        path = out.get("path", "")
        if fmt in ("file", "csvfile", "tsdatalake", "alerting_lake"):
            out.update(self.store(path, out))
            if "catalog_url" in out:  # any REST catalog -> the session's stand-in
                out["catalog_url"] = self.server("iceberg_rest").url
        elif fmt == "postgresql":
            pg = self.server("postgres")
            dbname = f"docs_{uuid.uuid4().hex[:8]}"
            pg.create_database(dbname)
            out.update(host=pg.host, port=str(pg.port), user=pg.user, password=pg.password)
            out["dbname"] = dbname
        elif fmt == "influxdb3":
            influx = self.server("influx_server")
            out.update(host=influx.url, token=influx.token)
            influx.create_database(out["database"])
        elif fmt == "influxdb1":
            influx = self.server("influx1_server")
            user, password = influx.writer
            influx.create_database(out["database"])
            influx.grant_write(user, out["database"])
            out.update(host=influx.host, port=str(influx.port), username=user, password=password)
        elif fmt == "mqtt":
            out.update(self.server("mosquitto").options(auth=True))
        elif fmt == "redis":
            redis_server = self.server("redis_server")
            out.pop("url", None)
            out.update(
                host=redis_server.host,
                port=str(redis_server.port),
                password=redis_server.password,
            )
        elif fmt == "kinesis":
            kinesalite = self.server("kinesalite")
            stream = out["stream_name"]
            if stream not in kinesalite.client().list_streams()["StreamNames"]:
                kinesalite.create_stream(stream, shards=2)
            out.update({k: str(v) for k, v in kinesalite.options().items()})
        elif fmt == "pubsub":
            emulator = self.server("pubsub_emulator")
            out.pop("service_account_json", None)
            emulator.create_topic(out["topic_id"], project=out["project_id"], exist_ok=True)
            out["emulator_host"] = emulator.emulator_host
        elif fmt in ("iceberg", "pyiceberg"):  # every catalog -> the embedded SQLite one
            for key in list(out):
                if key.startswith(("catalog", "aws_", "data_catalog")):
                    out.pop(key)
            out["warehouse"] = self.local(out.get("warehouse", "/warehouse"))
        elif fmt == "bigquery":
            emulator = self.server("bqemulator")
            out.update(emulator.options)
            out["dataset_id"] = f"docs_{uuid.uuid4().hex[:8]}_{out['dataset_id']}"
        elif fmt == "webhook":
            out.update(url=self.webhook, token="t")
        self.writes.append(fmt)
        return out

    def store(self, path: str, options: dict[str, str]) -> dict[str, str]:
        if path.startswith("s3://"):
            moto = self.server("s3_server")
            bucket = path.split("/")[2]
            if bucket not in {b["Name"] for b in moto.client().list_buckets()["Buckets"]}:
                moto.create_bucket(bucket)
            return {k: str(v) for k, v in moto.options().items()}
        if path.startswith("abfss://"):
            azurite = self.server("azurite")
            match = re.match(r"abfss://([^@]+)@[^/]+/?(.*)", path)
            assert match, path
            container, rest = match.groups()
            azurite.create_container(container)
            options.pop("azure_account_key", None)  # the example's account is not Azurite's
            return {
                "path": f"az://{container}/{rest}",
                "azure_connection_string": azurite.connection_string(),
            }
        if path.startswith("gs://"):
            gcs = self.server("gcs_server")
            bucket = path.split("/")[2]
            gcs.create_bucket(bucket)
            opts = gcs.options()
            return {
                "gcs_endpoint": opts["endpoint"],
                "service_account_json": opts["service_account_json"],
            }
        return {"path": self.local(path)}


class Writer:
    """A DataFrameWriter / DataStreamWriter that records the options, rewritten at the end."""

    def __init__(self, inner: Any, servers: Servers) -> None:
        self._inner = inner
        self._servers = servers
        self._format = ""
        self._options: dict[str, str] = {}

    def format(self, name: str) -> Writer:
        self._format = name
        return self

    def option(self, key: str, value: Any) -> Writer:
        self._options[key] = str(value)
        return self

    def options(self, **options: Any) -> Writer:
        for key, value in options.items():
            self.option(key, value)
        return self

    def mode(self, mode: str) -> Writer:
        self._inner = self._inner.mode(mode)
        return self

    def outputMode(self, mode: str) -> Writer:
        self._inner = self._inner.outputMode(mode)
        return self

    def trigger(self, **kwargs: Any) -> Writer:
        self._inner = self._inner.trigger(**kwargs)
        return self

    def _real(self, path: str | None) -> Any:
        options = {**self._options, **({"path": path} if path else {})}
        options = self._servers.rewrite(self._format, options)
        return self._inner.format(self._format).options(**options)

    def save(self, path: str | None = None) -> None:
        self._real(path).save()

    def start(self, path: str | None = None) -> Any:
        return self._real(path).start()


class Frames:
    """``df`` of the examples: a stream for ``writeStream``, a table for ``write``."""

    def __init__(self, spark: Any, tmp: Path, servers: Servers) -> None:
        folder = tmp / "input"
        folder.mkdir()
        (folder / "rows.json").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
        self._batch = spark.read.schema(SCHEMA).json(str(folder))
        self._stream = spark.readStream.schema(SCHEMA).json(str(folder))
        self._servers = servers

    @property
    def write(self) -> Writer:
        return self._batch.write  # type: ignore[no-any-return]  # a Writer (patched)

    @property
    def writeStream(self) -> Writer:
        return self._stream.writeStream  # type: ignore[no-any-return]  # a Writer (patched)


def kafka_frame(spark: Any) -> Any:
    """``kafka`` of the examples (docs/migrating-from-quix.md): ROWS as Kafka records, with
    the columns of Spark's Kafka source (what ``spark.read.format("kafka")`` gives)."""
    from datetime import datetime

    rows = [
        (
            row["key"].encode(),
            json.dumps({k: v for k, v in row.items() if k not in ("key", "timestamp")}).encode(),
            "readings",
            0,
            offset,
            datetime.fromisoformat(row["timestamp"]),
            0,
        )
        for offset, row in enumerate(ROWS)
    ]
    return spark.createDataFrame(
        rows,
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
        "timestamp TIMESTAMP, timestampType INT",
    )


def redirect_io(spark: Any, servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every DataFrame's ``write``/``writeStream`` -> a Writer; ``spark.read`` of an absolute
    path -> the same place in the test's folder."""
    frame_class, reader_class = type(spark.range(1)), type(spark.read)
    write, write_stream = frame_class.write, frame_class.writeStream
    monkeypatch.setattr(frame_class, "write", property(lambda d: Writer(write.fget(d), servers)))
    monkeypatch.setattr(
        frame_class, "writeStream", property(lambda d: Writer(write_stream.fget(d), servers))
    )
    for name in ("parquet", "json", "csv"):
        read = getattr(reader_class, name)

        def local_read(reader: Any, *paths: str, _read: Any = read, **kwargs: Any) -> Any:
            paths = tuple(servers.local(p) if p.startswith("/") else p for p in paths)
            return _read(reader, *paths, **kwargs)

        monkeypatch.setattr(reader_class, name, local_read)


@pytest.mark.parametrize("code", examples())
def test_the_example_runs(
    code: str,
    spark: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    webhook: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark import cloudpickle

    servers = Servers(request, tmp_path, webhook)
    frames = Frames(spark, tmp_path, servers)
    redirect_io(spark, servers, monkeypatch)
    # a real module, so that dataclasses work and Spark ships the example's classes
    module = types.ModuleType(f"docs_example_{uuid.uuid4().hex[:8]}")
    module.__dict__.update(
        spark=spark,
        df=frames,
        kafka=kafka_frame(spark),
        account_key="not-used-against-azurite",
        password="not-used-against-the-test-servers",
        os=os,
    )
    monkeypatch.setenv("MQTT_PASSWORD", "not-used-against-the-test-broker")
    sys.modules[module.__name__] = module
    cloudpickle.register_pickle_by_value(module)
    before = {q.id for q in spark.streams.active}
    Webhook.bodies.clear()
    try:
        exec(compile(code, f"<{request.node.callspec.id}>", "exec"), module.__dict__)
        for query in [q for q in spark.streams.active if q.id not in before]:
            query.processAllAvailable()
            progress = query.recentProgress
            query.stop()
            assert query.exception() is None, query.exception()
            assert sum(p["numInputRows"] for p in progress) == len(ROWS), progress
    finally:
        for query in [q for q in spark.streams.active if q.id not in before]:
            query.stop()
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[module.__name__]
    assert servers.writes, "the example wrote nothing"
    if "webhook" in servers.writes:
        assert sum(len(body) for body in Webhook.bodies) == len(ROWS)
