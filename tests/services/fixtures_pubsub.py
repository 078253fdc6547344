"""pytest plugin: the Google Pub/Sub emulator for the integration tests.

Load it with ``-p tests.services.fixtures_pubsub`` (or from a conftest's ``pytest_plugins``).
Where the emulator (a Google Cloud SDK component) or Java is missing, the tests that use it
are skipped with that reason, which pytest prints (``-ra``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .pubsub_emulator import PubSubEmulator, missing_reason


@pytest.fixture(scope="session")
def pubsub_emulator() -> Iterator[PubSubEmulator]:
    """One Pub/Sub emulator on 127.0.0.1 per test session, started on first use
    (tests/services/pubsub_emulator.py). Isolate tests by topic, not by server."""
    reason = missing_reason()
    if reason is not None:
        print(f"SKIPPED pubsub tests: {reason}")
        pytest.skip(reason)
    pytest.importorskip(
        "google.cloud.pubsub_v1", reason="google-cloud-pubsub is not installed (quixsinks[pubsub])"
    )
    with PubSubEmulator() as server:
        yield server


@pytest.fixture
def pubsub_topic(pubsub_emulator: PubSubEmulator) -> dict[str, Any]:
    """A fresh topic with an ordered subscription ``<topic>-sub``: the sink options that
    reach it, its name and the emulator."""
    topic = f"t-{uuid.uuid4().hex[:12]}"
    pubsub_emulator.create_topic(topic)
    return {
        "options": pubsub_emulator.options(topic),
        "topic": topic,
        "server": pubsub_emulator,
    }
