"""The PySpark DataSource classes of the built-in sinks.

``quixsinks.register(spark)`` registers them, and each ``pyspark_quixsinks_<name>`` module
exposes one as ``DefaultSource``, so that Spark 4 registers it by itself in any new
session (Spark Connect servers included). Importing this module imports no destination
client: a sink whose extra is missing fails when a write is planned, with a
MissingDependencyError that names the extra.
"""

from __future__ import annotations

from quixsinks.sinks.csvfile import CSVFileSink
from quixsinks.sinks.file import FileSink
from quixsinks.sinks.influxdb3 import InfluxDB3Sink
from quixsinks.sinks.postgresql import PostgreSQLSink
from quixsinks.sinks.redis import RedisSink

from .datasource import QuixDataSource

__all__ = [
    "CSVFileDataSource",
    "FileDataSource",
    "InfluxDB3DataSource",
    "PostgreSQLDataSource",
    "RedisDataSource",
]


class CSVFileDataSource(QuixDataSource):
    """``format("csvfile")``: every record appended to one CSV file; exactly-once.

    Save mode append; streaming output mode append. See docs/sinks/csvfile.md.
    """

    sink_class = CSVFileSink


class FileDataSource(QuixDataSource):
    """``format("file")``: JSON Lines, Parquet or CSV files in a directory; exactly-once.

    Save modes append and overwrite; streaming output modes append and complete.
    See docs/sinks/file.md.
    """

    sink_class = FileSink


class InfluxDB3DataSource(QuixDataSource):
    """``format("influxdb3")``: points into InfluxDB 3; effectively exactly-once.

    Save mode append; streaming output mode append. See docs/sinks/influxdb3.md.
    """

    sink_class = InfluxDB3Sink


class PostgreSQLDataSource(QuixDataSource):
    """``format("postgresql")``: rows into PostgreSQL tables with COPY; exactly-once.

    Save modes append and overwrite; streaming output modes append and complete.
    See docs/sinks/postgresql.md.
    """

    sink_class = PostgreSQLSink


class RedisDataSource(QuixDataSource):
    """``format("redis")``: keys, hashes, sets, sorted sets (effectively exactly-once),
    lists and streams (exactly-once) in Redis.

    Save mode append; streaming output mode append. See docs/sinks/redis.md.
    """

    sink_class = RedisSink
