"""Pytest fixtures for Kinesis tests: kinesalite for the session.

A plugin module (load it with ``-p tests.services.fixtures_kinesis`` or from a conftest's
``pytest_plugins``); see tests/services/README.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

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
