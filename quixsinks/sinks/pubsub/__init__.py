"""``pubsub``: one Google Pub/Sub message per row, at-least-once with a dedupe attribute.

See docs/sinks/pubsub.md. Needs ``pip install 'quixsinks[pubsub]'``.
"""

from .options import PubSubOptions
from .sink import PubSubSink, PubSubTopicNotFoundError

__all__ = ["PubSubOptions", "PubSubSink", "PubSubTopicNotFoundError"]
