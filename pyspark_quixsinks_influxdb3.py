"""Spark 4 auto-registration of the quixsinks ``influxdb3`` sink: no register call needed.

Spark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module it finds.
"""

from quixsinks.spark.sources import InfluxDB3DataSource as DefaultSource

__all__ = ["DefaultSource"]
