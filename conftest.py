"""Shared pytest fixtures: a session-scoped local[2] SparkSession bound to 127.0.0.1."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

# session-scoped test servers of the object stores (s3_server, azurite, gcs_server)
pytest_plugins = [
    "tests.services.fixtures_s3",
    "tests.services.fixtures_azure",
    "tests.services.fixtures_gcs",
    "tests.services.fixtures_redis",
    "tests.services.fixtures_kinesis",
]


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    import quixsinks
    from quixsinks.spark.session import local_session

    session = local_session("quixsinks-tests")
    quixsinks.register(session)
    yield session
    session.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/integration is marked `integration`."""
    for item in items:
        if "tests/integration/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.integration)
