"""A small HTTP proxy in front of kinesalite that answers like a throttled Kinesis.

kinesalite never refuses part of a PutRecords call, never throttles and never loses an
answer, so tests point a client at `KinesisFaultProxy` instead:

- ``throttle_fraction``: each PutRecords entry is refused with that probability (a seeded
  random draw) with ``ProvisionedThroughputExceededException`` and is **not** forwarded;
  the rest are forwarded as one smaller PutRecords call and the answers are merged in the
  original order, as Kinesis answers a partial failure.
- ``throttle_calls(n)``: the next ``n`` PutRecords calls are answered HTTP 400
  ``ProvisionedThroughputExceededException`` as a whole (nothing forwarded).
- ``drop_responses(n)``: the next ``n`` PutRecords calls are forwarded (their records land)
  and then the connection is closed without an answer: the client cannot know, and a
  resend duplicates them.
- ``delay_responses(n, seconds)``: the next ``n`` PutRecords calls are forwarded (their
  records land) and answered only after ``seconds``: a slow server, or a client timeout.

Other calls are forwarded unchanged. kinesalite does not verify SigV4 signatures, so a
rewritten body is accepted. Counters (``entries_refused``, ``calls_throttled``,
``responses_dropped``, ``responses_delayed``, ``entries_forwarded``) say what was injected::

    with KinesisFaultProxy(kinesalite.endpoint_url, throttle_fraction=0.1) as proxy:
        options = {**kinesalite.options(), "endpoint_url": proxy.url}
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import Any

from .common import InProcessHTTPServer

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}
THROTTLED = "ProvisionedThroughputExceededException"


class KinesisFaultProxy(InProcessHTTPServer):
    """Forwards to ``backend_url``; see the module docstring."""

    def __init__(
        self,
        backend_url: str,
        *,
        throttle_fraction: float = 0.0,
        seed: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        parsed = urllib.parse.urlsplit(backend_url)
        self.backend = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.host = host
        self.throttle_fraction = throttle_fraction
        self.entries_refused = 0
        self.entries_forwarded = 0
        self.calls_throttled = 0
        self.responses_dropped = 0
        self.responses_delayed = 0
        self._throttle_calls = 0
        self._drop_responses = 0
        self._delay_responses = 0
        self._delay_seconds = 0.0
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def throttle_calls(self, count: int) -> None:
        """Answer the next ``count`` PutRecords calls with a whole-call throttle."""
        with self._lock:
            self._throttle_calls += count

    def drop_responses(self, count: int) -> None:
        """Forward the next ``count`` PutRecords calls, then close without answering."""
        with self._lock:
            self._drop_responses += count

    def delay_responses(self, count: int, seconds: float) -> None:
        """Forward the next ``count`` PutRecords calls, then answer after ``seconds``."""
        with self._lock:
            self._delay_responses += count
            self._delay_seconds = seconds

    def _decide(self) -> str:
        with self._lock:
            if self._throttle_calls:
                self._throttle_calls -= 1
                self.calls_throttled += 1
                return "throttle"
            if self._drop_responses:
                self._drop_responses -= 1
                self.responses_dropped += 1
                return "drop"
            if self._delay_responses:
                self._delay_responses -= 1
                self.responses_delayed += 1
                return "delay"
            return "forward"

    def _refuse(self, count: int) -> list[bool]:
        with self._lock:
            refused = [self._random.random() < self.throttle_fraction for _ in range(count)]
            self.entries_refused += sum(refused)
            self.entries_forwarded += count - sum(refused)
            return refused

    def start(self) -> KinesisFaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                target = self.headers.get("X-Amz-Target", "")
                if not target.endswith(".PutRecords"):
                    self._relay(*proxy._forward(self.path, self.headers, body))
                    return
                decision = proxy._decide()
                if decision == "throttle":
                    error = {"__type": THROTTLED, "message": "Rate exceeded (injected)"}
                    self._answer(400, json.dumps(error).encode())
                    return
                request = json.loads(body)
                records = request["Records"]
                refused = proxy._refuse(len(records))
                kept = [r for r, no in zip(records, refused, strict=True) if not no]
                results: list[dict[str, Any]] = []
                if kept:
                    forwarded = json.dumps({**request, "Records": kept}).encode()
                    status, headers, data = proxy._forward(self.path, self.headers, forwarded)
                    if status != 200:
                        self._relay(status, headers, data)
                        return
                    results = json.loads(data)["Records"]
                if decision == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if decision == "delay":
                    time.sleep(proxy._delay_seconds)
                merged: list[dict[str, Any]] = []
                landed = iter(results)
                for no in refused:
                    if no:
                        merged.append({"ErrorCode": THROTTLED, "ErrorMessage": "injected"})
                    else:
                        merged.append(next(landed))
                failed = sum(1 for r in merged if r.get("ErrorCode"))
                answer = {"FailedRecordCount": failed, "Records": merged}
                self._answer(200, json.dumps(answer).encode())

            def _answer(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("x-amzn-RequestId", "injected")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _relay(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.serve(Handler, name="kinesis-fault-proxy")
        return self

    def _forward(
        self, target: str, headers: Any, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.backend, timeout=60)
        try:
            conn.putrequest("POST", target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                lower = name.lower()
                if lower not in _HOP_BY_HOP and lower != "content-length":
                    conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            answer = conn.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            conn.close()
