"""``mqtt``: one message per row to an MQTT broker; QoS 1/2 at-least-once, QoS 0 at-most-once.

See docs/sinks/mqtt.md. Needs ``pip install 'quixsinks[mqtt]'``.
"""

from .options import MQTTOptions
from .sink import MQTTSink

__all__ = ["MQTTOptions", "MQTTSink"]
