"""Spark 4 auto-registration of the quixsinks ``csvfile`` sink: no register call needed.

Spark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module it finds.
"""

from quixsinks.spark.sources import CSVFileDataSource as DefaultSource

__all__ = ["DefaultSource"]
