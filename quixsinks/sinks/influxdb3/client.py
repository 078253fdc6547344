"""The InfluxDB 3 client: influxdb3-python imported, built and cached per process, the
start-up ping, and :func:`translate`, the one error boundary of the destination.

Answers of a write, classified by HTTP status (the SDK's ``InfluxDBError.response``):

* 429/503 with ``Retry-After``: :class:`SinkBackpressureError` (core's
  :func:`~quixsinks.core.vendors.http.retry_after_seconds` reads the hint); without it, and
  other 5xx: :class:`RetryableError`;
* 422 (points outside the retention period): skipped and counted, or a
  :class:`RecordError` with ``raise_on_retention_violation``;
* 401/403: :class:`DestinationAccessDeniedError`; 404: :class:`DestinationNotFoundError`;
  400: :class:`~.wire.LinesRefused` when the server numbered the refused lines (their rows
  are refused), else :class:`RecordError` (the glue splits the batch to find the rows);
* no answer (refused, dropped, timed out): :class:`RetryableError`; a server certificate
  that does not verify: the non-retryable error of :mod:`quixsinks.core.tls`.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    QuixSinksError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
    timed_out,
)
from quixsinks.core.tls import certificate_error, certificate_failure, ssl_context
from quixsinks.core.vendors.http import import_client as import_vendor_client
from quixsinks.core.vendors.http import retry_after_seconds

from .options import InfluxDB3Options
from .wire import LinesRefused

__all__ = ["import_client", "ping", "tls_context", "translate", "write"]

# Clients per process (Python workers are reused between tasks), closed at exit
_CLIENTS: ClientCache[Any] = ClientCache("influxdb3 clients", lambda c: c.close())


def import_client() -> Any:
    """influxdb3-python's module; MissingDependencyError naming the extra if absent."""
    return import_vendor_client("influxdb_client_3", package="influxdb3-python", extra="influxdb3")


def where(options: InfluxDB3Options) -> str:
    """The server and database, for messages (no secret)."""
    return f"{options.host} database {options.database}"


def tls_context(options: InfluxDB3Options) -> ssl.SSLContext:
    """The TLS settings of the requests the sink makes itself: the CA bundle, or none."""
    return ssl_context("influxdb3", verify=options.verify_ssl, ca_file=options.ssl_ca_cert)


def client(options: InfluxDB3Options) -> Any:
    """The process's client for these options (made on first use)."""
    return _CLIENTS.get(client_key(options), lambda: _new_client(options))


def _new_client(options: InfluxDB3Options) -> Any:
    # No write_client_options: its WriteOptions would switch on batching with client-side
    # retries; the defaults are synchronous and retry nothing. The client's own gzip runs
    # at level 9 (17 MB/s); the sink compresses instead.
    tls: dict[str, str] = {}
    if options.ssl_ca_cert is not None:
        tls["ssl_ca_cert"] = options.ssl_ca_cert
    return import_client().InfluxDBClient3(
        host=options.host,
        token=options.token,
        database=options.database,
        org=options.organization_id or None,
        enable_gzip=False,
        write_timeout=options.request_timeout_ms,
        verify_ssl=options.verify_ssl,
        debug=options.debug,
        **tls,
    )


def write(options: InfluxDB3Options, body: bytes, *, gzip: bool) -> bool:
    """One write request of line protocol (``body`` gzip-compressed already when ``gzip``);
    False when the server dropped it for its retention period (HTTP 422) and the options
    allow that. Failures are raised as :func:`translate` maps them."""
    extra = {"content_encoding": "gzip"} if gzip else {}
    try:
        client(options).write(record=body, write_precision=options.time_precision, **extra)
        return True
    except Exception as exc:
        if not _is_server_error(exc):
            raise
        error = translate(
            exc,
            where(options),
            retention_ok=not options.raise_on_retention_violation,
            timeout_ms=options.request_timeout_ms,
        )
        if error is None:
            return False
        raise error from exc


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
        retry_after = retry_after_seconds(getattr(exc, "retry_after", None))
        if retry_after is not None:
            return SinkBackpressureError(retry_after, text)
        return RetryableError(text)
    if status == 422 and _says_retention(message, response):  # as Quix matches it
        if retention_ok:
            return None
        return _refused(
            f"{text} (points outside the retention period; set "
            "raise_on_retention_violation=false to skip them)",
            exc,
        )
    if status in (401, 403):
        return DestinationAccessDeniedError(
            f"{where}: HTTP {status}: the token was refused; check 'token' (or INFLUXDB_TOKEN)",
            location=where,
        )
    if status == 404:
        return DestinationNotFoundError(f"{text}; does the database exist?", location=where)
    if status in (400, 422):  # 422 for other points (InfluxDB 2.x's /api/v2/write)
        return _refused(text, exc)
    if status is not None and status >= 500:
        return RetryableError(text)
    if status is None and timeout_ms is not None and _is_timeout(exc):
        limit = timed_out(timeout_ms / 1000, "request_timeout_ms")
        return RetryableError(f"{where}: {limit}: {message}")
    if status is None:
        return RetryableError(f"{where}: cannot reach the server: {message}")
    return DestinationError(text, location=where)


def ping(options: InfluxDB3Options) -> None:
    """``GET /ping`` with the token and the writes' TLS settings (verify_ssl, ssl_ca_cert):
    an unreachable server, a refused token or an untrusted certificate is a
    DestinationError (not retried: this is the start-up check)."""
    host = options.host
    request = urllib.request.Request(f"{host.rstrip('/')}/ping")
    if options.token:
        request.add_header("Authorization", f"Token {options.token}")
    context = tls_context(options) if host.startswith("https://") else None
    try:
        with urllib.request.urlopen(
            request, timeout=options.request_timeout_ms / 1000, context=context
        ):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise DestinationAccessDeniedError(
                f"{host}: HTTP {exc.code}: the token was refused; check 'token' "
                "(or INFLUXDB_TOKEN)",
                location=host,
            ) from None
        if exc.code != 404:  # some servers have no /ping; the first write will tell
            raise DestinationError(
                f"{host}: ping answered HTTP {exc.code}", location=host
            ) from None
    except (urllib.error.URLError, OSError) as exc:
        refused = certificate_failure(exc)
        if refused is not None:
            raise _certificate_error(host, refused) from None
        reason = getattr(exc, "reason", exc)
        if _is_timeout(exc):
            limit = timed_out(options.request_timeout_ms / 1000, "request_timeout_ms")
            raise DestinationError(f"{host}: ping {limit}", location=host) from None
        raise DestinationError(
            f"{host}: cannot reach the server: {reason}", location=host
        ) from None


def _certificate_error(where: str, why: str) -> DestinationError:
    return certificate_error(
        where,
        why,
        trust="set 'ssl_ca_cert' to a file holding its CA certificate (PEM)",
        skip="verify_ssl=false",
    )


def _is_timeout(exc: BaseException) -> bool:
    """No answer in time: urllib3's timeouts (the client's), or the socket's (the ping's)."""
    kinds: tuple[type[BaseException], ...] = (TimeoutError,)
    try:
        import urllib3.exceptions

        kinds = (TimeoutError, urllib3.exceptions.TimeoutError)
    except ImportError:  # pragma: no cover - the client depends on urllib3
        pass
    return isinstance(exc, kinds) or isinstance(getattr(exc, "reason", None), kinds)


def _is_server_error(exc: Exception) -> bool:
    """An HTTP answer or a network failure (translated), not a bug of ours (re-raised)."""
    if getattr(getattr(exc, "response", None), "status", None) is not None:
        return True
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in (
        "urllib3",
        "influxdb_client_3",
        "influxdb_client",
    )


def _says_retention(message: str, response: Any) -> bool:
    """Whether a 422 is about the retention period (its message, or its body)."""
    data = getattr(response, "data", None)
    body = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
    return "retention" in f"{message} {body}".lower()


def _refused(message: str, exc: Exception) -> RecordError:
    """A write the server refused for its lines: :class:`LinesRefused` when the server
    numbered every refused line (the sink refuses exactly those rows), else a RecordError
    for the whole request (the glue splits the batch to find the rows)."""
    text = _with_lines(message, exc)
    numbered: dict[int, str] = {}
    for number, why in _line_errors(exc):
        if number < 1:
            return RecordError(text)
        numbered[number] = why
    if numbered:
        return LinesRefused(text, lines=numbered)
    return RecordError(text)


def _line_errors(exc: Exception) -> list[tuple[int, str]]:
    """The (line number, reason) pairs of a partial-write answer; [] when it has none."""
    details = getattr(exc, "line_errors", None)
    if details:
        return [(int(d.line_number), str(d.error_message)) for d in details]
    data = getattr(getattr(exc, "response", None), "data", None)
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        return []
    if not isinstance(parsed, dict) or not isinstance(parsed.get("data"), list):
        return []
    found = []
    for item in parsed["data"]:
        if not isinstance(item, dict):
            return [(0, "")]
        number = item.get("line_number")
        found.append((number if isinstance(number, int) else 0, str(item.get("error_message"))))
    return found


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
