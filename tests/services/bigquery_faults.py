"""A throttling front for bqemulator's REST API (the emulator never throttles).

``BigQueryThrottle(upstream)`` forwards every request to the emulator byte for byte and,
armed with ``throttle(n, path_part)``, answers the next ``n`` POSTs whose path contains
``path_part`` with BigQuery's own 429 ``rateLimitExceeded`` error instead.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any

from .common import InProcessHTTPServer

_THROTTLED = json.dumps(
    {
        "error": {
            "code": 429,
            "message": "Exceeded rate limits: too many api requests per user per method",
            "errors": [{"reason": "rateLimitExceeded", "message": "Exceeded rate limits"}],
            "status": "RESOURCE_EXHAUSTED",
        }
    }
).encode()


class BigQueryThrottle(InProcessHTTPServer):
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.lock = threading.Lock()
        self.left = 0
        self.path_part = ""
        self.throttled = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def throttle(self, n: int, path_part: str) -> None:
        with self.lock:
            self.left, self.path_part = n, path_part

    def _take(self, method: str, path: str) -> bool:
        with self.lock:
            if method == "POST" and self.left > 0 and self.path_part in path:
                self.left -= 1
                self.throttled += 1
                return True
            return False

    def start(self) -> BigQueryThrottle:
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if front._take(self.command, self.path):
                    self._answer(429, {"Content-Type": "application/json"}, _THROTTLED)
                    return
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "content-length", "connection")
                }
                request = urllib.request.Request(
                    front.upstream + self.path, data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(request, timeout=120) as response:
                        status, data, reply = response.status, response.read(), response.headers
                except urllib.error.HTTPError as error:
                    status, data, reply = error.code, error.read(), error.headers
                kept = {
                    k: v
                    for k, v in reply.items()
                    if k.lower() not in ("content-length", "transfer-encoding", "connection")
                }
                self._answer(status, kept, data)

            def _answer(self, status: int, headers: dict[str, Any], data: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, *args: Any) -> None:
                pass

        self.serve(Handler, name="bigquery-throttle")
        return self
