"""Spark 4 auto-registration of the quixsinks ``mqtt`` sink: no register call needed.

Spark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module it finds.
"""

from _quixsinks_spark_lookup import default_source

DefaultSource = default_source("mqtt", "MQTTDataSource")

__all__ = ["DefaultSource"]
