"""The PySpark DataSource classes of the built-in sinks.

``quixsinks.register(spark)`` registers them, and each ``pyspark_quixsinks_<name>`` module
exposes one as ``DefaultSource``, so that Spark 4 registers it by itself in any new
session (Spark Connect servers included). Importing this module imports no destination
client: a sink whose extra is missing fails when a write is planned, with a
MissingDependencyError that names the extra.
"""

from __future__ import annotations

from quixsinks.sinks.bigquery import BigQuerySink
from quixsinks.sinks.csvfile import CSVFileSink
from quixsinks.sinks.file import FileSink
from quixsinks.sinks.iceberg import IcebergSink
from quixsinks.sinks.influxdb3 import InfluxDB3Sink
from quixsinks.sinks.kinesis import KinesisSink
from quixsinks.sinks.mqtt import MQTTSink
from quixsinks.sinks.postgresql import PostgreSQLSink
from quixsinks.sinks.pubsub import PubSubSink
from quixsinks.sinks.redis import RedisSink
from quixsinks.sinks.tsdatalake import TSDataLakeSink

from .datasource import QuixDataSource

__all__ = [
    "BigQueryDataSource",
    "CSVFileDataSource",
    "FileDataSource",
    "IcebergDataSource",
    "InfluxDB3DataSource",
    "KinesisDataSource",
    "MQTTDataSource",
    "PostgreSQLDataSource",
    "PubSubDataSource",
    "RedisDataSource",
    "TSDataLakeDataSource",
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


class TSDataLakeDataSource(QuixDataSource):
    """``format("tsdatalake")``: the Quix time-series data lake, Hive-partitioned Parquet;
    exactly-once, with per-key silence detection.

    Save mode append; streaming output mode append. See docs/sinks/tsdatalake.md.
    """

    sink_class = TSDataLakeSink


class KinesisDataSource(QuixDataSource):
    """``format("kinesis")``: records into a Kinesis data stream; at-least-once, never a
    silent loss, a deterministic dedupe id per record.

    Save mode append; streaming output mode append. See docs/sinks/kinesis.md.
    """

    sink_class = KinesisSink


class MQTTDataSource(QuixDataSource):
    """``format("mqtt")``: one MQTT message per row to ``<topic_root>/<key>``; QoS 1/2
    at-least-once (MQTT 5: a deterministic ``qs_dedupe_id`` user property), QoS 0
    at-most-once.

    Save mode append; streaming output mode append. See docs/sinks/mqtt.md.
    """

    sink_class = MQTTSink


class PubSubDataSource(QuixDataSource):
    """``format("pubsub")``: one Google Pub/Sub message per row; at-least-once, every
    message with a deterministic ``qs_dedupe_id`` attribute.

    Save mode append; streaming output mode append. See docs/sinks/pubsub.md.
    """

    sink_class = PubSubSink


class IcebergDataSource(QuixDataSource):
    """``format("iceberg")``: one Iceberg snapshot per micro-batch through pyiceberg (SQL,
    REST, Glue and other catalogs); exactly-once.

    Save modes append and overwrite; streaming output modes append and complete.
    See docs/sinks/iceberg.md.
    """

    sink_class = IcebergSink


class BigQueryDataSource(QuixDataSource):
    """``format("bigquery")``: rows into a BigQuery table through the Storage Write API
    (Arrow, PENDING streams); exactly-once (``write_mode=direct``: at-least-once).

    Save modes append and overwrite; streaming output modes append and complete.
    See docs/sinks/bigquery.md.
    """

    sink_class = BigQuerySink
