"""The InfluxDB 3 sink: vectorised line protocol, gzip, batch_size lines per request.

Executor: each SinkBatch becomes line protocol in Arrow (rows to points: ``points``, shared
with the ``influxdb1`` sink; the encoder: ``wire``), sent in requests of ``batch_size``
lines through influxdb3-python (``client``), synchronously, each request under the sink's
RetryPolicy: HTTP 429/503 become SinkBackpressureError (honouring Retry-After), connection
failures and other 5xx are retried with backoff; 422 (points outside the retention period)
skips the request with a warning and a count, unless ``raise_on_retention_violation``;
401/403 fail at once with an authentication error.

Driver: nothing to commit. A point is identified by measurement, tag set and time, so a
replayed micro-batch overwrites the same points with the same values: effectively
exactly-once.
"""

from __future__ import annotations

from typing import ClassVar

from . import client
from .options import InfluxDB3Options
from .points import PointsSink
from .wire import gzip_body

__all__ = ["InfluxDB3Sink"]


class InfluxDB3Sink(PointsSink[InfluxDB3Options]):
    """Writes points to InfluxDB 3; effectively exactly-once. See docs/sinks/influxdb3.md."""

    name: ClassVar[str] = "influxdb3"
    options_class = InfluxDB3Options
    extra = "influxdb3"

    @classmethod
    def check_dependencies(cls) -> None:
        client.import_client()

    def __repr__(self) -> str:
        return f"InfluxDB3Sink(host={self.options.host!r}, database={self.options.database!r})"

    # ------------------------------------------------------------------ driver

    def preflight(self) -> None:
        """Ping the server once: unreachable, refused or an untrusted certificate fails here."""
        client.ping(self.options)

    # ------------------------------------------------------------------ executor

    def _send(self, body: bytes) -> bool:
        """One request; False when the server dropped it for its retention period (422)."""
        gzip = self.options.enable_gzip
        if gzip:  # level 1: ~9x faster than the client's level 9, for a slightly larger body
            body = gzip_body(body)
        if client.write(self.options, body, gzip=gzip):
            return True
        self.logger.warning(
            "%s: points outside the retention period dropped (HTTP 422)",
            client.where(self.options),
        )
        return False
