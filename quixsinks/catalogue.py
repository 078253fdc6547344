"""The built-in sinks: the one list every other place takes them from.

Each sink has two format names: its short name (``postgresql``) and an alias no JVM
connector owns (``qs_postgresql``). Spark looks JVM data sources up first, so where a
platform ships a JVM connector under a short name (Databricks: ``postgresql``,
``bigquery``, ``kinesis``, ``pubsub``, ``iceberg``; Dataproc: ``bigquery``), only the
alias reaches quixsinks.

Spark 4 registers the ``DefaultSource`` of every top-level ``pyspark_*`` module it finds,
one per module; the wheel ships one such module per format name, generated at build time
from this list (``setup.py``, :func:`discovery_modules`). This module uses the standard
library only, so that the build can read it without installing quixsinks.
"""

from __future__ import annotations

__all__ = [
    "ALIAS_PREFIX",
    "SINKS",
    "alias",
    "discovery_module_source",
    "discovery_modules",
    "format_names",
]

#: built-in sink format name -> its DataSource class in :mod:`quixsinks.spark.sources`
SINKS: dict[str, str] = {
    "bigquery": "BigQueryDataSource",
    "csvfile": "CSVFileDataSource",
    "file": "FileDataSource",
    "iceberg": "IcebergDataSource",
    "influxdb1": "InfluxDB1DataSource",
    "influxdb3": "InfluxDB3DataSource",
    "kinesis": "KinesisDataSource",
    "mqtt": "MQTTDataSource",
    "postgresql": "PostgreSQLDataSource",
    "pubsub": "PubSubDataSource",
    "redis": "RedisDataSource",
    "tsdatalake": "TSDataLakeDataSource",
}

#: the prefix of every sink's second format name
ALIAS_PREFIX = "qs_"


def alias(name: str) -> str:
    """The format name no JVM connector owns: ``qs_<name>``."""
    return f"{ALIAS_PREFIX}{name}"


def format_names() -> dict[str, str]:
    """Every format name quixsinks registers (short names and aliases) -> its sink's name."""
    names = {name: name for name in SINKS}
    names.update({alias(name): name for name in SINKS})
    return dict(sorted(names.items()))


def discovery_modules() -> dict[str, str]:
    """Top-level module name -> the format name its ``DefaultSource`` registers."""
    return {f"pyspark_quixsinks_{name}": name for name in format_names()}


_MODULE = '''\
"""Spark 4 registers this module's DefaultSource, format {format_name!r}, by itself.

Generated at build time from quixsinks/catalogue.py; do not edit.
"""

try:
    from quixsinks.spark.sources import data_source as _data_source

    DefaultSource = _data_source({format_name!r})
except Exception as _exc:  # noqa: BLE001
    # Spark's lookup imports every pyspark_* module in one loop without catching errors:
    # one module that raised would hide every Python data source, the user's own
    # included. A broken quixsinks install gets a stand-in that fails when used.
    from pyspark.sql.datasource import DataSource as _DataSource

    _REASON = (
        "the quixsinks sink {format_name!r} cannot be loaded: "
        f"{{type(_exc).__name__}}: {{_exc}}"
    )

    class DefaultSource(_DataSource):  # type: ignore[no-redef]
        @classmethod
        def name(cls) -> str:
            return {format_name!r}

        def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
            raise ImportError(_REASON)

        def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
            raise ImportError(_REASON)

__all__ = ["DefaultSource"]
'''


def discovery_module_source(format_name: str) -> str:
    """The text of the discovery module of ``format_name``."""
    if format_name not in format_names():
        raise KeyError(format_name)
    return _MODULE.format(format_name=format_name)
