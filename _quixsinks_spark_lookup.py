"""The ``DefaultSource`` of each ``pyspark_quixsinks_*`` module, safe to import anywhere.

Spark's lookup of Python data sources (pyspark/sql/worker/lookup_data_sources.py) imports
every top-level ``pyspark_*`` module in one loop without catching errors: one module that
raises makes Spark find no Python data source at all, the user's own included, and the
error only reads DATA_SOURCE_NOT_FOUND. So when quixsinks cannot be imported here (a broken
or incompatible install), the module still yields a DataSource under the sink's name that
fails when used, saying why. Imports only pyspark until quixsinks loads.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["default_source"]


def default_source(name: str, class_name: str) -> Any:
    """``quixsinks.spark.sources.<class_name>``, or a stand-in that raises the import error."""
    try:
        return getattr(importlib.import_module("quixsinks.spark.sources"), class_name)
    except Exception as exc:  # anything raised here would hide every Python data source
        return _unavailable(name, f"{type(exc).__name__}: {exc}")


def _unavailable(sink_name: str, reason: str) -> Any:
    from pyspark.sql.datasource import DataSource

    message = f"the quixsinks sink {sink_name!r} cannot be loaded: {reason}"

    class UnavailableDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return sink_name

        def writer(self, schema: Any, overwrite: bool) -> Any:
            raise ImportError(message)

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            raise ImportError(message)

    UnavailableDataSource.__doc__ = message
    return UnavailableDataSource
