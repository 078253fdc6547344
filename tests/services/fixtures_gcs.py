"""pytest plugin: the session's GCS emulator (``-p tests.services.fixtures_gcs``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .gcs_emulator import GCSEmulator


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GCSEmulator]:
    """One gcp-storage-emulator (behind its front) per test session, started on first use."""
    with GCSEmulator() as server:
        yield server
