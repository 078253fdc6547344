"""The sinks of the fault matrix: how a cell reaches a fresh destination and reads it back.

A :class:`Target` is one row of the matrix: a sink in one mode, the guarantee its docs
claim, and what the faults need of it: where it connects (for a proxy or a black hole in
between), which request's acknowledgement a lost-ack cell drops, how its server crashes.
A fault that cannot be built for a target says why in :attr:`Target.not_built`.
"""

from __future__ import annotations

import csv
import json
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quixsinks.core.sink import Guarantee

from ..integration.streams import read_jsonl_ids
from ..services.ack_faults import PG_COMMIT
from ..services.bigquery_emulator import BQEmulator
from ..services.influxdb import InfluxServer
from ..services.kinesalite import KinesaliteServer
from ..services.mosquitto import MosquittoServer, Received, Recorder
from ..services.postgres import PostgresServer
from ..services.pubsub_emulator import PubSubEmulator
from ..services.redis_server import RedisServer

__all__ = [
    "BigQueryTarget",
    "Cell",
    "CsvTarget",
    "FileTarget",
    "IcebergTarget",
    "InfluxTarget",
    "InfluxV1Target",
    "KinesisTarget",
    "MQTTTarget",
    "ObjectStoreTarget",
    "PostgresTarget",
    "PubSubTarget",
    "RedisTarget",
    "Target",
    "TsDataLakeTarget",
]


@dataclass
class Cell:
    """One run of the matrix: its work folder (input, checkpoint, local output) and a
    name unique to it (for tables, prefixes)."""

    workdir: Path
    name: str = field(default_factory=lambda: f"c{uuid.uuid4().hex[:10]}")
    #: whether ``out`` is a filesystem mounted for the cell (the disk-full fault)
    mounted: bool = False

    @property
    def out(self) -> Path:
        """Where a local sink writes."""
        return self.workdir / "out"


class Target(ABC):
    """One sink in one mode; see the module docstring."""

    #: the row's label in the matrix
    name: str
    #: the Spark format
    fmt: str
    #: what the sink's docs page claims
    guarantee: Guarantee
    #: the docs page that claims it
    docs: str
    #: faults this target cannot take here, and why (the matrix prints the reason)
    not_built: dict[str, str] = {}
    #: (trigger, after): the request whose acknowledgement a lost-ack cell drops
    ack: tuple[bytes, bytes] | None = None
    #: options that make a hung server fail fast (short timeouts, few retries)
    impatient: dict[str, str] = {}
    #: the sink writes files under ``Cell.out`` (a full disk can be injected)
    local_output = False

    @abstractmethod
    def options(self, cell: Cell) -> dict[str, str]:
        """The sink's options for a fresh destination of ``cell``."""

    @abstractmethod
    def read_ids(self, cell: Cell) -> list[int]:
        """Every row id at the destination of ``cell`` (duplicates kept)."""

    def read_deduplicated(self, cell: Cell) -> list[int] | None:
        """At-least-once sinks with a dedupe id: the ids left once a consumer drops the
        records whose dedupe id it saw already (None: the sink has no dedupe id)."""
        return None

    def endpoint(self) -> tuple[str, int]:
        """The (host, port) the sink connects to."""
        raise NotImplementedError(f"{self.name} has no server")

    def via(self, options: dict[str, str], host: str, port: int) -> dict[str, str]:
        """``options`` pointed at ``host:port`` instead of the server."""
        return {**options, "host": host, "port": str(port)}

    def hung(self, options: dict[str, str], host: str, port: int) -> dict[str, str]:
        """``options`` with every endpoint the sink calls pointed at a hung server at
        ``host:port`` (the one of :meth:`via`, unless the sink has more)."""
        return self.via(options, host, port)

    def crash(self) -> None:
        """Crash the destination's server and start it again at once."""
        raise NotImplementedError(f"{self.name} has no server to crash")


_NO_SERVER = "no server: the sink writes the local filesystem"
_THEIR_DISK = "not injected: the server's storage is its own"
_IN_MEMORY = "the emulator keeps its data in memory: a crash loses everything, committed or not"


class _OnServer(Target):
    """A target whose sink talks to one server (a test service with host and port)."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def endpoint(self) -> tuple[str, int]:
        return str(self.server.host), int(self.server.port)

    def crash(self) -> None:
        self.server.crash()


class FileTarget(Target):
    name = "file (local, JSON)"
    fmt = "file"
    guarantee = "exactly-once"
    docs = "sinks/file.md"
    local_output = True
    not_built = {
        "server-crash": _NO_SERVER,
        "lost-ack": _NO_SERVER,
        "hung-server": _NO_SERVER,
    }

    def options(self, cell: Cell) -> dict[str, str]:
        return {"path": str(cell.out), "format": "json"}

    def read_ids(self, cell: Cell) -> list[int]:
        return read_jsonl_ids(cell.out) if cell.out.exists() else []


class CsvTarget(Target):
    name = "csvfile"
    fmt = "csvfile"
    guarantee = "exactly-once"
    docs = "sinks/csvfile.md"
    local_output = True
    not_built = FileTarget.not_built

    def options(self, cell: Cell) -> dict[str, str]:
        cell.out.mkdir(parents=True, exist_ok=True)  # the sink appends to a file in it
        return {"path": str(cell.out / "events.csv")}

    def read_ids(self, cell: Cell) -> list[int]:
        path = cell.out / "events.csv"
        if not path.exists():
            return []
        with open(path, newline="", encoding="utf-8") as f:
            return [json.loads(row["value"])["id"] for row in csv.DictReader(f)]


class PostgresTarget(_OnServer):
    """The `postgresql` sink in one ``write_mode``, a database of its own per cell."""

    fmt = "postgresql"
    docs = "sinks/postgresql.md"
    not_built = {
        "disk-full": "not injected: the server's disk is its own (PostgreSQL fails the "
        "transaction with SQLSTATE 53100, a retryable error)"
    }
    impatient = {
        "connection_timeout_seconds": "2",
        "statement_timeout_seconds": "2",
        "retry_max_attempts": "2",
        "retry_backoff_seconds": "0.1",
    }

    server: PostgresServer

    def __init__(self, server: PostgresServer, write_mode: str) -> None:
        super().__init__(server)
        self.write_mode = write_mode
        self.name = f"postgresql ({write_mode})"
        self.guarantee = "at-least-once" if write_mode == "direct" else "exactly-once"
        # the staging (or direct) COMMIT after a COPY; prepared mode's tasks PREPARE instead
        prepared = write_mode == "prepared"
        self.ack = (b"PREPARE TRANSACTION", b"COPY ") if prepared else (PG_COMMIT, b"COPY ")

    def options(self, cell: Cell) -> dict[str, str]:
        self.server.create_database(cell.name)
        return {
            "host": self.server.host,
            "port": str(self.server.port),
            "user": self.server.user,
            "password": self.server.password,
            "dbname": cell.name,
            "table_name": "events",
            "write_mode": self.write_mode,
        }

    def read_ids(self, cell: Cell) -> list[int]:
        conn = self.server.connect(cell.name)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT to_regclass('public.events') IS NOT NULL")
                if not cur.fetchone()[0]:
                    return []
                cur.execute("SELECT id FROM events")
                return [row[0] for row in cur.fetchall()]
        finally:
            conn.close()

    def leftovers(self, cell: Cell) -> list[str]:
        """Staging tables and prepared transactions left behind (there should be none)."""
        conn = self.server.connect(cell.name)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT tablename FROM pg_tables WHERE left(tablename, 4) = '_qs_'")
                left = [row[0] for row in cur.fetchall()]
                cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
                return left + [row[0] for row in cur.fetchall()]
        finally:
            conn.close()


class RedisTarget(_OnServer):
    """The `redis` sink: ``string`` keys (one per row, overwrites) or one ``list`` (staged,
    one Lua commit), a key prefix of its own per cell."""

    fmt = "redis"
    docs = "sinks/redis.md"
    not_built = {
        "disk-full": "not injected: the server's disk is its own (Redis refuses writes with "
        "MISCONF, an error the sink reports)"
    }
    impatient = {
        "socket_timeout": "2",
        "retry_max_attempts": "2",
        "retry_backoff_seconds": "0.1",
    }

    server: RedisServer

    def __init__(self, server: RedisServer, data_type: str) -> None:
        super().__init__(server)
        self.data_type = data_type
        self.name = f"redis ({data_type})"
        if data_type == "list":
            self.guarantee = "exactly-once"
            self.key_template = "events"
            self.ack = (b"EVALSHA", b"")  # the driver's Lua commit
        else:
            self.guarantee = "effectively exactly-once"
            self.key_template = "event:{id}"
            self.ack = (b"MSET", b"")

    def options(self, cell: Cell) -> dict[str, str]:
        return {
            **self.server.options,
            "key_prefix": f"{cell.name}:",
            "data_type": self.data_type,
            "key_template": self.key_template,
        }

    def read_ids(self, cell: Cell) -> list[int]:
        client: Any = self.server.client()
        prefix = f"{cell.name}:"
        if self.data_type == "list":
            return [json.loads(v)["id"] for v in client.lrange(prefix + "events", 0, -1)]
        keys = client.keys(prefix + "event:*")
        # overwrites: one key per id; each key's value must be its own row
        values = client.mget(keys) if keys else []
        return [json.loads(v)["id"] for v in values]

    def leftovers(self, cell: Cell) -> list[str]:
        """Staging keys left behind (there should be none once a commit ran)."""
        client: Any = self.server.client()
        return [k.decode() for k in client.keys(f"{cell.name}:_quixsinks:staging*")]


class InfluxTarget(_OnServer):
    """The `influxdb3` sink on the stand-in server (InfluxDB 1.x behind a front speaking the
    InfluxDB 3 write API): one series per id (tag ``id``), a database of its own per cell."""

    name = "influxdb3"
    fmt = "influxdb3"
    guarantee = "effectively exactly-once"
    docs = "sinks/influxdb3.md"
    ack = (b"POST /api/v", b"")
    not_built = {
        "server-crash": "the stand-in's crash would be InfluxDB 1.x's, not InfluxDB 3's",
        "disk-full": _THEIR_DISK,
    }
    impatient = {"request_timeout_ms": "2000", "retry_max_attempts": "2"}

    server: InfluxServer

    def options(self, cell: Cell) -> dict[str, str]:
        self.server.create_database(cell.name)
        return {
            "host": self.server.url,
            "token": self.server.token,
            "database": cell.name,
            "measurement": "events",
            "tags_keys": "id",
            "fields_keys": "key,name,amount",
        }

    def read_ids(self, cell: Cell) -> list[int]:
        rows = self.server.query(cell.name, 'SELECT "amount", "id" FROM "events"')
        return [int(row["id"]) for row in rows]

    def via(self, options: dict[str, str], host: str, port: int) -> dict[str, str]:
        return {**options, "host": f"http://{host}:{port}"}


class InfluxV1Target(_OnServer):
    """The `influxdb1` sink on Debian's InfluxDB 1.x, through the test front's ``/write``
    pass-through: one series per id (tag ``id``), a database of its own per cell."""

    name = "influxdb1"
    fmt = "influxdb1"
    guarantee = "effectively exactly-once"
    docs = "sinks/influxdb1.md"
    ack = (b"POST /write", b"")
    not_built = {"disk-full": _THEIR_DISK}
    impatient = {"request_timeout_ms": "2000", "retry_max_attempts": "2"}

    server: InfluxServer

    def options(self, cell: Cell) -> dict[str, str]:
        self.server.create_database(cell.name)
        return {
            "host": self.server.host,
            "port": str(self.server.port),
            "database": cell.name,
            "measurement": "events",
            "tags_keys": "id",
            "fields_keys": "key,name,amount",
        }

    def read_ids(self, cell: Cell) -> list[int]:
        rows = self.server.query(cell.name, 'SELECT "amount", "id" FROM "events"')
        return [int(row["id"]) for row in rows]


class KinesisTarget(_OnServer):
    """The `kinesis` sink on kinesalite, a two-shard stream of its own per cell."""

    name = "kinesis"
    fmt = "kinesis"
    guarantee = "at-least-once"
    docs = "sinks/kinesis.md"
    ack = (b"Kinesis_20131202.PutRecords", b"")
    not_built = {
        "server-crash": _IN_MEMORY,
        "disk-full": _THEIR_DISK,
    }
    impatient = {
        "request_timeout_seconds": "2",
        "retry_max_attempts": "2",
        "retry_deadline_seconds": "10",
    }

    server: KinesaliteServer

    def options(self, cell: Cell) -> dict[str, str]:
        self.server.create_stream(cell.name, shards=2)
        return {
            **{k: str(v) for k, v in self.server.options().items()},
            "stream_name": cell.name,
            "retry_backoff_seconds": "0.05",
        }

    def _values(self, cell: Cell) -> list[dict[str, Any]]:
        return [json.loads(r["Data"]) for r in self.server.read_all(cell.name)]

    def read_ids(self, cell: Cell) -> list[int]:
        return [value["id"] for value in self._values(cell)]

    def read_deduplicated(self, cell: Cell) -> list[int] | None:
        seen: set[str] = set()
        ids = []
        for value in self._values(cell):
            if value["_dedupe_id"] not in seen:
                seen.add(value["_dedupe_id"])
                ids.append(value["id"])
        return ids

    def via(self, options: dict[str, str], host: str, port: int) -> dict[str, str]:
        return {**options, "endpoint_url": f"http://{host}:{port}"}


class MQTTTarget(_OnServer):
    """The `mqtt` sink on Mosquitto (QoS 1, MQTT 5: every message carries ``qs_dedupe_id``),
    a topic root of its own per cell, read back by a :class:`Recorder` subscribed before
    the cell writes (a persistent session: it reconnects after a broker crash and gets
    what the broker had queued for it)."""

    name = "mqtt"
    fmt = "mqtt"
    guarantee = "at-least-once"
    docs = "sinks/mqtt.md"
    #: every PUBLISH of a cell names its topic, under this root; the sink's CONNECT does not
    ROOT = "qschaos"
    ack = (ROOT.encode() + b"/", b"")
    not_built = {"disk-full": _THEIR_DISK}
    impatient = {
        "mqtt_flush_timeout_seconds": "2",
        "retry_max_attempts": "2",
        "retry_deadline_seconds": "10",
    }

    server: MosquittoServer

    def __init__(self, server: MosquittoServer) -> None:
        super().__init__(server)
        self._recorders: dict[str, Recorder] = {}
        self._received: dict[str, list[Received]] = {}

    def _root(self, cell: Cell) -> str:
        return f"{self.ROOT}/{cell.name}"

    def options(self, cell: Cell) -> dict[str, str]:
        self._recorders[cell.name] = Recorder(self.server, self._root(cell)).start()
        return {
            **self.server.options(),
            "topic_root": self._root(cell),
            "client_id": "qs-chaos",
            "version": "5",
            "qos": "1",
            "retry_backoff_seconds": "0.05",
        }

    def _messages(self, cell: Cell) -> list[Received]:
        """What the recorder got (every message the broker had for it once the cell ended)."""
        if cell.name not in self._received:
            recorder = self._recorders.pop(cell.name)
            try:
                self._received[cell.name] = recorder.settle(timeout=120)
            finally:
                recorder.stop()
        return self._received[cell.name]

    def read_ids(self, cell: Cell) -> list[int]:
        return [json.loads(m.payload)["id"] for m in self._messages(cell)]

    def read_deduplicated(self, cell: Cell) -> list[int] | None:
        seen: set[str] = set()
        ids = []
        for m in self._messages(cell):
            if m.properties["qs_dedupe_id"] not in seen:
                seen.add(m.properties["qs_dedupe_id"])
                ids.append(json.loads(m.payload)["id"])
        return ids

    def via(self, options: dict[str, str], host: str, port: int) -> dict[str, str]:
        return {**options, "server": host, "port": str(port)}


class ObjectStoreTarget(_OnServer):
    """The `file` sink (JSON Lines) on an object store's test server (moto's S3, Azurite,
    the GCS emulator's front), a bucket or container of its own per cell, read back through
    quixsinks' own Destination."""

    fmt = "file"
    guarantee = "exactly-once"
    docs = "sinks/file.md"
    not_built = {
        "server-crash": _IN_MEMORY,
        "disk-full": _THEIR_DISK,
    }
    impatient = {
        "storage_timeout_seconds": "2",
        "retry_max_attempts": "2",
        "retry_backoff_seconds": "0.1",
    }
    #: the create-only upload of a batch's marker (whoever holds it publishes the batch)
    _MARKERS = {"s3": b"If-None-Match", "azure": b"If-None-Match", "gcs": b"ifGenerationMatch=0"}
    _NAMES = {
        "s3": "file (S3, JSON)",
        "azure": "file (Azure Blob, JSON)",
        "gcs": "file (GCS, JSON)",
    }

    def __init__(self, server: Any, kind: str) -> None:
        super().__init__(server)
        self.kind = kind
        self.name = self._NAMES[kind]
        self.ack = (self._MARKERS[kind], b"")

    def options(self, cell: Cell) -> dict[str, str]:
        name = f"qs-{cell.name}"
        if self.kind == "azure":
            self.server.create_container(name)
        else:
            self.server.create_bucket(name)
        return self._options(cell)

    def _options(self, cell: Cell) -> dict[str, str]:
        """The sink's options for the cell's bucket (created by :meth:`options`)."""
        name = f"qs-{cell.name}"
        if self.kind == "s3":
            credentials = {k: str(v) for k, v in self.server.options().items() if v}
            return {"path": f"s3://{name}/out", "format": "json", **credentials}
        if self.kind == "azure":
            connection = self.server.connection_string()
            return {
                "path": f"az://{name}/out",
                "format": "json",
                "azure_connection_string": connection,
            }
        opts = self.server.options()
        return {
            "path": f"gs://{name}/out",
            "format": "json",
            "gcs_endpoint": opts["endpoint"],
            "service_account_json": opts["service_account_json"],
        }

    def _destination(self, cell: Cell) -> Any:
        from quixsinks.core.destinations import destination_for
        from quixsinks.sinks.file import FileOptions

        options = self._options(cell)
        return destination_for(options["path"], FileOptions.from_options(options))

    def read_ids(self, cell: Cell) -> list[int]:
        destination = self._destination(cell)
        ids = []
        for key in destination.list(""):
            if key.endswith(".jsonl") and "/" not in key:
                lines = destination.read_bytes(key).splitlines()
                ids.extend(json.loads(line)["_value"]["id"] for line in lines)
        return ids

    def leftovers(self, cell: Cell) -> list[str]:
        """Staged objects left behind (there should be none)."""
        return list(self._destination(cell).list("_quixsinks/staging"))

    def endpoint(self) -> tuple[str, int]:
        url = self.server.url if self.kind != "azure" else self.server.account_url
        host, port = url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)
        return host, int(port)

    def via(self, options: dict[str, str], host: str, port: int) -> dict[str, str]:
        """The store's endpoint replaced (GCS's token endpoint, in the service account
        key, is left alone: the fault is the storage API's)."""
        old = "{}:{}".format(*self.endpoint())
        endpoints = ("endpoint_url", "azure_connection_string", "gcs_endpoint")
        return {
            k: v.replace(old, f"{host}:{port}") if k in endpoints else v for k, v in options.items()
        }


class IcebergTarget(Target):
    """The `iceberg` sink: its embedded SQLite catalog and a warehouse on local disk."""

    name = "iceberg (SQLite catalog, local)"
    fmt = "iceberg"
    guarantee = "exactly-once"
    docs = "sinks/iceberg.md"
    local_output = True
    not_built = {
        "server-crash": "no server: an embedded SQLite catalog (the REST catalog's crash and "
        "hang are tested by tests/integration/test_iceberg.py and test_hung_server.py)",
        "lost-ack": "no server: an embedded SQLite catalog (a lost REST commit answer, 504 "
        "after commit, is tested by tests/integration/test_iceberg.py)",
        "hung-server": FileTarget.not_built["hung-server"],
    }

    def options(self, cell: Cell) -> dict[str, str]:
        return {"warehouse": str(cell.out), "table_name": "db.events"}

    def read_ids(self, cell: Cell) -> list[int]:
        from quixsinks.sinks.iceberg import IcebergOptions
        from quixsinks.sinks.iceberg.client import load_catalog

        catalog = load_catalog(IcebergOptions.from_options(self.options(cell)))
        if not catalog.table_exists("db.events"):
            return []
        return list(catalog.load_table("db.events").scan().to_arrow().column("id").to_pylist())


class TsDataLakeTarget(Target):
    """The `tsdatalake` sink: a Hive-partitioned Parquet table on local disk."""

    name = "tsdatalake (local)"
    fmt = "tsdatalake"
    guarantee = "exactly-once"
    docs = "sinks/tsdatalake.md"
    local_output = True
    not_built = FileTarget.not_built

    def options(self, cell: Cell) -> dict[str, str]:
        return {
            "path": str(cell.out),
            "table_name": "events",
            "hive_columns": "year,month,day,key",
            "timestamp_column": "timestamp",
        }

    def read_ids(self, cell: Cell) -> list[int]:
        import pyarrow.dataset as ds

        table = cell.out / "events"
        if not table.exists():
            return []
        return list(ds.dataset(str(table), partitioning="hive").to_table().column("id").to_pylist())

    def leftovers(self, cell: Cell) -> list[str]:
        """Staged files left behind (there should be none)."""
        staged = cell.out / "_quixsinks" / "events" / "staging"
        return [str(p) for p in staged.rglob("*") if p.is_file()] if staged.exists() else []


class PubSubTarget(_OnServer):
    """The `pubsub` sink on the Google Cloud SDK's emulator, a topic of its own per cell."""

    name = "pubsub"
    fmt = "pubsub"
    guarantee = "at-least-once"
    docs = "sinks/pubsub.md"
    server: PubSubEmulator
    not_built = {
        "server-crash": _IN_MEMORY,
        "lost-ack": "gRPC's requests cannot be told apart by their bytes (HPACK); "
        "tests/integration/test_pubsub.py cuts the connection after a publish was forwarded",
        "disk-full": _THEIR_DISK,
    }
    impatient = {
        "publish_timeout": "2",
        "flush_timeout": "2",
        "retry_max_attempts": "2",
        "retry_deadline_seconds": "10",
    }

    def options(self, cell: Cell) -> dict[str, str]:
        self.server.create_topic(cell.name)
        return self.server.options(cell.name)

    def _messages(self, cell: Cell) -> list[tuple[str, int]]:
        messages = self.server.pull_all(cell.name, limit=100_000)
        return [(m.attributes["qs_dedupe_id"], json.loads(m.data)["id"]) for m in messages]

    def read_ids(self, cell: Cell) -> list[int]:
        return [i for _, i in self._messages(cell)]

    def read_deduplicated(self, cell: Cell) -> list[int] | None:
        return list(dict(self._messages(cell)).values())

    def endpoint(self) -> tuple[str, int]:
        host, port = self.server.emulator_host.rsplit(":", 1)
        return host, int(port)

    def via(self, options: dict[str, str], host: str, port: int) -> dict[str, str]:
        return {**options, "emulator_host": f"{host}:{port}"}


class BigQueryTarget(_OnServer):
    """The `bigquery` sink on bqemulator (REST, and gRPC for the Storage Write API) in one
    ``write_mode``, a dataset of its own per cell, read back with google-cloud-bigquery.

    The lost acknowledgement is the driver's commit: in exactly-once mode the REST
    ``jobs.insert`` of the multi-statement transaction (the target's rows and the ledger
    row, or nothing); in direct mode the gRPC ``BatchCommitWriteStreams``, told apart from
    the other Storage Write requests by its protobuf body: the table's path (field 1)
    followed at once by a stream name (field 2), where CreateWriteStream's field 2 is a
    WriteStream message."""

    fmt = "bigquery"
    docs = "sinks/bigquery.md"
    impatient = {
        "ddl_timeout": "2",
        "insert_timeout": "2",
        "retry_timeout": "1",
        "retry_max_attempts": "2",
        "retry_backoff_seconds": "0.1",
    }

    server: BQEmulator

    def __init__(self, server: BQEmulator, write_mode: str) -> None:
        super().__init__(server)
        self.write_mode = write_mode
        self.name = f"bigquery ({write_mode})"
        self.not_built = {"disk-full": _THEIR_DISK}
        if not server.persistent:
            self.not_built["server-crash"] = _IN_MEMORY
        if write_mode == "direct":
            self.guarantee = "at-least-once"
            self.ack = (self._batch_commit(), b"")
        else:
            self.guarantee = "exactly-once"
            self.ack = (b"COMMIT TRANSACTION", b"")

    def _batch_commit(self) -> bytes:
        """The bytes of a BatchCommitWriteStreamsRequest on a cell's table: ``parent``'s
        end, field 2's tag and length, the start of the stream name (the emulator's stream
        ids are 16 hex digits, the cell names of one length)."""
        project = self.server.options["project_id"]
        parent = f"projects/{project}/datasets/{Cell(Path('.')).name}/tables/events"
        length = len(f"{parent}/streams/{'0' * 16}")
        assert length < 128  # one byte as a varint
        return b"/tables/events\x12" + bytes([length]) + b"projects/"

    def options(self, cell: Cell) -> dict[str, str]:
        return {
            **self.server.options,
            "dataset_id": cell.name,
            "table_name": "events",
            "write_mode": self.write_mode,
        }

    def _select(self, cell: Cell, table: str, column: str) -> list[Any]:
        """``column`` of every row of ``table`` in the cell's dataset ([] if no table)."""
        from google.api_core.exceptions import NotFound

        client = self.server.client()
        name = f"{self.server.options['project_id']}.{cell.name}.{table}"
        try:
            return [row[0] for row in client.query(f"SELECT {column} FROM `{name}`").result()]
        except NotFound:
            return []
        finally:
            client.close()

    def read_ids(self, cell: Cell) -> list[int]:
        return [int(i) for i in self._select(cell, "events", "id")]

    def leftovers(self, cell: Cell) -> list[str]:
        """Staged rows left behind (there should be none once the batches committed)."""
        tokens = self._select(cell, "events_qs_staging", "DISTINCT _qs_token")
        return [f"staging rows of {token}" for token in tokens]

    def endpoint(self) -> tuple[str, int]:
        """Where the driver's commit goes: REST, or gRPC in direct mode."""
        if self.write_mode == "direct":
            return self.server.host, self.server.grpc_port
        return super().endpoint()

    def via(self, options: dict[str, str], host: str, port: int) -> dict[str, str]:
        """The endpoint of :meth:`endpoint` replaced (the other one is left alone)."""
        if self.write_mode == "direct":
            return {**options, "grpc_endpoint": f"{host}:{port}"}
        return {**options, "api_endpoint": f"http://{host}:{port}"}

    def hung(self, options: dict[str, str], host: str, port: int) -> dict[str, str]:
        return {
            **options,
            "api_endpoint": f"http://{host}:{port}",
            "grpc_endpoint": f"{host}:{port}",
        }
