"""The InfluxDB 1.x sink: the shared rows-to-points model, gzip, ``/write`` per request.

Driver: ``prepare`` resolves the DataFrame's columns into a LineProtocol (shared with
``influxdb3``: :mod:`quixsinks.sinks.influxdb3.points` and :mod:`~quixsinks.sinks.influxdb3.wire`);
``preflight`` pings the server and writes an empty body to ``/write``, which checks the
credentials, the write privilege, the database and the retention policy before any task
runs (nothing is stored).

Executor: each SinkBatch becomes line protocol in Arrow, cut into requests of
``batch_size`` lines, each sent under the task's RetryPolicy through a per-process urllib3
pool (:mod:`.client`, the one error boundary).

Nothing to commit: a point is identified by measurement, tag set and time, so a replayed
micro-batch overwrites the same points with the same values (effectively exactly-once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

from quixsinks.core.errors import DestinationError, RecordError, RetryableError
from quixsinks.sinks.influxdb3.points import PointsSink
from quixsinks.sinks.influxdb3.wire import LinesRefused, gzip_body

from .client import client, import_urllib3, numbered_parse_errors, translate
from .options import InfluxDB1Options

__all__ = ["InfluxDB1Sink"]

T = TypeVar("T")


class InfluxDB1Sink(PointsSink[InfluxDB1Options]):
    """Writes points to InfluxDB 1.x; effectively exactly-once. See docs/sinks/influxdb1.md."""

    name: ClassVar[str] = "influxdb1"
    options_class = InfluxDB1Options
    extra = "influxdb1"

    @classmethod
    def check_dependencies(cls) -> None:
        import_urllib3()

    def __repr__(self) -> str:
        return f"InfluxDB1Sink(url={self.options.url!r}, database={self.options.database!r})"

    # ------------------------------------------------------------------ driver

    def preflight(self) -> None:
        """Ping the server, then write an empty body: unreachable, an untrusted certificate,
        refused credentials, a missing database or retention policy fail here. A busy
        server's 429/503 is retried under the retry_* options, as a write would be."""
        server = client(self.options)
        ping = _reach(server.ping, self.options.url)
        if ping.status != 204:
            raise DestinationError(
                f"{self.options.url}: /ping answered HTTP {ping.status} {ping.error}; is this "
                "an InfluxDB 1.x server?",
                location=self.options.url,
            )

        def empty_write() -> None:
            error = translate(_reach(lambda: server.post(b""), self.options.url), server.where)
            if error is not None:
                raise error

        self.options.retry_policy().call(empty_write, what=f"{self.name} start-up check")

    # ------------------------------------------------------------------ executor

    def _send(self, body: bytes) -> bool:
        """One request; a 400 that names every refused line (``unable to parse '<line>'``)
        is a LinesRefused, so that exactly those rows are refused."""
        gzip = self.options.enable_gzip
        try:
            client(self.options).write(gzip_body(body) if gzip else body, gzip=gzip)
        except RecordError as exc:
            numbered = numbered_parse_errors(exc.message, body)
            if numbered is None:
                raise
            raise LinesRefused(exc.message, lines=numbered) from exc
        return True


def _reach(request: Callable[[], T], url: str) -> T:
    """A start-up request: a server that cannot be reached fails at once (no retry)."""
    try:
        return request()
    except RetryableError as exc:
        raise DestinationError(exc.message, location=url) from None
