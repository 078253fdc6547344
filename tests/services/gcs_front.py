"""An HTTP front for gcp-storage-emulator: what the emulator lacks, for the integration tests.

gcp-storage-emulator speaks the GCS JSON API well enough for the SDK, but it ignores
preconditions (``ifGenerationMatch``), returns every object of a listing in one page,
accepts any credentials (or none) and cannot be made to throttle. :class:`GCSFront` sits
between the client and the emulator (both on 127.0.0.1) and adds, as real GCS does:

* **preconditions**: ``ifGenerationMatch`` on uploads (single-request and resumable, checked
  when the upload starts and on every chunk, the last included) and on rewrite/copy
  destinations, answered ``412 conditionNotMet``; writes are serialised, so a check and its
  write are atomic;
* **pagination**: ``objects.list`` pages of at most 1,000 items (``maxResults``,
  ``pageToken``, ``nextPageToken``);
* **404 bodies**: "The specified bucket does not exist." vs "No such object: b/o";
* **authentication**: a token endpoint (``POST /token``, the OAuth JWT-bearer grant that
  service-account credentials use) that checks the assertion's signature against the public
  keys registered with :meth:`register_account`, and Bearer-token checks on every call:
  401 for an unknown token (or none, with ``require_auth``), 403 for a write with a
  read-only account's token;
* **faults**: :meth:`inject` answers the next N requests with a status (429, 503...) and an
  optional ``Retry-After``.

It runs in a thread of the process that starts it (see ``gcs_emulator.py``).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import secrets
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from .common import InProcessHTTPServer

__all__ = ["GCSFront"]

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "authorization",
    "proxy-connection",
    "te",
    "upgrade",
}
_LIST = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o$")
_OBJECT = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<name>.+)$")
_UPLOAD = re.compile(r"^/upload/storage/v1/b/(?P<bucket>[^/]+)/o$")
_COPY = re.compile(
    r"^/storage/v1/b/[^/]+/o/.+/(?:rewriteTo|copyTo)/b/(?P<bucket>[^/]+)/o/(?P<name>.+)$"
)
PAGE_LIMIT = 1000


@dataclass
class _Fault:
    status: int
    count: int
    retry_after: str | None
    methods: frozenset[str] | None


class GCSFront(InProcessHTTPServer):
    """The front; ``start()`` serves on ``url`` (127.0.0.1, a free port) until ``stop()``.

    Args:
        upstream: the emulator's base URL, ``http://127.0.0.1:PORT``.
        require_auth: refuse requests without a Bearer token (as GCS does for a private
            bucket); tokens come from the front's own token endpoint.
    """

    def __init__(self, upstream: str, *, require_auth: bool = True) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.require_auth = require_auth
        self.accounts: dict[str, tuple[str, bool]] = {}  # email -> (public key PEM, read_only)
        self.tokens: dict[str, tuple[str, bool]] = {}  # token -> (email, read_only)
        self.faults: list[_Fault] = []
        self.requests_seen = 0
        self.list_pages = 0  # objects.list pages served
        self.methods_seen: list[str] = []  # "METHOD path" of every storage request, in order
        self._lock = threading.Lock()  # state above
        self._write_lock = threading.Lock()  # serialises writes: precondition + write atomic
        self._uploads: dict[str, tuple[str, str, str]] = {}  # upload_id -> bucket, name, gen

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("GCSFront is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    def start(self) -> GCSFront:
        front = self

        class Handler(_Handler):
            pass

        Handler.front = front
        self.serve(Handler, name="gcs-front")
        return self

    # -- test controls ----------------------------------------------------------------------

    def register_account(self, email: str, public_key_pem: str, *, read_only: bool = False) -> None:
        with self._lock:
            self.accounts[email] = (public_key_pem, read_only)

    def inject(
        self,
        status: int,
        count: int = 1,
        *,
        retry_after: float | None = None,
        methods: tuple[str, ...] | None = None,
    ) -> None:
        """Answer the next ``count`` requests (of ``methods``, default any) with ``status``."""
        with self._lock:
            self.faults.append(
                _Fault(
                    status,
                    count,
                    None if retry_after is None else f"{retry_after:g}",
                    frozenset(m.upper() for m in methods) if methods else None,
                )
            )

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def _take_fault(self, method: str) -> _Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.count > 0 and (fault.methods is None or method in fault.methods):
                    fault.count -= 1
                    return fault
            self.faults = [f for f in self.faults if f.count > 0]
            return None

    # -- token endpoint ---------------------------------------------------------------------

    def issue_token(self, assertion: str) -> tuple[int, dict[str, Any]]:
        from google.auth import jwt

        try:
            claims = jwt.decode(assertion, verify=False)
            email = str(claims.get("iss", ""))
            with self._lock:
                account = self.accounts.get(email)
            if account is None:
                raise ValueError("unknown account")
            # google-auth addresses the assertion to Google's token URI whatever token_uri is
            audience = [self.token_uri, "https://oauth2.googleapis.com/token"]
            jwt.decode(assertion, certs=account[0], verify=True, audience=audience)
        except Exception:
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        token = "qsfront-" + secrets.token_urlsafe(24)
        with self._lock:
            self.tokens[token] = (email, account[1])
        return 200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}

    # -- upstream -----------------------------------------------------------------------------

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            return response.status, response.getheaders(), data
        finally:
            conn.close()

    def generation(self, bucket: str, name: str, host: str) -> str | None:
        """The object's live generation, "0" if it does not exist, None if no bucket."""
        path = f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}"
        status, _, data = self.forward("GET", path, {"Host": host}, b"")
        if status == 200:
            return str(json.loads(data)["generation"])
        return "0" if self.bucket_exists(bucket, host) else None

    def bucket_exists(self, bucket: str, host: str) -> bool:
        status, _, _ = self.forward("GET", f"/storage/v1/b/{bucket}", {"Host": host}, b"")
        return status == 200


def _error(code: int, message: str, reason: str) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"domain": "global", "reason": reason, "message": message}],
        }
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: without this, Nagle's algorithm and the
    # client's delayed ACK add 40 ms to every answer
    disable_nagle_algorithm = True
    front: GCSFront

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    # -- plumbing -----------------------------------------------------------------------------

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self,
        status: int,
        body: bytes | dict[str, Any] = b"",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        self.send_response(status)
        sent_type = False
        for name, value in headers or []:
            if name.lower() in _HOP_BY_HOP or name.lower() in ("server", "date"):
                continue
            sent_type = sent_type or name.lower() == "content-type"
            self.send_header(name, value)
        if isinstance(body, dict) and not sent_type:
            self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _upstream_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}

    # -- the request ---------------------------------------------------------------------------

    def _handle(self, method: str) -> None:
        front = self.front
        body = self._body()
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        with front._lock:
            front.requests_seen += 1
        if parts.path == "/token" and method == "POST":
            form = parse_qs(body.decode())
            status, answer = front.issue_token(form.get("assertion", [""])[0])
            return self._send(status, answer)
        if parts.path == "/" and method == "GET":  # health check
            return self._send(200, b"OK")

        with front._lock:
            front.methods_seen.append(f"{method} {parts.path}")
        read_only = self._authenticate()
        if read_only is None:
            return None
        fault = front._take_fault(method)
        if fault is not None:
            extra = [("Retry-After", fault.retry_after)] if fault.retry_after else []
            message = "The rate of change requests to the object is too high (injected)."
            reason = "rateLimitExceeded" if fault.status == 429 else "backendError"
            return self._send(fault.status, _error(fault.status, message, reason), extra)
        if read_only and method != "GET":
            return self._send(
                403,
                _error(
                    403,
                    "The caller does not have storage.objects.create access to the Google "
                    "Cloud Storage object (read-only test account).",
                    "forbidden",
                ),
            )
        if method == "GET":
            listing = _LIST.match(parts.path)
            if listing:
                return self._list(listing["bucket"], parts.path, query)
            return self._relay(method, body)
        with front._write_lock:
            return self._write(method, parts.path, query, body)

    def _authenticate(self) -> bool | None:
        """The caller's read-only flag, or None after answering 401."""
        header = self.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            with self.front._lock:
                known = self.front.tokens.get(header[len("Bearer ") :])
            if known is not None:
                return known[1]
        elif not header and not self.front.require_auth:
            return False
        self._send(401, _error(401, "Invalid Credentials", "authError"))
        return None

    def _relay(self, method: str, body: bytes) -> None:
        status, headers, data = self.front.forward(
            method, self.path, self._upstream_headers(), body
        )
        if status == 404 and not data:
            data = json.dumps(self._not_found_body()).encode()
            headers = [("Content-Type", "application/json; charset=UTF-8")]
        self._send(status, data, headers)

    def _not_found_body(self) -> dict[str, Any]:
        path = urlsplit(self.path).path
        match = re.match(r"^(?:/upload|/download)?/storage/v1/b/(?P<bucket>[^/]+)", path)
        if match and not self.front.bucket_exists(match["bucket"], self.headers["Host"]):
            return _error(404, "The specified bucket does not exist.", "notFound")
        obj = _OBJECT.match(path)
        name = unquote(obj["name"]) if obj else "?"
        bucket = match["bucket"] if match else "?"
        return _error(404, f"No such object: {bucket}/{name}", "notFound")

    def _list(self, bucket: str, path: str, query: dict[str, list[str]]) -> None:
        limit = min(int(query.pop("maxResults", [str(PAGE_LIMIT)])[0]), PAGE_LIMIT)
        token = query.pop("pageToken", [""])[0]
        after = base64.urlsafe_b64decode(token.encode()).decode() if token else None
        query.pop("fields", None)  # the front needs the whole resource to page it
        upstream = f"{path}?{urlencode(query, doseq=True)}"
        status, headers, data = self.front.forward("GET", upstream, self._upstream_headers(), b"")
        if status != 200:
            if status == 404:
                return self._send(
                    404, _error(404, "The specified bucket does not exist.", "notFound")
                )
            return self._send(status, data, headers)
        listing = json.loads(data)
        with self.front._lock:
            self.front.list_pages += 1
        items = sorted(listing.get("items") or [], key=lambda item: item["name"])
        if after is not None:
            items = [item for item in items if item["name"] > after]
        page: dict[str, Any] = {"kind": "storage#objects", "items": items[:limit]}
        if not token:
            page["prefixes"] = listing.get("prefixes") or []
        if len(items) > limit:
            page["nextPageToken"] = base64.urlsafe_b64encode(
                items[limit - 1]["name"].encode()
            ).decode()
        return self._send(200, page)

    def _write(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> None:
        front = self.front
        host = self.headers["Host"]
        target = self._precondition_target(method, path, query, body)
        if target is not None:
            bucket, name, expected = target
            current = front.generation(bucket, name, host)
            if current is None:
                return self._send(
                    404, _error(404, "The specified bucket does not exist.", "notFound")
                )
            if current != expected:
                if "upload_id" in query:
                    front._uploads.pop(query["upload_id"][0], None)
                return self._send(
                    412,
                    _error(
                        412,
                        "At least one of the pre-conditions you specified did not hold.",
                        "conditionNotMet",
                    ),
                )
        status, headers, data = front.forward(method, self.path, self._upstream_headers(), body)
        if target is not None and query.get("uploadType") == ["resumable"] and method == "POST":
            location = dict((k.lower(), v) for k, v in headers).get("location", "")
            upload_id = parse_qs(urlsplit(location).query).get("upload_id", [""])[0]
            if upload_id:
                front._uploads[upload_id] = target
        if status == 404 and not data:
            data = json.dumps(self._not_found_body()).encode()
            headers = [("Content-Type", "application/json; charset=UTF-8")]
        self._send(status, data, headers)

    def _precondition_target(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes
    ) -> tuple[str, str, str] | None:
        """(bucket, object name, expected generation) of a conditional write, if any."""
        if method == "PUT" and "upload_id" in query:
            return self.front._uploads.get(query["upload_id"][0])
        expected = query.get("ifGenerationMatch", [None])[0]
        if expected is None or method != "POST":
            return None
        copy = _COPY.match(path)
        if copy:
            return copy["bucket"], unquote(copy["name"]), expected
        upload = _UPLOAD.match(path)
        if not upload:
            return None
        name = query.get("name", [None])[0] or _name_in_body(body)
        if not name:
            return None
        return upload["bucket"], name, expected


def _name_in_body(body: bytes) -> str | None:
    """The object name in an upload's JSON metadata (resumable) or first part (multipart)."""
    text = body.strip()
    if text.startswith(b"{"):
        try:
            return str(json.loads(text)["name"])
        except (ValueError, KeyError):
            return None
    match = re.search(rb"\r?\n\r?\n(\{.*?\})\r?\n--", body, re.DOTALL)
    if not match:
        return None
    try:
        return str(json.loads(match.group(1))["name"])
    except (ValueError, KeyError):
        return None
