"""An HTTP front that imitates the InfluxDB 3 write API in front of an InfluxDB 1.x server.

`InfluxFront` answers ``POST /api/v3/write_lp`` and ``POST /api/v2/write`` the way InfluxDB 3
does (token auth, gzip bodies, precision names, JSON errors with per-line details) and stores
the points through the 1.x ``POST /write`` of `backend_url`. It also answers ``GET /ping`` and
``GET /health``. Tests can queue fake answers (`Faults`) and look at what the front received
(`InfluxFront.requests`: the write requests; `all_requests`: all). See README.md for what
this stand-in does not imitate.

Faults can also be queued from another process over HTTP (no token needed)::

    POST /__faults    {"status": 429, "count": 2, "retry_after": 1}     (or a list of those)
    POST /__faults    {"delay": 2.5, "count": 1}                        (slow, then forwarded)
    DELETE /__faults  (clear)           GET /__faults  (what is still queued)

or with `post_fault(front_url, status=429, retry_after=1)`.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import http.client
import json
import re
import secrets
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request
import zlib
from dataclasses import asdict, dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

V3_WRITE = "/api/v3/write_lp"
V2_WRITE = "/api/v2/write"
#: the 1.x write API, passed through to the 1.x server as it is (its auth, its answers)
V1_WRITE = "/write"
FAULTS_PATH = "/__faults"
VERSION = "3.0.0-quixsinks-stand-in"
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024  # InfluxDB 3 Core's default --max-http-request-size

# InfluxDB 3 / v2 precision names -> the 1.x ``precision`` query parameter (None: auto)
V3_PRECISIONS: dict[str, str | None] = {
    "auto": None,
    "nanosecond": "n",
    "microsecond": "u",
    "millisecond": "ms",
    "second": "s",
    "ns": "n",
    "us": "u",
    "ms": "ms",
    "s": "s",
}
V2_PRECISIONS: dict[str, str | None] = {"ns": "n", "us": "u", "ms": "ms", "s": "s"}

_PARTIAL = "partial write of line protocol occurred"
_PARSE_FAILED = "parsing failed for write_lp endpoint"
_UNABLE = "unable to parse '"
_DROPPED = re.compile(r"\s*dropped=\d+\s*$")
_TIMESTAMP = re.compile(rb"(?<!\\) (-?\d+)[ \t\r]*$")
_HEADERS_OF_INTEREST = (
    "Content-Encoding",
    "Content-Type",
    "Content-Length",
    "Accept",
    "Accept-Encoding",
    "User-Agent",
)


# -- faults -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One queued answer: `status` instead of forwarding (None: forward), after `delay` s."""

    status: int | None = None
    retry_after: int | float | str | None = None
    body: str | None = None
    delay: float = 0.0


class Faults:
    """A thread-safe FIFO of `Fault`s; each write request takes the next one, if any."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[Fault] = collections.deque()
        self._stopping = threading.Event()
        self.taken = 0  # how many write requests got a fault so far

    def add(
        self,
        status: int,
        count: int = 1,
        retry_after: int | float | str | None = None,
        body: str | None = None,
        delay: float = 0.0,
    ) -> None:
        """Answer the next `count` write requests with `status` (after `delay` seconds).

        `retry_after` becomes a ``Retry-After`` header; `body` the response body (default: a
        JSON ``{"error": ...}``). The write is not forwarded: nothing is stored.
        """
        if not 100 <= status <= 599:
            raise ValueError(f"not an HTTP status: {status}")
        self._put(Fault(status, retry_after, body, float(delay)), count)

    def delay(self, seconds: float, count: int = 1) -> None:
        """Make the next `count` write requests wait `seconds`, then forward them as usual."""
        self._put(Fault(delay=float(seconds)), count)

    def clear(self) -> None:
        """Drop every queued fault."""
        with self._lock:
            self._queue.clear()

    @property
    def pending(self) -> list[Fault]:
        """The faults still queued, next first."""
        with self._lock:
            return list(self._queue)

    def take(self) -> Fault | None:
        """The next fault (removed from the queue), or None; called once per write request."""
        with self._lock:
            if not self._queue:
                return None
            self.taken += 1
            return self._queue.popleft()

    def sleep(self, seconds: float) -> None:
        """Sleep `seconds`, or less if the front is stopping."""
        if seconds > 0:
            self._stopping.wait(seconds)

    def from_json(self, spec: dict[str, Any]) -> None:
        """Queue what ``POST /__faults`` received (one object)."""
        count = int(spec.get("count", 1))
        if spec.get("status") is None:
            self.delay(float(spec.get("delay", 0.0)), count)
        else:
            self.add(
                int(spec["status"]),
                count,
                spec.get("retry_after"),
                spec.get("body"),
                float(spec.get("delay", 0.0)),
            )

    def _put(self, fault: Fault, count: int) -> None:
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        with self._lock:
            self._queue.extend([fault] * count)


def post_fault(front_url: str, timeout: float = 10.0, **spec: Any) -> None:
    """Queue a fault on the front at `front_url` from any process (``POST /__faults``).

    `spec` is `Faults.add`'s arguments (``status=503, count=2``) or ``delay=..., count=...``.
    """
    request = urllib.request.Request(
        front_url.rstrip("/") + FAULTS_PATH,
        data=json.dumps(spec).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()


# -- what the front received --------------------------------------------------------------


@dataclass(frozen=True)
class FrontRequest:
    """One request the front answered (``/__faults`` calls are not recorded)."""

    method: str
    path: str
    params: dict[str, str]  # query parameters (last value of each)
    headers: dict[str, str]  # Content-Encoding, Content-Type, Accept, User-Agent, ...
    auth: str | None  # "Token ***" / "Bearer ***" (scheme only), None when absent
    auth_ok: bool
    gzip: bool
    body_bytes: int  # as received (compressed when gzip)
    lp_bytes: int  # after gunzip
    lines: int  # non-blank lines of line protocol
    status: int  # what the front answered
    injected: bool  # answered by a queued fault, not by the 1.x server
    started: float  # time.time() when the request arrived
    seconds: float  # time to answer
    error: str | None = None  # the error message sent back, if any

    @property
    def is_write(self) -> bool:
        return self.method == "POST" and self.path in (V3_WRITE, V2_WRITE, V1_WRITE)

    @property
    def database(self) -> str | None:
        return self.params.get("db") or self.params.get("bucket")

    def __getitem__(self, key: str) -> Any:
        """Dict-style access too: ``request["lines"]``, ``request["database"]``."""
        if key.startswith("_") or not hasattr(self, key):
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


# -- the server ---------------------------------------------------------------------------


class _Error(Exception):
    """An error answer: HTTP `status` with a JSON body."""

    def __init__(self, status: int, message: str, data: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {"error": message}
        if data is not None:
            self.body["data"] = data


class InfluxFront:
    """The InfluxDB 3 write API on 127.0.0.1, storing into the 1.x server at `backend_url`.

    ``start()`` (or ``with``) binds a free port (or `port`) and serves from a background
    thread of this process; ``stop()`` closes it and every connection it has open.
    """

    def __init__(
        self,
        backend_url: str,
        token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        auto_create_databases: bool = False,
        backend_timeout: float = 60.0,
        max_recorded: int = 10_000,
    ) -> None:
        self.backend_url = backend_url.rstrip("/")
        parsed = urllib.parse.urlsplit(self.backend_url)
        self._backend = (parsed.hostname or "127.0.0.1", parsed.port or 8086)
        self.token = token or secrets.token_urlsafe(24)
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.auto_create_databases = auto_create_databases
        self.backend_timeout = backend_timeout
        self.faults = Faults()
        # InfluxDB 1.x before 1.8.10 (Debian ships 1.6) can create two overlapping shard
        # groups when two writes to one database need a new group at the same time, and then
        # silently drops one write's points (influxdata/influxdb#21946, #22604): a 204 for
        # points no query ever finds. The front therefore forwards one write at a time per
        # database; different databases still go in parallel.
        self._database_locks: collections.defaultdict[str, threading.Lock] = (
            collections.defaultdict(threading.Lock)
        )
        self._database_locks_lock = threading.Lock()
        self._recorded: collections.deque[FrontRequest] = collections.deque(maxlen=max_recorded)
        self._recorded_lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL of the front, e.g. ``http://127.0.0.1:PORT`` (the client's `host`)."""
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[FrontRequest]:
        """The write requests answered so far, oldest first (faulted ones included)."""
        return [r for r in self.all_requests if r.is_write]

    @property
    def writes(self) -> list[FrontRequest]:
        """Same as `requests`."""
        return self.requests

    @property
    def all_requests(self) -> list[FrontRequest]:
        """Every request answered so far (also /ping, /health, 404s), the last `max_recorded`."""
        with self._recorded_lock:
            return list(self._recorded)

    def clear_requests(self) -> None:
        with self._recorded_lock:
            self._recorded.clear()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> InfluxFront:
        if self._httpd is not None:
            raise RuntimeError("InfluxFront is already started")
        self.faults._stopping.clear()
        handler = type("_BoundHandler", (_Handler,), {"front": self})
        self._httpd = _Server((self.host, self.port), handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"influx-front-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close open connections, wait for the request threads (5 s max)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self.faults._stopping.set()  # wake up delayed requests
        httpd.shutdown()
        httpd.close_connections(timeout=5.0)
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def __enter__(self) -> InfluxFront:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- request handling (called from the request threads) -------------------------------

    def record(self, request: FrontRequest) -> None:
        with self._recorded_lock:
            self._recorded.append(request)

    def check_auth(self, header: str | None) -> tuple[str | None, bool]:
        """(masked header, whether it carries our token as ``Token`` or ``Bearer``)."""
        if not header:
            return None, False
        scheme, _, credential = header.strip().partition(" ")
        masked = f"{scheme} ***"
        ok = scheme.lower() in ("token", "bearer") and secrets.compare_digest(
            credential.strip().encode(), self.token.encode()
        )
        return masked, ok

    def forward(self, path: str, params: dict[str, str], body: bytes, version: str) -> None:
        """Store `body` (line protocol) through the 1.x server; raise `_Error` on failure."""
        if version == "v3":
            database = params.get("db")
            precisions, default_precision = V3_PRECISIONS, "auto"
        else:
            database = params.get("bucket") or params.get("db")
            precisions, default_precision = V2_PRECISIONS, "ns"
        if not database:
            raise _Error(400, f"missing query parameter: {'db' if version == 'v3' else 'bucket'}")
        precision_name = params.get("precision", default_precision)
        if precision_name not in precisions:
            raise _Error(
                400,
                f"invalid precision {precision_name!r} for {path} "
                f"(expected one of: {', '.join(precisions)})",
            )
        precision = precisions[precision_name]
        original = body.split(b"\n")
        lines = original if precision is not None else [_to_nanoseconds(x) for x in original]
        payload = b"\n".join(lines)
        status, message = self._post_backend(database, precision or "n", payload)
        if status == 404 and self.auto_create_databases and "database not found" in message:
            self._create_backend_database(database)
            status, message = self._post_backend(database, precision or "n", payload)
        if 200 <= status < 300:
            return
        if status == 400:
            raise _line_errors(message, lines, original)
        if status == 404:
            raise _Error(404, message or "database not found")
        if status == 413:
            raise _Error(413, message or "request body too large")
        if status >= 500:
            raise _Error(500, f"InfluxDB 1.x answered {status}: {message}")
        raise _Error(status, message or _phrase(status))

    def database_lock(self, database: str) -> threading.Lock:
        """The lock a write to `database` holds while influxd stores it (see __init__)."""
        with self._database_locks_lock:
            return self._database_locks[database]

    def _post_backend(self, database: str, precision: str, payload: bytes) -> tuple[int, str]:
        query = urllib.parse.urlencode({"db": database, "precision": precision})
        conn = http.client.HTTPConnection(*self._backend, timeout=self.backend_timeout)
        try:
            with self.database_lock(database):
                conn.request(
                    "POST",
                    f"/write?{query}",
                    body=payload,
                    headers={"Content-Type": "text/plain; charset=utf-8"},
                )
                response = conn.getresponse()
                data = response.read()
        except OSError as exc:
            raise _Error(500, f"InfluxDB 1.x unreachable at {self.backend_url}: {exc}") from exc
        finally:
            conn.close()
        return response.status, _error_text(data)

    def _create_backend_database(self, name: str) -> None:
        quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
        data = urllib.parse.urlencode({"q": f"CREATE DATABASE {quoted}"}).encode()
        try:
            with urllib.request.urlopen(
                f"{self.backend_url}/query", data=data, timeout=self.backend_timeout
            ) as response:
                response.read()
        except OSError as exc:
            raise _Error(500, f"could not create database {name!r} in InfluxDB 1.x: {exc}") from exc


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that keeps track of its connections and threads, to close them."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._live_lock = threading.Lock()
        self._live: dict[socket.socket, threading.Thread] = {}
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"influx-front-conn-{client_address[1]}",
            daemon=True,
        )
        with self._live_lock:
            self._live[request] = thread
        thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client gone away is no news
            super().handle_error(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._live_lock:
            self._live.pop(request, None)
        super().shutdown_request(request)

    def close_connections(self, timeout: float) -> None:
        with self._live_lock:
            live = list(self._live.items())
        for sock, _ in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for _, thread in live:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


class _Handler(BaseHTTPRequestHandler):
    front: InfluxFront
    protocol_version = "HTTP/1.1"  # keep-alive, as InfluxDB does
    server_version = "quixsinks-influx-front"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- dispatch -------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        started, t0 = time.time(), time.monotonic()
        url = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        try:
            body = self._read_body()
        except _Error as exc:  # body unreadable: answer and drop the connection
            self.close_connection = True
            self._send(*_json_reply(exc.status, exc.body))
            return
        if url.path == FAULTS_PATH:
            self._send(*self._faults_api(body))
            return
        masked, auth_ok = self.front.check_auth(self.headers.get("Authorization"))
        info: dict[str, Any] = {"gzip": False, "lp_bytes": len(body), "lines": 0}
        info.update(injected=False, error=None)
        try:
            status, payload, headers = self._answer(url.path, params, body, auth_ok, info)
        except Exception as exc:  # a bug of the front: say so rather than drop the connection
            status, payload, headers = _error_reply(info, _Error(500, f"front error: {exc!r}"))
        self.front.record(  # before answering: the client sees it recorded once answered
            FrontRequest(
                method=self.command,
                path=url.path,
                params=params,
                headers={h: v for h in _HEADERS_OF_INTEREST if (v := self.headers.get(h))},
                auth=masked,
                auth_ok=auth_ok,
                gzip=info["gzip"],
                body_bytes=len(body),
                lp_bytes=info["lp_bytes"],
                lines=info["lines"],
                status=status,
                injected=info["injected"],
                started=started,
                seconds=time.monotonic() - t0,
                error=info["error"],
            )
        )
        self._send(status, payload, headers)

    def _answer(
        self, path: str, params: dict[str, str], body: bytes, auth_ok: bool, info: dict[str, Any]
    ) -> _Reply:
        """The answer to the request (sent by the caller)."""
        if path in ("/ping", "/health") and self.command in ("GET", "HEAD"):
            if path == "/ping":
                return 204, b"", {}
            return _json_reply(200, {"name": "influxdb3", "status": "pass"})
        if path == V1_WRITE and self.command == "POST":
            return self._pass_v1_write(body, params, info)
        if path not in (V3_WRITE, V2_WRITE):
            if path.startswith("/api/v3/query") or path in ("/query", "/api/v2/query"):
                message = "queries are not supported by the stand-in; use InfluxServer.query()"
                return _error_reply(info, _Error(501, message))
            return _error_reply(info, _Error(404, f"not found: {path}"))
        if self.command != "POST":
            return _error_reply(info, _Error(405, "method not allowed"))

        lp: bytes | None = None
        decode_error: _Error | None = None
        try:
            lp = self._decode_body(body, info)
            info["lines"] = sum(1 for line in lp.split(b"\n") if line.strip())
        except _Error as exc:
            decode_error = exc
        fault = self.front.faults.take()
        if fault is not None:
            self.front.faults.sleep(fault.delay)
            if fault.status is not None:
                info["injected"] = True
                return _fault_reply(fault, info)
        if not auth_ok:
            return _error_reply(info, _Error(401, "unauthorized access"))
        try:
            if decode_error is not None:
                raise decode_error
            assert lp is not None
            self.front.forward(path, params, lp, "v3" if path == V3_WRITE else "v2")
        except _Error as exc:
            return _error_reply(info, exc)
        return 204, b"", {}

    def _pass_v1_write(self, body: bytes, params: dict[str, str], info: dict[str, Any]) -> _Reply:
        """``POST /write`` (1.x): a queued fault, or the 1.x server's own answer (its
        credentials check included: the Authorization header and query go through)."""
        with contextlib.suppress(_Error):
            lp = self._decode_body(body, info)
            info["lines"] = sum(1 for line in lp.split(b"\n") if line.strip())
        fault = self.front.faults.take()
        if fault is not None:
            self.front.faults.sleep(fault.delay)
            if fault.status is not None:
                info["injected"] = True
                return _fault_reply(fault, info)
        headers = {
            h: v for h in ("Authorization", "Content-Encoding") if (v := self.headers.get(h))
        }
        headers["Content-Type"] = self.headers.get("Content-Type", "text/plain")
        conn = http.client.HTTPConnection(*self.front._backend, timeout=self.front.backend_timeout)
        try:
            with self.front.database_lock(params.get("db", "")):
                conn.request("POST", self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
        except OSError as exc:
            return _error_reply(info, _Error(500, f"InfluxDB 1.x unreachable: {exc}"))
        finally:
            conn.close()
        if response.status >= 300:
            info["error"] = _error_text(data)
        passed = {
            h: v for h in ("Content-Type", "X-Influxdb-Error") if (v := response.getheader(h))
        }
        return response.status, data, passed

    def _faults_api(self, body: bytes) -> _Reply:
        faults = self.front.faults
        try:
            if self.command == "POST":
                spec = json.loads(body or b"{}")
                for one in spec if isinstance(spec, list) else [spec]:
                    faults.from_json(one)
            elif self.command == "DELETE":
                faults.clear()
            elif self.command != "GET":
                raise ValueError(f"method {self.command} not allowed on {FAULTS_PATH}")
        except (ValueError, TypeError, KeyError) as exc:
            return _json_reply(400, {"error": f"bad fault: {exc}"})
        pending = [asdict(f) for f in faults.pending]
        return _json_reply(200, {"pending": pending, "taken": faults.taken})

    # -- bodies ---------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise _Error(400, "bad Content-Length") from None
        if length > self.front.max_body_bytes:
            raise _Error(413, f"request body exceeds {self.front.max_body_bytes} bytes")
        return self.rfile.read(length) if length > 0 else b""

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline().strip():  # trailers
                    pass
                return b"".join(parts)
            total += size
            if total > self.front.max_body_bytes:
                raise _Error(413, f"request body exceeds {self.front.max_body_bytes} bytes")
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _decode_body(self, body: bytes, info: dict[str, Any]) -> bytes:
        encoding = self.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding in ("", "identity"):
            return body
        if encoding != "gzip":
            raise _Error(415, f"unsupported Content-Encoding: {encoding}")
        info["gzip"] = True
        try:
            # bounded gunzip: stop one byte past the limit
            decomp = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            data = decomp.decompress(body, self.front.max_body_bytes + 1)
        except zlib.error as exc:
            raise _Error(400, f"invalid gzip body: {exc}") from exc
        if len(data) > self.front.max_body_bytes:
            raise _Error(413, f"decompressed body exceeds {self.front.max_body_bytes} bytes")
        if not decomp.eof:
            raise _Error(400, "invalid gzip body: truncated")
        info["lp_bytes"] = len(data)
        return data

    # -- answers --------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("X-Influxdb-Version", VERSION)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)


_Reply = tuple[int, bytes, dict[str, str]]  # status, body, headers


def _json_reply(status: int, obj: Any, headers: dict[str, str] | None = None) -> _Reply:
    return status, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})}


def _error_reply(info: dict[str, Any], exc: _Error) -> _Reply:
    info["error"] = str(exc)
    return _json_reply(exc.status, exc.body)


def _fault_reply(fault: Fault, info: dict[str, Any]) -> _Reply:
    status = fault.status or 500
    headers = {}
    if fault.retry_after is not None:
        headers["Retry-After"] = str(fault.retry_after)
    if fault.body is None:
        message = f"{_phrase(status).lower()} (injected)"
        info["error"] = message
        return _json_reply(status, {"error": message}, headers)
    info["error"] = fault.body
    is_json = fault.body.lstrip()[:1] in ("{", "[")
    headers["Content-Type"] = "application/json" if is_json else "text/plain; charset=utf-8"
    return status, fault.body.encode(), headers


# -- helpers ------------------------------------------------------------------------------


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def _error_text(data: bytes) -> str:
    """The ``error`` of a 1.x JSON error body, or the body itself."""
    text = data.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return text
    if isinstance(obj, dict) and isinstance(obj.get("error"), str):
        return str(obj["error"])
    return text


def _line_errors(message: str, sent: list[bytes], original: list[bytes]) -> _Error:
    """A 1.x 400 answer as an InfluxDB 3 write error with per-line ``data``.

    1.x: ``[partial write: ]unable to parse '<line>': <why>\\n... dropped=N`` or
    ``partial write: field type conflict: ... dropped=N``. Lines are found back by their text
    (1-based ``line_number``); errors that name no line get only ``error_message``.
    """
    partial = message.startswith("partial write:")
    text = _DROPPED.sub("", message.removeprefix("partial write:").strip())
    index: dict[str, int] | None = None
    data: list[dict[str, Any]] = []
    for segment in filter(None, (s.strip() for s in text.split("\n"))):
        if not segment.startswith(_UNABLE):
            data.append({"error_message": segment})
            continue
        if index is None:
            index = {}
            for number, line in enumerate(sent, start=1):
                index.setdefault(line.decode("utf-8", errors="replace").strip(), number)
        rest = segment[len(_UNABLE) :]
        for line_text, number in _candidates(rest, index):
            data.append(
                {
                    "original_line": original[number - 1].decode("utf-8", errors="replace"),
                    "line_number": number,
                    "error_message": rest[len(line_text) + 3 :],
                }
            )
            break
        else:
            data.append({"error_message": segment})
    return _Error(400, _PARTIAL if partial else _PARSE_FAILED, data)


def _candidates(rest: str, index: dict[str, int]) -> list[tuple[str, int]]:
    """Lines `rest` (``<line>': <why>``) can start with, longest first."""
    found = []
    position = rest.find("': ")
    while position != -1:
        line_text = rest[:position]
        if line_text in index:
            found.append((line_text, index[line_text]))
        position = rest.find("': ", position + 1)
    return sorted(found, key=lambda item: -len(item[0]))


def _to_nanoseconds(line: bytes) -> bytes:
    """`line` with its timestamp in nanoseconds, its precision guessed as InfluxDB 3 does."""
    match = _TIMESTAMP.search(line)
    if match is None or line.lstrip().startswith(b"#"):
        return line
    value = int(match.group(1))
    magnitude = abs(value) // 1_000_000_000
    if magnitude < 5:
        factor = 1_000_000_000  # seconds
    elif magnitude < 5_000:
        factor = 1_000_000  # milliseconds
    elif magnitude < 5_000_000:
        factor = 1_000  # microseconds
    else:
        factor = 1
    return line[: match.start(1)] + str(value * factor).encode()


def gzip_body(lines: str | bytes) -> bytes:
    """`lines` gzip-compressed (for hand-made requests in tests)."""
    return gzip.compress(lines.encode() if isinstance(lines, str) else lines)


def fetch_faults(front_url: str, timeout: float = 10.0) -> dict[str, Any]:
    """``GET /__faults`` of the front at `front_url`: what is still queued."""
    with urllib.request.urlopen(front_url.rstrip("/") + FAULTS_PATH, timeout=timeout) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


__all__ = [
    "V1_WRITE",
    "V2_WRITE",
    "V3_WRITE",
    "Fault",
    "Faults",
    "FrontRequest",
    "InfluxFront",
    "fetch_faults",
    "gzip_body",
    "post_fault",
]
