"""``influxdb1``: points into InfluxDB 1.x through its ``/write`` API, vectorised line
protocol (the encoder and the record model of ``influxdb3``).

See docs/sinks/influxdb1.md. Needs ``pip install 'quixsinks[influxdb1]'`` (urllib3 only).
"""

from .options import InfluxDB1Options
from .sink import InfluxDB1Sink

__all__ = ["InfluxDB1Options", "InfluxDB1Sink"]
