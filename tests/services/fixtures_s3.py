"""pytest plugin: the S3 test server (moto) for the integration tests.

Load it with ``-p tests.services.fixtures_s3`` (or from a conftest's ``pytest_plugins``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .moto import MotoServer


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoServer]:
    """One moto S3 server on 127.0.0.1 per test session, started on first use
    (tests/services/moto.py). Isolate tests by bucket, not by server."""
    with MotoServer() as server:
        yield server
