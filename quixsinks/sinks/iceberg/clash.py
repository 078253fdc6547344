"""The name clash with Iceberg's JVM connector.

With Iceberg's Spark runtime jar on the classpath, ``format("iceberg")`` is the JVM
connector's (Spark looks JVM data sources up first), and quixsinks' Python sink is never
called. :func:`jvm_connector_present` detects that; ``quixsinks.register`` then logs what
to do: register this sink under another name (see docs/sinks/iceberg.md).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["CLASH_MESSAGE", "JVM_SOURCE_CLASS", "jvm_connector_present", "warn_if_jvm_connector"]

logger = logging.getLogger("quixsinks.sinks.iceberg")

JVM_SOURCE_CLASS = "org.apache.iceberg.spark.source.IcebergSource"
CLASH_MESSAGE = (
    "Iceberg's JVM connector is on this session's classpath and owns format('iceberg'): "
    "writes with that name go to the JVM connector, not to quixsinks. To use quixsinks' sink, "
    "register it under another name (a subclass of quixsinks.sinks.iceberg.IcebergSink with "
    "name = 'pyiceberg', registered with spark.dataSource.register(data_source_for(...)); "
    "see docs/sinks/iceberg.md)."
)


def jvm_connector_present(spark: Any) -> bool:
    """Whether the session's JVM can load Iceberg's Spark data source (False under Spark
    Connect, where the client has no JVM)."""
    try:
        jvm = spark._jvm
        if jvm is None:
            return False
        jvm.java.lang.Class.forName(JVM_SOURCE_CLASS)
        return True
    except Exception:
        return False


def warn_if_jvm_connector(spark: Any) -> bool:
    """Log :data:`CLASH_MESSAGE` when the JVM connector is present; returns whether it is."""
    present = jvm_connector_present(spark)
    if present:
        logger.warning(CLASH_MESSAGE)
    return present
