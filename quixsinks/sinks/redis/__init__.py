"""``redis``: keys, hashes, sets and sorted sets in Redis, built as RESP in Arrow.

See docs/sinks/redis.md. Needs ``pip install 'quixsinks[redis]'``.
"""

from .options import RedisOptions
from .sink import RedisSink

__all__ = ["RedisOptions", "RedisSink"]
