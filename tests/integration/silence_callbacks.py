"""Silence callbacks the tsdatalake tests name by import path (they run in the test process)."""

from __future__ import annotations

import time
from typing import Any

FIRED: list[tuple[Any, float]] = []


def record(key: Any) -> None:
    FIRED.append((key, time.time()))


def explode(key: Any) -> None:
    FIRED.append((key, time.time()))
    raise RuntimeError(f"callback failed for {key!r}")
