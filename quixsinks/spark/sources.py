"""The PySpark DataSource classes of the built-in sinks.

``quixsinks.register(spark)`` registers them, and each ``pyspark_quixsinks_<name>`` module
(generated at build time from :mod:`quixsinks.catalogue`) exposes one as ``DefaultSource``,
so that Spark 4 registers it by itself in any new session (Spark Connect servers
included). Every sink also answers to its alias ``qs_<name>`` (:func:`data_source`), a
name no JVM connector owns. Importing this module imports no destination
client: a sink whose extra is missing fails when a write is planned, with a
MissingDependencyError that names the extra.
"""

from __future__ import annotations

from quixsinks.catalogue import SINKS, alias, format_names
from quixsinks.sinks.bigquery import BigQuerySink
from quixsinks.sinks.csvfile import CSVFileSink
from quixsinks.sinks.file import FileSink
from quixsinks.sinks.iceberg import IcebergSink
from quixsinks.sinks.influxdb1 import InfluxDB1Sink
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
    "InfluxDB1DataSource",
    "InfluxDB3DataSource",
    "KinesisDataSource",
    "MQTTDataSource",
    "PostgreSQLDataSource",
    "PubSubDataSource",
    "RedisDataSource",
    "TSDataLakeDataSource",
    "data_source",
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


class InfluxDB1DataSource(QuixDataSource):
    """``format("influxdb1")``: points into InfluxDB 1.x; effectively exactly-once.

    Save mode append; streaming output mode append. See docs/sinks/influxdb1.md.
    """

    sink_class = InfluxDB1Sink


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


def _alias_source(name: str) -> type[QuixDataSource]:
    """The DataSource of sink ``name`` under its alias: the same sink, the other name."""
    base: type[QuixDataSource] = globals()[SINKS[name]]
    qualname = f"{base.__name__}Alias"
    source = type(
        qualname,
        (base,),
        {"format_name": alias(name), "__module__": __name__, "__qualname__": qualname},
    )
    globals()[qualname] = source  # importable by name: Spark pickles it by reference
    return source


_SOURCES: dict[str, type[QuixDataSource]] = {
    **{name: globals()[class_name] for name, class_name in SINKS.items()},
    **{alias(name): _alias_source(name) for name in SINKS},
}
assert set(_SOURCES) == set(format_names())


def data_source(format_name: str) -> type[QuixDataSource]:
    """The DataSource class of a built-in format name (``postgresql`` or ``qs_postgresql``)."""
    return _SOURCES[format_name]
