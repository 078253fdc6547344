"""An Iceberg REST catalog stand-in: pyiceberg's own REST models over a SqlCatalog.

No Iceberg REST catalog server is installable here (Apache Polaris, Lakekeeper, Nessie and
Tabular's reference server are JVM or Rust binaries or containers). This server speaks the
subset of the REST protocol that pyiceberg's ``RestCatalog`` uses for namespaces, table
create (staged or not), load and commit, parsing and answering with pyiceberg's request and
response models, and keeps the tables in a SQLite ``SqlCatalog`` in a temporary folder
(so a commit is as atomic as the SqlCatalog's: one UPDATE ... WHERE metadata_location).

With ``token``, every request must carry ``Authorization: Bearer <token>`` (else 401, as
a catalog with token auth answers), which is how pyiceberg sends a ``token`` property.

Faults: :meth:`IcebergRestServer.fail_next_commits` makes the next commits answer 409
without applying them, or 500/502/504 *after* applying them (a lost response: the client
sees ``CommitStateUnknownException`` although the commit landed).
:meth:`IcebergRestServer.hang_next_commits` makes the next commits hang: the request is read
and never answered (nor applied) until :meth:`IcebergRestServer.release_hung` or the server
stops, at most ``HANG_SECONDS``: a catalog that hangs in the driver's commit while the
rest of the protocol (config, load) still answers.

    with IcebergRestServer() as rest:
        options = {"catalog_type": "rest", "catalog_uri": rest.url, ...}
"""

from __future__ import annotations

import http.server
import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = ["IcebergRestServer"]

_SEPARATOR = "\x1f"
#: the longest a hung commit is held (a test that forgot to release it)
HANG_SECONDS = 120.0


class _Named:
    """What SqlCatalog.commit_table needs of a table: its name."""

    def __init__(self, identifier: tuple[str, ...]) -> None:
        self._identifier = identifier

    def name(self) -> tuple[str, ...]:
        return self._identifier


class IcebergRestServer:
    """A REST catalog on a free port of 127.0.0.1, served from a thread of this process."""

    def __init__(self, token: str | None = None, properties: dict[str, str] | None = None) -> None:
        """``properties``: more SqlCatalog properties, e.g. the S3 endpoint and keys of the
        object store the tables live on (a real catalog has its own storage credentials)."""
        self.token = token
        self.properties = dict(properties or {})
        self.unauthorized = 0  # requests refused for a missing or wrong token
        self.root = Path(tempfile.mkdtemp(prefix="quixsinks-iceberg-rest-"))
        self.warehouse = f"file://{self.root}/warehouse"
        self._faults: list[int] = []
        self._lock = threading.Lock()
        self.commits = 0
        self.hung = 0  # commits held without an answer so far
        self._hang = 0
        self._release = threading.Event()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._catalog: Any = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> IcebergRestServer:
        from pyiceberg.catalog.sql import SqlCatalog

        (self.root / "warehouse").mkdir()
        self._catalog = SqlCatalog(
            "rest",
            uri=f"sqlite:///{self.root}/catalog.db",
            warehouse=self.warehouse,
            **self.properties,
        )
        handler = type("Handler", (_Handler,), {"rest": self})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_hung()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def catalog(self) -> Any:
        """The SqlCatalog behind the server (to read tables back in tests)."""
        return self._catalog

    def fail_next_commits(self, *statuses: int) -> None:
        """409: refuse the next commit; 500/502/504: apply it, then answer that status."""
        with self._lock:
            self._faults.extend(statuses)

    def _next_fault(self) -> int | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    def hang_next_commits(self, count: int = 1_000_000) -> None:
        """Hold the next ``count`` commits (default: all) unanswered and unapplied."""
        with self._lock:
            self._hang = count
            self._release.clear()

    def release_hung(self) -> None:
        """Stop hanging: held commits end without an answer (the connection closes)."""
        with self._lock:
            self._hang = 0
        self._release.set()

    def _take_hang(self) -> bool:
        with self._lock:
            if self._hang <= 0:
                return False
            self._hang -= 1
            self.hung += 1
            return True


class _Handler(http.server.BaseHTTPRequestHandler):
    rest: IcebergRestServer

    def log_message(self, *args: Any) -> None:
        pass

    # ------------------------------------------------------------------ plumbing

    def _parts(self) -> list[str]:
        path = urlparse(self.path).path
        parts = [unquote(p) for p in path.strip("/").split("/")]
        return parts[1:] if parts and parts[0] == "v1" else parts

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: Any = None) -> None:
        body = (
            b""
            if payload is None
            else (payload if isinstance(payload, bytes) else json.dumps(payload).encode())
        )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, kind: str, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def _table_response(self, table: Any) -> bytes:
        from pyiceberg.catalog.rest import TableResponse

        response = TableResponse(
            **{"metadata-location": table.metadata_location, "metadata": table.metadata}
        )
        return response.model_dump_json().encode()

    # ------------------------------------------------------------------ routes

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def do_DELETE(self) -> None:
        self._route()

    def _route(self) -> None:
        from pyiceberg.exceptions import (
            CommitFailedException,
            NamespaceAlreadyExistsError,
            NoSuchNamespaceError,
            NoSuchTableError,
            TableAlreadyExistsError,
        )

        catalog = self.rest.catalog
        parts = self._parts()
        method = self.command
        if self.rest.token is not None and (
            self.headers.get("Authorization") != f"Bearer {self.rest.token}"
        ):
            self.rest.unauthorized += 1
            return self._error(401, "NotAuthorizedException", "missing or wrong bearer token")
        try:
            if parts == ["config"]:
                return self._send(200, {"defaults": {}, "overrides": {}})
            if parts == ["namespaces"] and method == "POST":
                request = json.loads(self._body())
                catalog.create_namespace(tuple(request["namespace"]), request.get("properties", {}))
                return self._send(200, {"namespace": request["namespace"], "properties": {}})
            if len(parts) == 2 and parts[0] == "namespaces":
                namespace = tuple(parts[1].split(_SEPARATOR))
                if not catalog.namespace_exists(namespace):
                    return self._error(404, "NoSuchNamespaceException", str(namespace))
                return self._send(
                    204 if method == "HEAD" else 200,
                    None if method == "HEAD" else {"namespace": list(namespace), "properties": {}},
                )
            if len(parts) == 3 and parts[0] == "namespaces" and parts[2] == "tables":
                return self._create(tuple(parts[1].split(_SEPARATOR)))
            if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "tables":
                identifier = (*parts[1].split(_SEPARATOR), parts[3])
                if method == "POST":
                    return self._commit(identifier)
                table = catalog.load_table(identifier)
                if method == "HEAD":
                    return self._send(204)
                return self._send(200, self._table_response(table))
            return self._error(404, "NotFound", f"no route for {method} {self.path}")
        except NoSuchTableError as exc:
            return self._error(404, "NoSuchTableException", str(exc))
        except NoSuchNamespaceError as exc:
            return self._error(404, "NoSuchNamespaceException", str(exc))
        except (NamespaceAlreadyExistsError, TableAlreadyExistsError) as exc:
            return self._error(409, "AlreadyExistsException", str(exc))
        except CommitFailedException as exc:
            return self._error(409, "CommitFailedException", str(exc))

    def _create(self, namespace: tuple[str, ...]) -> None:
        from pyiceberg.catalog.rest import CreateTableRequest, TableResponse
        from pyiceberg.table.metadata import new_table_metadata

        catalog = self.rest.catalog
        raw = {"location": None, "partition-spec": None, "write-order": None}
        raw.update(json.loads(self._body()))  # the client leaves out what is None
        request = CreateTableRequest.model_validate(raw)
        identifier = (*namespace, request.name)
        if catalog.table_exists(identifier):
            return self._error(409, "AlreadyExistsException", f"{identifier} exists")
        if not request.stage_create:
            table = catalog.create_table(
                identifier,
                schema=request.table_schema,
                location=request.location,
                partition_spec=request.partition_spec,
                sort_order=request.write_order,
                properties=request.properties,
            )
            return self._send(200, self._table_response(table))
        location = request.location or f"{self.rest.warehouse}/{'/'.join(identifier)}"
        metadata = new_table_metadata(
            request.table_schema,
            request.partition_spec,
            request.write_order,
            location,
            request.properties,
        )
        return self._send(200, TableResponse(metadata=metadata).model_dump_json().encode())

    def _commit(self, identifier: tuple[str, ...]) -> None:
        from pyiceberg.catalog.rest import CommitTableRequest

        request = CommitTableRequest.model_validate_json(self._body())
        if self.rest._take_hang():
            self.rest._release.wait(HANG_SECONDS)
            self.close_connection = True
            return None
        fault = self.rest._next_fault()
        if fault == 409:
            return self._error(409, "CommitFailedException", "injected conflict")
        response = self.rest.catalog.commit_table(
            _Named(identifier), request.requirements, request.updates
        )
        self.rest.commits += 1
        if fault is not None:
            return self._error(fault, "ServiceFailureException", "injected lost response")
        return self._send(200, response.model_dump_json().encode())
