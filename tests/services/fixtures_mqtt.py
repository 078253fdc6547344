"""pytest plugin: the Mosquitto broker and a recording subscriber for the mqtt tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .mosquitto import MosquittoServer, Recorder


@pytest.fixture(scope="session")
def mosquitto() -> Iterator[MosquittoServer]:
    """One mosquitto on 127.0.0.1 per test session (tests/services/mosquitto.py): plain,
    password and TLS listeners. Isolate tests by topic root, not by broker."""
    with MosquittoServer() as server:
        yield server


@pytest.fixture
def mqtt_sink(mosquitto: MosquittoServer) -> Iterator[dict[str, Any]]:
    """Sink options for the plain listener with a fresh topic root, and a Recorder
    subscribed to it (started before the test publishes)."""
    root = f"t{uuid.uuid4().hex[:10]}"
    with Recorder(mosquitto, root) as recorder:
        yield {
            "options": {**mosquitto.options(), "topic_root": root, "client_id": "qs-test"},
            "root": root,
            "server": mosquitto,
            "recorder": recorder,
        }
