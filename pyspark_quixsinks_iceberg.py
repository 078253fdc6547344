"""Spark 4 auto-registration of the quixsinks ``iceberg`` sink: no register call needed.

Spark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module it finds. A
JVM Iceberg connector on the classpath owns the short name ``iceberg``: then register
quixsinks' sink under another name (see docs/sinks/iceberg.md).
"""

from _quixsinks_spark_lookup import default_source

DefaultSource = default_source("iceberg", "IcebergDataSource")

__all__ = ["DefaultSource"]
