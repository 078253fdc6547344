"""``kinesis``: records into an Amazon Kinesis data stream, at-least-once with dedupe ids.

See docs/sinks/kinesis.md. Needs ``pip install 'quixsinks[kinesis]'``.
"""

from .client import KinesisStreamNotFoundError
from .options import KinesisOptions
from .sink import KinesisSink

__all__ = ["KinesisOptions", "KinesisSink", "KinesisStreamNotFoundError"]
