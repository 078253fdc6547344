"""Make the modules named in ``QUIXSINKS_BLOCK_IMPORTS`` (comma-separated) unimportable.

Any Python process with this folder on ``PYTHONPATH`` loads it at start-up, Spark's
Python workers included (Spark adds the JVM's ``PYTHONPATH`` to theirs): a test can so
simulate an environment where a sink's extra (e.g. ``psycopg2``) is not installed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

BLOCKED = tuple(name for name in os.environ.get("QUIXSINKS_BLOCK_IMPORTS", "").split(",") if name)


class BlockedImports:
    """A meta path finder that refuses the blocked modules and their submodules."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if any(name == blocked or name.startswith(blocked + ".") for blocked in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None


if BLOCKED:
    sys.meta_path.insert(0, BlockedImports())
