"""The InfluxDB 1.x HTTP API through urllib3: ``/ping``, ``/write``, and the one error
boundary that turns its answers into quixsinks errors.

No vendor client: the 1.x write API is one POST of line protocol, and the sink builds the
line protocol itself (influxdb-python, which Quix uses, would turn rows back into Python
dicts and re-encode them). Every request has the ``request_timeout_ms`` timeout (its connect
part capped by :func:`~quixsinks.core.clients.connect_timeout`) and urllib3 retries nothing:
the sink's RetryPolicy is the one retry layer.

Answers, per the 1.x handler (``services/httpd``):

* 204: written.
* 400 ``partial write: field type conflict ...`` / ``points beyond retention policy`` /
  ``unable to parse``: a row-level refusal, :class:`RecordError` (the server stored the
  request's other points; a replay overwrites them); the sink turns ``unable to parse
  '<line>'`` into the refused lines' numbers (:func:`numbered_parse_errors`);
* 400 ``max-series-per-database`` / ``max-values-per-tag limit exceeded``: a server limit,
  :class:`DestinationError` (not row-level);
* 401/403: :class:`DestinationAccessDeniedError`, never retried;
* 404 ``database not found``, and 500 ``retention policy not found`` (1.x answers it
  with a 500; the one answer recognised by its text, as 1.x has no error codes):
  :class:`DestinationNotFoundError`;
* 413: the body is over the server's ``max-body-size``: a DestinationError naming
  ``batch_size``;
* 429/503 with ``Retry-After``: :class:`SinkBackpressureError`; without it, and other 5xx
  (a write timeout, a hinted-handoff queue full): :class:`RetryableError`;
* no answer in time, a refused or dropped connection: :class:`RetryableError`; a server
  certificate that does not verify: a DestinationError saying what to set.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Any

from quixsinks.core.clients import ClientCache, client_key, connect_timeout
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
from quixsinks.core.vendors.http import import_client, retry_after_seconds

from .options import InfluxDB1Options

__all__ = [
    "Answer",
    "InfluxDB1Client",
    "client",
    "import_urllib3",
    "numbered_parse_errors",
    "translate",
]

#: line protocol, as the 1.x server expects it
CONTENT_TYPE = "text/plain; charset=utf-8"


def import_urllib3() -> Any:
    """urllib3; MissingDependencyError naming the extra if absent."""
    return import_client("urllib3", package="urllib3", extra="influxdb1")


# Clients per process (Python workers are reused between tasks), closed at exit
_CLIENTS: ClientCache[InfluxDB1Client] = ClientCache("influxdb1 clients", lambda c: c.close())


@dataclass(frozen=True)
class Answer:
    """One HTTP answer of the server (the body decoded as its error text)."""

    status: int
    error: str
    retry_after: str | None = None
    version: str | None = None


def client(options: InfluxDB1Options) -> InfluxDB1Client:
    """The process's client for these options (made on first use)."""
    return _CLIENTS.get(client_key(options), lambda: InfluxDB1Client(options))


class InfluxDB1Client:
    """One connection pool to one server with the sink's credentials and TLS settings."""

    def __init__(self, options: InfluxDB1Options) -> None:
        urllib3 = import_urllib3()
        self.options = options
        self.url = options.url
        self.where = f"{options.url} database {options.database}"
        seconds = options.request_timeout_ms / 1000
        self.timeout = urllib3.Timeout(connect=connect_timeout(seconds), read=seconds)
        tls: dict[str, Any] = {}
        if options.uses_tls:
            tls = {"ssl_context": tls_context(options)}
            if not options.verify_ssl:
                tls["assert_hostname"] = False
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=4, retries=False, **tls)
        self._headers: dict[str, str] = {}
        self._credentials: dict[str, str] = {}
        if options.username is not None and options.password is not None:
            if options.auth_method == "basic":
                pair = f"{options.username}:{options.password}".encode()
                self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
            else:
                self._credentials = {"u": options.username, "p": options.password}

    def __repr__(self) -> str:
        return f"InfluxDB1Client(url={self.url!r}, database={self.options.database!r})"

    def close(self) -> None:
        self._pool.clear()

    def ping(self) -> Answer:
        """``GET /ping``: the server answers 204 with its version, no credentials needed."""
        return self._request("GET", "/ping", {}, None, {})

    def post(self, body: bytes, *, gzip: bool = False) -> Answer:
        """``POST /write`` of line protocol (gzip-compressed when ``gzip``): the answer."""
        headers = {"Content-Type": CONTENT_TYPE}
        if gzip:
            headers["Content-Encoding"] = "gzip"
        parameters = {**self.options.write_parameters(), **self._credentials}
        return self._request("POST", "/write", parameters, body, headers)

    def write(self, body: bytes, *, gzip: bool = False) -> None:
        """:meth:`post`, with any answer but 2xx raised as :func:`translate` maps it."""
        error = translate(self.post(body, gzip=gzip), self.where)
        if error is not None:
            raise error

    def _request(
        self,
        method: str,
        path: str,
        parameters: dict[str, str],
        body: bytes | None,
        headers: dict[str, str],
    ) -> Answer:
        """One request; a network failure (no answer) is raised as :func:`translate` maps it."""
        url = self.url + path
        if parameters:
            url += "?" + urllib.parse.urlencode(parameters)
        try:
            response = self._pool.request(
                method,
                url,
                body=body,
                headers={**self._headers, **headers},
                timeout=self.timeout,
                redirect=False,
                preload_content=True,
            )
        except Exception as exc:
            error = translate(exc, self.where, timeout_ms=self.options.request_timeout_ms)
            if error is None:
                raise
            raise error from None
        return Answer(
            status=response.status,
            error=_error_text(response.data) if response.status >= 300 else "",
            retry_after=response.headers.get("Retry-After"),
            version=response.headers.get("X-Influxdb-Version"),
        )


def tls_context(options: InfluxDB1Options) -> ssl.SSLContext:
    """The TLS settings of the requests the sink makes itself: the CA bundle, or none."""
    return ssl_context("influxdb1", verify=options.verify_ssl, ca_file=options.ssl_ca_cert)


def _error_text(data: bytes) -> str:
    """The ``error`` of a 1.x JSON error body, or the body itself (shortened)."""
    text = data.decode("utf-8", errors="replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text[:2000]
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        return str(parsed["error"])
    return text[:2000]


def translate(
    failure: Answer | Exception, where: str, *, timeout_ms: int = 0
) -> QuixSinksError | None:
    """The quixsinks error for an answer of ``/write`` (None when it was written), or for a
    request that got no answer (urllib3 or socket failures; None for an exception that is
    not a network failure: a bug, re-raised as it is). ``timeout_ms``: the
    ``request_timeout_ms`` a timeout names."""
    if isinstance(failure, Answer):
        return _answer_error(failure, where)
    return _network_error(failure, where, timeout_ms)


def _answer_error(answer: Answer, where: str) -> QuixSinksError | None:
    status, message = answer.status, answer.error
    if 200 <= status < 300:
        return None
    text = f"{where}: HTTP {status}: {message}" if message else f"{where}: HTTP {status}"
    if status in (429, 503):
        retry_after = retry_after_seconds(answer.retry_after)
        if retry_after is not None:
            return SinkBackpressureError(retry_after, text)
        return RetryableError(text)
    if status in (401, 403):
        return DestinationAccessDeniedError(
            f"{where}: HTTP {status}: {message or 'access denied'}; check 'username' and "
            "'password' (and the user's WRITE privilege on the database)",
            location=where,
        )
    if status == 404 or (status == 500 and "retention policy not found" in message):
        # 1.x answers a missing retention policy with a 500: no retry can create it
        return DestinationNotFoundError(
            f"{text}; create it first (InfluxQL: CREATE DATABASE, CREATE RETENTION POLICY)",
            location=where,
        )
    if status == 400:
        if any(limit in message for limit in _CARDINALITY_LIMITS):
            # the server's series or tag-value limit: raise it, or drop series; no row's fault
            return DestinationError(
                f"{text}; the database reached a cardinality limit of the server "
                "(max-series-per-database, max-values-per-tag)",
                location=where,
            )
        if "retention policy" in message and "beyond" in message:
            return RecordError(
                f"{text} (points older than the retention policy's duration: the server "
                "dropped them and stored the request's other points; filter such rows out, "
                "or write them into a longer retention_policy)"
            )
        return RecordError(text)
    if status == 413:
        return DestinationError(
            f"{text}; the request is over the server's max-body-size: lower 'batch_size'",
            location=where,
        )
    if status >= 500:
        return RetryableError(text)
    return DestinationError(text, location=where)


#: 1.x's 400 answers for a server limit, not for the points' content
_CARDINALITY_LIMITS = (
    "max-series-per-database limit exceeded",
    "max-values-per-tag limit exceeded",
)
_UNABLE = "unable to parse '"
_DROPPED = re.compile(r"\s*dropped=\d+\s*$")


def numbered_parse_errors(message: str, body: bytes) -> dict[int, str] | None:
    """The lines of ``body`` (1-based) that a 1.x 400 answer ``message`` refuses as
    ``unable to parse '<line>': <why>``, with the reasons; None unless every error of the
    answer is such a line found in ``body`` (a field type conflict names no line)."""
    # the error's message starts with where it happened ("<url> database d: HTTP 400: ")
    starts = [i for i in (message.find("partial write:"), message.find(_UNABLE)) if i >= 0]
    if not starts:
        return None
    text = message[min(starts) :].removeprefix("partial write:").strip()
    text = _DROPPED.sub("", text)
    segments = [segment.strip() for segment in text.split("\n") if segment.strip()]
    if not segments:
        return None
    lines = body.decode("utf-8", errors="replace").split("\n")
    found: dict[int, str] = {}
    for segment in segments:
        if not segment.startswith(_UNABLE):
            return None
        rest = segment[len(_UNABLE) :]
        for number, line in enumerate(lines, start=1):
            if line and rest.startswith(line + "': ") and number not in found:
                found[number] = rest[len(line) + 3 :]
                break
        else:
            return None
    return found


def _network_error(exc: Exception, where: str, timeout_ms: int) -> QuixSinksError | None:
    refused = certificate_failure(exc)
    if refused is not None:
        return certificate_error(
            where,
            refused,
            trust="set 'ssl_ca_cert' to a file holding its CA certificate (PEM)",
            skip="verify_ssl=false",
        )
    urllib3 = import_urllib3()
    if isinstance(exc, urllib3.exceptions.NewConnectionError):  # a ConnectTimeoutError too
        return RetryableError(f"{where}: cannot reach the server: {exc}")
    if isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError):
        return RetryableError(f"{where}: {timed_out(timeout_ms / 1000, 'request_timeout_ms')}")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        reason = getattr(exc, "reason", None) or exc
        return RetryableError(f"{where}: cannot reach the server: {reason}")
    return None
