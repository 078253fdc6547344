"""Fixtures of the integration tests: real servers started for the test session."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.services.postgres import PostgresServer
from tests.services.spark_cluster import SparkCluster, SparkConnectServer


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (see tests/services/README.md)."""
    with PostgresServer() as server:
        yield server


@pytest.fixture
def pg(postgres: PostgresServer) -> dict[str, Any]:
    """A fresh database per test: the sink options to reach it, and the server."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    postgres.create_database(name)
    return {
        "options": {
            "host": postgres.host,
            "port": str(postgres.port),
            "user": postgres.user,
            "password": postgres.password,
            "dbname": name,
        },
        "server": postgres,
        "dbname": name,
    }


@pytest.fixture(scope="session")
def influx_server() -> Iterator[Any]:
    """Debian's InfluxDB 1.x behind an InfluxDB 3 write-API front (tests/services)."""
    from tests.services.influxdb import InfluxServer

    with InfluxServer() as server:
        yield server


@pytest.fixture
def influx(influx_server: Any) -> dict[str, Any]:
    """A fresh database per test: the sink options to reach it, and the server."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    influx_server.create_database(name)
    influx_server.faults.clear()
    return {
        "options": {"host": influx_server.url, "token": influx_server.token, "database": name},
        "server": influx_server,
        "database": name,
    }


@pytest.fixture(scope="session")
def influx1_server() -> Iterator[Any]:
    """Debian's InfluxDB 1.x with auth-enabled (an admin and a writer user), behind the
    front that passes ``/write`` through and can inject faults (tests/services)."""
    from tests.services.influxdb import InfluxServer

    with InfluxServer(auth=True) as server:
        server.writer = ("writer", secrets.token_urlsafe(18))
        server.create_user(*server.writer)
        yield server


@pytest.fixture
def influx1(influx1_server: Any) -> dict[str, Any]:
    """A fresh database per test that the writer user may write to: the ``influxdb1`` sink
    options to reach it (through the front), and the server."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    influx1_server.create_database(name)
    user, password = influx1_server.writer
    influx1_server.grant_write(user, name)
    influx1_server.faults.clear()
    return {
        "options": {
            "host": influx1_server.host,
            "port": str(influx1_server.port),
            "database": name,
            "username": user,
            "password": password,
        },
        "server": influx1_server,
        "database": name,
    }


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[SparkCluster]:
    """A Spark standalone cluster on 127.0.0.1: a master and two one-core workers, so a job
    gets two executor JVMs (tests/services/spark_cluster.py)."""
    with SparkCluster(workers=2, cores=1) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark_connect() -> Iterator[SparkConnectServer]:
    """A Spark Connect server (local[2]) on 127.0.0.1, started from its own temporary
    directory with quixsinks installed as users install it (tests/services/spark_cluster.py)."""
    with SparkConnectServer() as server:
        yield server


@pytest.fixture
def worker_logs(spark: Any) -> Callable[[str], int]:
    """Spark's Python worker logging on for the test (the setting ends with it: the root
    conftest.py); the fixture counts the log lines of Python workers (quixsinks' commits
    included) that contain a text."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")

    def count(text: str) -> int:
        logs = spark.tvf.python_worker_logs()
        return int(logs.where(F.col("msg").contains(text)).count())

    return count
