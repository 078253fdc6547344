"""``influxdb3``: points into InfluxDB 3 with vectorised line protocol.

See docs/sinks/influxdb3.md. Needs ``pip install 'quixsinks[influxdb3]'``.
"""

from quixsinks.spark.datasource import QuixDataSource

from .lineprotocol import LineProtocol
from .options import InfluxDB3Options
from .sink import InfluxDB3Sink

__all__ = ["InfluxDB3DataSource", "InfluxDB3Options", "InfluxDB3Sink", "LineProtocol"]


class InfluxDB3DataSource(QuixDataSource):
    """``df.write.format("influxdb3")`` / ``df.writeStream.format("influxdb3")``.

    Options (snake_case or camelCase): ``host``, ``database``, ``measurement`` or
    ``measurement_column`` are required; ``token`` (or INFLUXDB_TOKEN), ``tags_keys``,
    ``fields_keys``, ``time_key``, ``time_precision``, ``batch_size``, ``enable_gzip``
    and the rest in docs/sinks/influxdb3.md. Save mode append; streaming output mode
    append. Guarantee: effectively exactly-once (points are upserts by measurement, tags
    and time).
    """

    sink_class = InfluxDB3Sink
