"""pytest plugin: the Iceberg REST catalog stand-in (tests/services/iceberg_rest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .iceberg_rest import IcebergRestServer


@pytest.fixture(scope="session")
def iceberg_rest() -> Iterator[IcebergRestServer]:
    """One REST catalog stand-in per test session, started on first use. Isolate tests by
    table name."""
    pytest.importorskip("pyiceberg")
    with IcebergRestServer() as server:
        yield server
