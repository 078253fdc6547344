"""Spark 4 auto-registration of the quixsinks ``postgresql`` sink: no register call needed.

Spark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module it finds.
"""

from quixsinks.spark.sources import PostgreSQLDataSource as DefaultSource

__all__ = ["DefaultSource"]
