"""A tiny HTTP proxy in front of an S3 test server that can answer with injected errors.

moto has no way to make S3 throttle (``503 SlowDown``) or fail (``500 InternalError``), so
tests point a client at `S3FaultProxy` instead of the server: each request takes the next
queued fault, if any, and gets an S3-shaped XML error **instead of** being forwarded
(nothing is stored); other requests are forwarded unchanged (the ``Host`` header included,
so SigV4 signatures still match) and the server's answer is relayed. Every request is
recorded (`requests`), so tests can also see what the client sent (paths, methods, how many
attempts the SDK made).

It runs in a background thread of the test process on a free 127.0.0.1 port::

    with S3FaultProxy(moto.url) as proxy:
        options = {**moto.options(), "endpoint_url": proxy.url}
        proxy.add_fault(503, "SlowDown", count=2, retry_after=1)

Bodies are read by ``Content-Length`` (no chunked uploads: clients pointed at a custom
endpoint by quixsinks send checksums only where required, so no ``aws-chunked`` bodies).
"""

from __future__ import annotations

import collections
import http.client
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from .common import InProcessHTTPServer

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


@dataclass(frozen=True)
class S3Fault:
    """One injected answer."""

    status: int
    code: str
    message: str = "injected by S3FaultProxy"
    retry_after: float | None = None


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    path: str
    query: str
    status: int
    injected: bool


class S3FaultProxy(InProcessHTTPServer):
    """Forwards to ``backend_url``; see the module docstring."""

    def __init__(self, backend_url: str, host: str = "127.0.0.1") -> None:
        parsed = urllib.parse.urlsplit(backend_url)
        self.backend = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.host = host
        self.requests: list[ProxiedRequest] = []
        self._faults: collections.deque[S3Fault] = collections.deque()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("S3FaultProxy is not started")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def add_fault(
        self,
        status: int,
        code: str,
        count: int = 1,
        *,
        retry_after: float | None = None,
        message: str = "injected by S3FaultProxy",
    ) -> None:
        """Answer the next ``count`` requests with ``status`` and S3 error ``code``."""
        with self._lock:
            self._faults.extend([S3Fault(status, code, message, retry_after)] * count)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
            self.requests.clear()

    def _take(self) -> S3Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _record(self, request: ProxiedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def start(self) -> S3FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path, _, query = self.path.partition("?")
                fault = proxy._take()
                # recorded before answering, so a test sees a request once its call returned
                if fault is not None:
                    proxy._record(ProxiedRequest(self.command, path, query, fault.status, True))
                    self._answer_fault(fault)
                    return
                status, headers, data = proxy._forward(self.command, self.path, self.headers, body)
                proxy._record(ProxiedRequest(self.command, path, query, status, False))
                self.send_response(status)
                for name, value in headers:
                    lower = name.lower()
                    if lower in _HOP_BY_HOP or (
                        lower == "content-length" and self.command != "HEAD"
                    ):
                        continue
                    self.send_header(name, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _answer_fault(self, fault: S3Fault) -> None:
                data = (
                    '<?xml version="1.0" encoding="UTF-8"?>\n'
                    f"<Error><Code>{fault.code}</Code><Message>{fault.message}</Message>"
                    "<RequestId>injected</RequestId></Error>"
                ).encode()
                self.send_response(fault.status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(data)))
                if fault.retry_after is not None:
                    self.send_header("Retry-After", f"{fault.retry_after:g}")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.serve(Handler, name="s3-fault-proxy")
        return self

    def _forward(
        self, method: str, target: str, headers: Any, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.backend, timeout=60)
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    conn.putheader(name, value)
            conn.endheaders(body or None)
            answer = conn.getresponse()
            data = answer.read()
            return answer.status, answer.getheaders(), data
        finally:
            conn.close()
