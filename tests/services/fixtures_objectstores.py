"""Session-scoped pytest fixtures of the object-store test servers (a pytest plugin)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """moto_server on 127.0.0.1 (tests/services/moto.py)."""
    from tests.services.moto import MotoServer

    with MotoServer() as server:
        yield server


@pytest.fixture(scope="session")
def azurite() -> Iterator[Any]:
    """Azurite's blob service on 127.0.0.1 (tests/services/azurite.py)."""
    from tests.services.azurite import Azurite

    with Azurite() as server:
        yield server
