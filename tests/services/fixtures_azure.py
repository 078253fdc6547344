"""Pytest fixtures for Azure Blob Storage tests: Azurite for the session, a fault proxy.

A plugin module (load it with ``-p tests.services.fixtures_azure`` or from a conftest's
``pytest_plugins``); see tests/services/README.md.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services.azure_faults import FaultProxy
from tests.services.azurite import AzuriteServer


@pytest.fixture(scope="session")
def azurite() -> Iterator[AzuriteServer]:
    """A throwaway Azurite blob service on 127.0.0.1 (in memory) for the test session."""
    with AzuriteServer() as server:
        yield server


@pytest.fixture
def azurite_faults(azurite: AzuriteServer) -> Iterator[FaultProxy]:
    """A proxy in front of the session's Azurite that can answer like a throttled service."""
    with FaultProxy((azurite.host, azurite.port)) as proxy:
        yield proxy
