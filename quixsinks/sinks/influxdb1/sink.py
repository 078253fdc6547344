"""The InfluxDB 1.x sink: the shared rows-to-points model, gzip, ``/write`` per request.

Driver: ``prepare`` resolves the DataFrame's columns into a LineProtocol (shared with
``influxdb3``: :mod:`quixsinks.sinks.influxdb3.points`); ``preflight`` pings the server and
writes an empty body to ``/write``, which checks the credentials, the write privilege, the
database and the retention policy before any task runs (nothing is stored).

Executor: each SinkBatch becomes line protocol in Arrow, cut into requests of
``batch_size`` lines, each sent under the task's RetryPolicy through a per-process urllib3
pool (:mod:`.client`, the one error boundary).

Nothing to commit: a point is identified by measurement, tag set and time, so a replayed
micro-batch overwrites the same points with the same values (effectively exactly-once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.errors import DestinationError, RetryableError
from quixsinks.sinks.influxdb3.points import PointsSink, gzip_body

from .client import Answer, InfluxDB1Client, import_urllib3, translate, translate_failure
from .options import InfluxDB1Options

__all__ = ["InfluxDB1Sink"]

# Clients per process (Python workers are reused between tasks), closed at exit
_CLIENTS: ClientCache[InfluxDB1Client] = ClientCache("influxdb1 clients", lambda c: c.close())


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

    @property
    def where(self) -> str:
        """The server and database, for messages (no secret)."""
        return f"{self.options.url} database {self.options.database}"

    # ------------------------------------------------------------------ driver

    def preflight(self) -> None:
        """Ping the server, then write an empty body: unreachable, an untrusted certificate,
        refused credentials, a missing database or retention policy fail here. A busy
        server's 429/503 is retried under the retry_* options, as a write would be."""
        client = self._client()
        ping = self._reach(client.ping)
        if ping.status != 204:
            raise DestinationError(
                f"{self.options.url}: /ping answered HTTP {ping.status} {ping.error}; is this "
                "an InfluxDB 1.x server?",
                location=self.options.url,
            )

        def empty_write() -> None:
            error = translate(self._reach(lambda: client.write(b"")), self.where)
            if error is not None:
                raise error

        self.options.retry_policy().call(empty_write, what=f"{self.name} start-up check")

    def _reach(self, request: Callable[[], Answer]) -> Answer:
        """A start-up request: a server that cannot be reached fails at once (no retry)."""
        try:
            return self._call(request)
        except RetryableError as exc:
            raise DestinationError(exc.message, location=self.options.url) from None

    # ------------------------------------------------------------------ executor

    def _client(self) -> InfluxDB1Client:
        return _CLIENTS.get(client_key(self.options), lambda: InfluxDB1Client(self.options))

    def _call(self, request: Callable[[], Answer]) -> Answer:
        """Run one request; a network failure becomes a quixsinks error."""
        try:
            return request()
        except Exception as exc:
            error = translate_failure(exc, self.where, self.options.request_timeout_ms)
            if error is None:
                raise
            raise error from None

    def _send(self, body: bytes) -> bool:
        gzip = self.options.enable_gzip
        if gzip:
            body = gzip_body(body)
        client = self._client()
        error = translate(self._call(lambda: client.write(body, gzip=gzip)), self.where)
        if error is not None:
            raise error
        return True
