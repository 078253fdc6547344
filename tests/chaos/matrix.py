"""The rows of the fault matrix, the servers they need, and the cells CI runs."""

from __future__ import annotations

import contextlib
import re
import subprocess
from typing import Any

from ..services.azurite import AzuriteServer
from ..services.bigquery_emulator import PREFIX as BQEMULATOR_PREFIX
from ..services.bigquery_emulator import BQEmulator
from ..services.gcs_emulator import GCSEmulator
from ..services.influxdb import InfluxServer
from ..services.kinesalite import KinesaliteServer
from ..services.mosquitto import MosquittoServer
from ..services.moto import MotoServer
from ..services.postgres import PostgresServer
from ..services.pubsub_emulator import PubSubEmulator
from ..services.redis_server import RedisServer
from .targets import (
    BigQueryTarget,
    CsvTarget,
    FileTarget,
    IcebergTarget,
    InfluxTarget,
    InfluxV1Target,
    KinesisTarget,
    MQTTTarget,
    ObjectStoreTarget,
    PostgresTarget,
    PubSubTarget,
    RedisTarget,
    Target,
    TsDataLakeTarget,
)

#: (target, fault) cells that ``make test`` runs (tests/integration/test_chaos.py): at
#: least one fault of each kind per sink family; the driver kill of these sinks is
#: tested by tests/integration/test_driver_kill.py
QUICK: set[tuple[str, str]] = {
    ("file (local, JSON)", "worker-kill"),
    ("file (local, JSON)", "disk-full"),
    ("csvfile", "disk-full"),
    ("postgresql (exactly-once)", "server-crash"),
    ("postgresql (exactly-once)", "lost-ack"),
    ("postgresql (exactly-once)", "hung-server"),
    ("postgresql (prepared)", "server-crash"),
    ("postgresql (prepared)", "lost-ack"),
    ("redis (list)", "lost-ack"),
    ("redis (string)", "hung-server"),
    ("influxdb3", "lost-ack"),
    ("influxdb1", "server-crash"),
    ("kinesis", "lost-ack"),
    ("file (S3, JSON)", "lost-ack"),
    ("pubsub", "hung-server"),
    ("iceberg (SQLite catalog, local)", "worker-kill"),
    ("tsdatalake (local)", "disk-full"),
    ("bigquery (exactly-once)", "lost-ack"),
    ("mqtt", "lost-ack"),
}


def build(
    postgres: PostgresServer,
    redis: RedisServer,
    influx: InfluxServer,
    kinesis: KinesaliteServer,
    s3: MotoServer,
    pubsub: PubSubEmulator,
    azure: Any,
    gcs: Any,
    bigquery: BQEmulator,
    mosquitto: MosquittoServer,
) -> list[Target]:
    """Every row, on servers already running."""
    return [
        FileTarget(),
        ObjectStoreTarget(s3, "s3"),
        ObjectStoreTarget(azure, "azure"),
        ObjectStoreTarget(gcs, "gcs"),
        CsvTarget(),
        *(PostgresTarget(postgres, mode) for mode in ("exactly-once", "prepared", "direct")),
        *(RedisTarget(redis, data_type) for data_type in ("string", "list")),
        InfluxTarget(influx),
        InfluxV1Target(influx),
        KinesisTarget(kinesis),
        PubSubTarget(pubsub),
        IcebergTarget(),
        TsDataLakeTarget(),
        *(BigQueryTarget(bigquery, mode) for mode in ("exactly-once", "direct")),
        MQTTTarget(mosquitto),
    ]


def targets(stack: contextlib.ExitStack) -> tuple[dict[str, str], list[Target]]:
    """Start the servers (stopped when ``stack`` closes); their versions and the rows."""
    postgres = stack.enter_context(PostgresServer())
    redis = RedisServer()
    # durable, as in production: a crashed server comes back with every acknowledged write
    redis.extra_args = ["--appendonly", "yes", "--appendfsync", "always"]
    stack.enter_context(redis)
    influx = stack.enter_context(InfluxServer())
    kinesis = stack.enter_context(KinesaliteServer())
    s3 = stack.enter_context(MotoServer())
    pubsub = stack.enter_context(PubSubEmulator())
    azure = stack.enter_context(AzuriteServer())
    gcs = stack.enter_context(GCSEmulator())
    # on a DuckDB file: a crashed emulator comes back with every committed row
    bigquery = stack.enter_context(BQEmulator(persistent=True))
    # persistence on (its default here): the subscriber's session outlives a crash
    mosquitto = stack.enter_context(MosquittoServer())
    versions = {
        "PostgreSQL": _version([str(postgres.pg_bin / "postgres"), "--version"]),
        "Redis": _version([redis.binary, "--version"]),
    }
    versions["InfluxDB 1.x (InfluxDB 3 stand-in)"] = _version([str(influx.influxd), "version"])
    versions["bqemulator"] = _version(
        [
            str(BQEMULATOR_PREFIX / "bin" / "python"),
            "-c",
            "import bqemulator; print(bqemulator.__version__)",
        ]
    )
    versions["Mosquitto"] = _version([mosquitto.binary, "-h"])
    rows = build(postgres, redis, influx, kinesis, s3, pubsub, azure, gcs, bigquery, mosquitto)
    return versions, rows


def _version(command: list[str]) -> str:
    """The first version number a ``--version`` command prints."""
    out = subprocess.run(command, capture_output=True, text=True, check=False).stdout
    found = re.search(r"\d+\.\d+[\w.~+-]*", out)
    return found.group(0) if found else "?"
