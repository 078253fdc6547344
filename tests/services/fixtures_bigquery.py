"""pytest plugin: the BigQuery emulator for the integration tests.

Load it with ``-p tests.services.fixtures_bigquery`` (or from a conftest's ``pytest_plugins``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .bigquery_emulator import BQEmulator


@pytest.fixture(scope="session")
def bqemulator() -> Iterator[BQEmulator]:
    """One bqemulator on 127.0.0.1 per test session, started on first use
    (tests/services/bqemulator.py). Isolate tests by dataset, not by server."""
    with BQEmulator() as server:
        yield server


@pytest.fixture
def bigquery_sink(bqemulator: BQEmulator) -> dict[str, Any]:
    """Sink options reaching the emulator with a fresh dataset, a client, and the server."""
    dataset = f"d{uuid.uuid4().hex[:10]}"
    return {
        "options": {**bqemulator.options, "dataset_id": dataset, "table_name": "events"},
        "dataset": dataset,
        "table": f"{bqemulator.options['project_id']}.{dataset}.events",
        "server": bqemulator,
        "client": bqemulator.client(),
    }
