"""Pytest fixtures for Kinesis tests: kinesalite for the session, a stream per test.

A plugin module (load it with ``-p tests.services.fixtures_kinesis`` or from a conftest's
``pytest_plugins``); see tests/services/README.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.services.kinesalite import KinesaliteServer


@pytest.fixture(scope="session")
def kinesalite() -> Iterator[KinesaliteServer]:
    """A throwaway kinesalite on 127.0.0.1 (in memory) for the test session."""
    with KinesaliteServer() as server:
        yield server


@pytest.fixture
def kinesis_stream(kinesalite: KinesaliteServer) -> str:
    """A new, empty, ACTIVE two-shard stream on the session's kinesalite."""
    name = f"quixsinks-{uuid.uuid4().hex[:12]}"
    kinesalite.create_stream(name, shards=2)
    return name


@pytest.fixture
def kinesis_sink(kinesalite: KinesaliteServer, kinesis_stream: str) -> dict[str, Any]:
    """The `kinesis` sink options for a new two-shard stream, the server and the stream."""
    return {
        "options": {
            **{k: str(v) for k, v in kinesalite.options().items()},
            "stream_name": kinesis_stream,
            "retry_backoff_seconds": "0.01",
            "retry_max_backoff_seconds": "0.2",
        },
        "server": kinesalite,
        "stream": kinesis_stream,
    }
