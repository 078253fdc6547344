"""A tiny HTTP proxy in front of Azurite that can answer like a throttled Azure Blob Storage.

Azurite has no fault injection, so `FaultProxy` forwards every request to `backend` (the
Azurite port) unchanged and, when a fault is queued, answers the next matching request
itself, the way the real service throttles: an HTTP status, the ``x-ms-error-code`` header,
an XML ``<Error>`` body and, if asked, ``Retry-After``. Shared Key signatures do not cover
the host, so clients pointed at the proxy authenticate with Azurite as usual.

It runs in a thread of the test process, on a free port of 127.0.0.1::

    with FaultProxy(("127.0.0.1", azurite.port)) as proxy:
        proxy.add(503, "ServerBusy", count=3, retry_after=1)
        url = proxy.account_url(azurite.account)

`requests` lists every ``(method, path?query)`` seen, faulted or not.
"""

from __future__ import annotations

import collections
import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from .common import InProcessHTTPServer

__all__ = ["Fault", "FaultProxy"]

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


@dataclass(frozen=True)
class Fault:
    """One queued answer to the next request whose method is in `methods` (any if empty)."""

    status: int
    code: str
    retry_after: float | None = None
    methods: tuple[str, ...] = ()


class FaultProxy(InProcessHTTPServer):
    """A forwarding proxy with a FIFO of faults (see the module docstring)."""

    def __init__(self, backend: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.backend = backend
        self.host = host
        self._faults: collections.deque[Fault] = collections.deque()
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.faulted: list[tuple[str, str, int]] = []

    def account_url(self, account: str) -> str:
        return f"http://{self.host}:{self.port}/{account}"

    def add(
        self,
        status: int,
        code: str,
        count: int = 1,
        retry_after: float | None = None,
        methods: tuple[str, ...] = (),
    ) -> None:
        """Answer the next `count` matching requests with `status` and error `code`."""
        with self._lock:
            self._faults.extend([Fault(status, code, retry_after, methods)] * count)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._faults)

    def take(self, method: str) -> Fault | None:
        with self._lock:
            for i, fault in enumerate(self._faults):
                if not fault.methods or method in fault.methods:
                    del self._faults[i]
                    return fault
            return None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self.serve(Handler, name="azure-fault-proxy")
        return self


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self) -> None:
        body = self._body()
        self.owner.requests.append((self.command, self.path))
        fault = self.owner.take(self.command)
        if fault is not None:
            self.owner.faulted.append((self.command, self.path, fault.status))
            self._answer_fault(fault)
            return
        conn = http.client.HTTPConnection(*self.owner.backend, timeout=60)
        try:
            # Content-Length is set below: a client's own (any case) would be sent twice
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length"
            }
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body or None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            self.send_response(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() in _HOP_BY_HOP or name.lower() == "content-length":
                    continue
                self.send_header(name, value)
            if self.command == "HEAD":
                self.send_header("Content-Length", response.getheader("Content-Length") or "0")
                self.end_headers()
            else:
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
        finally:
            conn.close()

    def _answer_fault(self, fault: Fault) -> None:
        text = (
            '<?xml version="1.0" encoding="utf-8"?><Error>'
            f"<Code>{fault.code}</Code><Message>injected by the test proxy</Message></Error>"
        ).encode()
        self.send_response(fault.status)
        self.send_header("x-ms-error-code", fault.code)
        self.send_header("x-ms-request-id", "fault-proxy")
        self.send_header("Content-Type", "application/xml")
        if fault.retry_after is not None:
            self.send_header("Retry-After", f"{fault.retry_after:g}")
        if self.command == "HEAD":
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle
