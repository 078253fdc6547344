"""The InfluxDB 3 sink: vectorised line protocol, gzip, batch_size lines per request.

Executor: each SinkBatch becomes line protocol in Arrow (rows to points: ``points``, shared
with the ``influxdb1`` sink; the encoder: ``lineprotocol``), sent in requests of
``batch_size`` lines through influxdb3-python, synchronously, each request
under the sink's RetryPolicy: HTTP 429/503 become SinkBackpressureError (honouring
Retry-After), connection failures and other 5xx are retried with backoff; 422 (points
outside the retention period) skips the request with a warning and a count, unless
``raise_on_retention_violation``; 401/403 fail at once with an authentication error.

Driver: nothing to commit. A point is identified by measurement, tag set and time, so a
replayed micro-batch overwrites the same points with the same values: effectively
exactly-once.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any, ClassVar

from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    MissingDependencyError,
    QuixSinksError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
    timed_out,
)
from quixsinks.core.tls import certificate_error, certificate_failure, ssl_context

from .options import InfluxDB3Options
from .points import PointsSink, gzip_body

__all__ = ["InfluxDB3Sink", "translate"]

# Clients per process (Python workers are reused between tasks), closed at exit
_CLIENTS: ClientCache[Any] = ClientCache("influxdb3 clients", lambda c: c.close())


def import_client() -> Any:
    try:
        import influxdb_client_3
    except ImportError as exc:
        raise MissingDependencyError("influxdb3-python", "influxdb3") from exc
    return influxdb_client_3


def _retry_after(value: Any) -> float | None:
    try:
        return max(0.0, float(value)) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None  # an HTTP date: use our own backoff


def translate(
    exc: Exception, where: str, *, retention_ok: bool, timeout_ms: int | None = None
) -> QuixSinksError | None:
    """The quixsinks error for a failed write; None for a 422 retention skip.
    ``timeout_ms``: ``request_timeout_ms``, named when the request timed out."""
    refused = certificate_failure(exc)
    if refused is not None:
        return _certificate_error(where, refused)
    response = getattr(exc, "response", None)
    status = getattr(response, "status", None)
    message = str(getattr(exc, "message", None) or exc).strip()
    text = f"{where}: HTTP {status}: {message}" if status else f"{where}: {message}"
    if status in (429, 503):
        retry_after = _retry_after(getattr(exc, "retry_after", None))
        if retry_after is not None:
            return SinkBackpressureError(retry_after, text)
        return RetryableError(text)
    if status == 422:
        return (
            None
            if retention_ok
            else RecordError(
                f"{text} (points outside the retention period; set "
                "raise_on_retention_violation=false to skip them)"
            )
        )
    if status in (401, 403):
        return DestinationAccessDeniedError(
            f"{where}: HTTP {status}: the token was refused; check 'token' (or INFLUXDB_TOKEN)",
            location=where,
        )
    if status == 404:
        return DestinationNotFoundError(f"{text}; does the database exist?", location=where)
    if status == 400:
        return RecordError(f"{text}")
    if status is not None and status >= 500:
        return RetryableError(text)
    if status is None and timeout_ms is not None and _is_timeout(exc):
        limit = timed_out(timeout_ms / 1000, "request_timeout_ms")
        return RetryableError(f"{where}: {limit}: {message}")
    if status is None:
        return RetryableError(f"{where}: cannot reach the server: {message}")
    return DestinationError(text, location=where)


def _certificate_error(where: str, why: str) -> DestinationError:
    return certificate_error(
        where,
        why,
        trust="set 'ssl_ca_cert' to a file holding its CA certificate (PEM)",
        skip="verify_ssl=false",
    )


def tls_context(options: InfluxDB3Options) -> ssl.SSLContext:
    """The TLS settings of the requests the sink makes itself: the CA bundle, or none."""
    return ssl_context("influxdb3", verify=options.verify_ssl, ca_file=options.ssl_ca_cert)


def _is_timeout(exc: BaseException) -> bool:
    """No answer in time: urllib3's timeouts (the client's), or the socket's (the ping's)."""
    kinds: tuple[type[BaseException], ...] = (TimeoutError,)
    try:
        import urllib3.exceptions

        kinds = (TimeoutError, urllib3.exceptions.TimeoutError)
    except ImportError:  # pragma: no cover - the client depends on urllib3
        pass
    return isinstance(exc, kinds) or isinstance(getattr(exc, "reason", None), kinds)


def is_server_error(exc: Exception) -> bool:
    """An HTTP answer or a network failure (translated), not a bug of ours (re-raised)."""
    if getattr(getattr(exc, "response", None), "status", None) is not None:
        return True
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in (
        "urllib3",
        "influxdb_client_3",
        "influxdb_client",
    )


class InfluxDB3Sink(PointsSink[InfluxDB3Options]):
    """Writes points to InfluxDB 3; effectively exactly-once. See docs/sinks/influxdb3.md."""

    name: ClassVar[str] = "influxdb3"
    options_class = InfluxDB3Options
    extra = "influxdb3"

    @classmethod
    def check_dependencies(cls) -> None:
        import_client()

    def __repr__(self) -> str:
        return f"InfluxDB3Sink(host={self.options.host!r}, database={self.options.database!r})"

    # ------------------------------------------------------------------ driver

    def preflight(self) -> None:
        """Ping the server once with the token and the writes' TLS settings (verify_ssl,
        ssl_ca_cert): unreachable, refused or an untrusted certificate fails here."""
        opts = self.options
        request = urllib.request.Request(f"{opts.host.rstrip('/')}/ping")
        if opts.token:
            request.add_header("Authorization", f"Token {opts.token}")
        context = tls_context(opts) if opts.host.startswith("https://") else None
        try:
            with urllib.request.urlopen(
                request, timeout=opts.request_timeout_ms / 1000, context=context
            ):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise DestinationAccessDeniedError(
                    f"{opts.host}: HTTP {exc.code}: the token was refused; check 'token' "
                    "(or INFLUXDB_TOKEN)",
                    location=opts.host,
                ) from None
            if exc.code != 404:  # some servers have no /ping; the first write will tell
                raise DestinationError(
                    f"{opts.host}: ping answered HTTP {exc.code}", location=opts.host
                ) from None
        except (urllib.error.URLError, OSError) as exc:
            refused = certificate_failure(exc)
            if refused is not None:
                raise _certificate_error(opts.host, refused) from None
            reason = getattr(exc, "reason", exc)
            if _is_timeout(exc):
                limit = timed_out(opts.request_timeout_ms / 1000, "request_timeout_ms")
                raise DestinationError(f"{opts.host}: ping {limit}", location=opts.host) from None
            raise DestinationError(
                f"{opts.host}: cannot reach the server: {reason}", location=opts.host
            ) from None

    # ------------------------------------------------------------------ executor

    def _client(self) -> Any:
        return _CLIENTS.get(client_key(self.options), self._new_client)

    def _new_client(self) -> Any:
        opts = self.options
        # No write_client_options: its WriteOptions would switch on batching with
        # client-side retries; the defaults are synchronous and retry nothing. The
        # client's own gzip runs at level 9 (17 MB/s); the sink compresses instead.
        tls: dict[str, str] = {}
        if opts.ssl_ca_cert is not None:
            tls["ssl_ca_cert"] = opts.ssl_ca_cert
        return import_client().InfluxDBClient3(
            host=opts.host,
            token=opts.token,
            database=opts.database,
            org=opts.organization_id or None,
            enable_gzip=False,
            write_timeout=opts.request_timeout_ms,
            verify_ssl=opts.verify_ssl,
            debug=opts.debug,
            **tls,
        )

    def _send(self, body: bytes) -> bool:
        """One request through influxdb3-python; False when the server dropped it for its
        retention period (HTTP 422)."""
        extra: dict[str, str] = {}
        if self.options.enable_gzip:
            # level 1: ~9x faster than the client's level 9, for a slightly larger body
            body = gzip_body(body)
            extra["content_encoding"] = "gzip"
        try:
            self._client().write(record=body, write_precision=self.options.time_precision, **extra)
            return True
        except Exception as exc:
            if not is_server_error(exc):
                raise
            where = f"{self.options.host} database {self.options.database}"
            error = translate(
                exc,
                where,
                retention_ok=not self.options.raise_on_retention_violation,
                timeout_ms=self.options.request_timeout_ms,
            )
            if error is None:
                self.logger.warning(
                    "%s: points outside the retention period dropped (HTTP 422)", where
                )
                return False
            if isinstance(error, RecordError):
                error = RecordError(_with_lines(error.message, exc))
            raise error from exc


def _with_lines(message: str, exc: Exception) -> str:
    """Add the failing line numbers of a partial write, when the server gave them."""
    details = getattr(exc, "line_errors", None)
    if details:
        lines = ", ".join(f"line {d.line_number}: {d.error_message}" for d in details[:5])
        return f"{message} [{lines}]"
    data = getattr(getattr(exc, "response", None), "data", None)
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        return message
    if isinstance(parsed, dict) and isinstance(parsed.get("data"), list):
        lines = ", ".join(
            f"line {d.get('line_number')}: {d.get('error_message')}"
            for d in parsed["data"][:5]
            if isinstance(d, dict)
        )
        return f"{message} [{lines}]"
    return message
