"""Fixtures of the integration tests: real servers started for the test session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.services.postgres import PostgresServer


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
