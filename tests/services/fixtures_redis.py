"""pytest plugin: the Redis test server for the integration tests.

Load it with ``-p tests.services.fixtures_redis`` (or from a conftest's ``pytest_plugins``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .redis_server import RedisCluster, RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One password-protected redis-server on 127.0.0.1 per test session, started on first
    use (tests/services/redis_server.py). Isolate tests by key prefix, not by server."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_sink(redis_server: RedisServer) -> dict[str, Any]:
    """Sink options reaching the server, a fresh key prefix, and the server."""
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    return {
        "options": {**redis_server.options, "key_prefix": prefix},
        "prefix": prefix,
        "server": redis_server,
        "client": redis_server.client(),
    }


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """Three password-protected cluster nodes on 127.0.0.1 (tests/services/redis_server.py)."""
    with RedisCluster() as cluster:
        yield cluster
