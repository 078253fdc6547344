"""``influxdb3``: points into InfluxDB 3 with vectorised line protocol.

See docs/sinks/influxdb3.md. Needs ``pip install 'quixsinks[influxdb3]'``.
"""

from .options import InfluxDB3Options
from .sink import InfluxDB3Sink
from .wire import LineProtocol

__all__ = ["InfluxDB3Options", "InfluxDB3Sink", "LineProtocol"]
