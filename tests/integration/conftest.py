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
