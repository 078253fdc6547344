"""The benchmark harness's standalone modules (``benchmarks/harness/<name>.py``), imported
for unit tests without the rest of the harness (which needs Spark)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

HARNESS = Path(__file__).resolve().parents[2] / "benchmarks" / "harness"


def harness_module(name: str) -> ModuleType:
    """``benchmarks/harness/<name>.py`` as a top-level module ``name``."""
    sys.path.insert(0, str(HARNESS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(HARNESS))
