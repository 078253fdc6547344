"""A throwaway InfluxDB on 127.0.0.1, with the InfluxDB 3 write API, for integration tests.

No InfluxDB 3 server is packaged for Debian, so `InfluxServer` runs Debian's InfluxDB 1.x
(``influxd``, same line protocol) in a temporary directory and puts `InfluxFront`
(influx_front.py) in front of it: the front speaks the InfluxDB 3 write API (token auth,
``/api/v3/write_lp``, ``/api/v2/write``, gzip, JSON errors) and can inject faults. Read the
stored points back with InfluxQL (`InfluxServer.query`). Install ``influxd`` with
``bash tests/services/install.sh``; README.md lists what the stand-in does not imitate.

Manual use: ``python tests/services/influxdb.py`` starts a server, prints its URLs and token
and keeps it running until Ctrl-C.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

if __package__:
    from .common import Service, free_port, serve_until_interrupted
    from .influx_front import Faults, FrontRequest, InfluxFront
else:  # run as a script: python tests/services/influxdb.py
    from common import (  # type: ignore[no-redef,import-not-found]
        Service,
        free_port,
        serve_until_interrupted,
    )
    from influx_front import Faults, FrontRequest, InfluxFront  # type: ignore[no-redef,import-not-found]

INSTALL_HINT = "bash tests/services/install.sh"
_BIND_FAILED = ("address already in use", "bind: ")


def find_influxd() -> Path:
    """The ``influxd`` (1.x) binary: on ``PATH`` or ``/usr/bin/influxd``."""
    found = shutil.which("influxd") or (
        "/usr/bin/influxd" if os.access("/usr/bin/influxd", os.X_OK) else None
    )
    if found is None:
        raise RuntimeError(f"influxd (InfluxDB 1.x) not found; run: {INSTALL_HINT}")
    return Path(found)


class InfluxServer(Service):
    """One throwaway InfluxDB 1.x server plus its InfluxDB 3 front: ``start()`` (or ``with``).

    `url` and `token` are what an InfluxDB 3 client gets (``host=``, ``token=``);
    `influx_url` is the raw 1.x HTTP API (no auth), used by `create_database` and `query`.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        influxd: Path | None = None,
        start_timeout: float = 30.0,
        *,
        auto_create_databases: bool = False,
        max_body_bytes: int | None = None,
        auth: bool = False,
    ) -> None:
        self.influxd = influxd or find_influxd()
        self.start_timeout = start_timeout
        self.token = secrets.token_urlsafe(24)
        self.auto_create_databases = auto_create_databases
        self.max_body_bytes = max_body_bytes
        # auth: influxd's auth-enabled, with an admin user that the helpers below use
        self.auth = auth
        self.admin_user = "admin"
        self.admin_password = secrets.token_urlsafe(18)
        self._admin_exists = False
        self.influx_port = 0  # 1.x HTTP API
        self.rpc_port = 0  # 1.x backup/restore RPC (bind-address)
        self.pid: int | None = None
        self.tmpdir: Path | None = None
        self.front: InfluxFront | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    # -- addresses and paths --------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL of the InfluxDB 3 front, e.g. ``http://127.0.0.1:PORT``."""
        return self._front.url

    @property
    def port(self) -> int:
        """Port of the InfluxDB 3 front."""
        return self._front.port

    @property
    def influx_url(self) -> str:
        """Base URL of the raw InfluxDB 1.x HTTP API (no auth)."""
        return f"http://{self.host}:{self.influx_port}"

    @property
    def faults(self) -> Faults:
        """Fake answers for the next write requests (see `Faults`)."""
        return self._front.faults

    @property
    def requests(self) -> list[FrontRequest]:
        """The write requests the front answered so far, oldest first (`FrontRequest`s)."""
        return self._front.requests

    @property
    def writes(self) -> list[FrontRequest]:
        """Same as `requests`."""
        return self._front.writes

    @property
    def all_requests(self) -> list[FrontRequest]:
        """Every request the front answered (also /ping, /health, ...), oldest first."""
        return self._front.all_requests

    def clear_requests(self) -> None:
        self._front.clear_requests()

    @property
    def config_file(self) -> Path:
        return self._tmp / "influxd.conf"

    @property
    def logfile(self) -> Path:
        """The influxd log (inside the temporary directory)."""
        return self._tmp / "influxd.log"

    @property
    def _front(self) -> InfluxFront:
        if self.front is None:
            raise RuntimeError("InfluxServer is not started")
        return self.front

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, attempts: int = 3) -> InfluxServer:
        """Start influxd (retried on a port taken meanwhile), then the front."""
        if self.tmpdir is not None:
            raise RuntimeError("InfluxServer is already started")
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-influx-"))
        try:
            for attempt in range(1, attempts + 1):
                self.rpc_port, self.influx_port = free_port(self.host), free_port(self.host)
                self.config_file.write_text(self._config(), encoding="utf-8")
                if self._start_influxd():
                    break
                code = self._exit_code()
                if attempt == attempts or code is None or not self._bind_failed():
                    why = (
                        f"exited with code {code}"
                        if code is not None
                        else f"did not answer /ping within {self.start_timeout:g}s"
                    )
                    raise RuntimeError(
                        f"influxd {why}\n--- influxd log (tail) ---\n{self._log_tail()}"
                    )
            if self.auth:  # the first admin user can be created without credentials
                self._influxql(
                    f"CREATE USER {quote_ident(self.admin_user)} WITH PASSWORD "
                    f"{quote_string(self.admin_password)} WITH ALL PRIVILEGES",
                    post=True,
                )
                self._admin_exists = True
            kwargs: dict[str, Any] = {"auto_create_databases": self.auto_create_databases}
            if self.max_body_bytes is not None:
                kwargs["max_body_bytes"] = self.max_body_bytes
            self.front = InfluxFront(self.influx_url, self.token, self.host, **kwargs).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the front and the influxd this object started (SIGKILL), delete the directory."""
        if self.tmpdir is None:
            return
        self._admin_exists = False
        try:
            if self.front is not None:
                self.front.stop()
        finally:
            self.front = None
            try:
                self._kill_influxd()
            finally:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
                self.tmpdir = None

    def crash(self) -> None:
        """SIGKILL influxd and start it again on the same ports and data (the front stays).

        influxd fsyncs its WAL before it acknowledges a write, so it comes back with every
        acknowledged point.
        """
        self._kill_influxd()
        if not self._start_influxd():
            raise RuntimeError(f"influxd did not come back after a crash\n{self._log_tail()}")

    # -- 1.x helpers ----------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """Create database `name` (no-op if it exists) and return `name`."""
        self._influxql(f"CREATE DATABASE {quote_ident(name)}", post=True)
        return name

    def create_user(self, name: str, password: str, *, write_on: str | None = None) -> None:
        """A non-admin user (auth servers), with WRITE on database `write_on` if given."""
        self._influxql(
            f"CREATE USER {quote_ident(name)} WITH PASSWORD {quote_string(password)}", post=True
        )
        if write_on is not None:
            self.grant_write(name, write_on)

    def grant_write(self, user: str, database: str) -> None:
        """Let `user` write to `database` (auth servers)."""
        self._influxql(f"GRANT WRITE ON {quote_ident(database)} TO {quote_ident(user)}", post=True)

    def drop_database(self, name: str) -> None:
        self._influxql(f"DROP DATABASE {quote_ident(name)}", post=True)

    def query(self, database: str, influxql: str, epoch: str | None = "ns") -> list[dict[str, Any]]:
        """Rows of an InfluxQL query on the raw 1.x server, one dict per row.

        Keys are the column names (``time`` first; an int in `epoch` units, ``ns`` by default,
        or an RFC 3339 string with ``epoch=None``), plus the series' tags for ``GROUP BY``.
        Values are JSON-decoded: a float field holding 1.0 comes back as int 1 (see
        `field_types`). Several statements: the rows of all, in order.
        """
        rows: list[dict[str, Any]] = []
        for result in self._influxql(influxql, database=database, epoch=epoch):
            for series in result.get("series", []):
                tags = series.get("tags") or {}
                for values in series.get("values", []):
                    rows.append({**dict(zip(series["columns"], values, strict=True)), **tags})
        return rows

    def field_types(self, database: str, measurement: str) -> dict[str, str]:
        """``{field: "integer" | "float" | "string" | "boolean"}`` of `measurement`."""
        rows = self.query(database, f"SHOW FIELD KEYS FROM {quote_ident(measurement)}")
        return {row["fieldKey"]: row["fieldType"] for row in rows}

    def _influxql(
        self, q: str, database: str | None = None, epoch: str | None = None, post: bool = False
    ) -> list[dict[str, Any]]:
        params = {"q": q}
        if database is not None:
            params["db"] = database
        if epoch is not None:
            params["epoch"] = epoch
        encoded = urllib.parse.urlencode(params)
        if post:
            request = urllib.request.Request(f"{self.influx_url}/query", data=encoded.encode())
        else:
            request = urllib.request.Request(f"{self.influx_url}/query?{encoded}")
        if self._admin_exists:
            pair = f"{self.admin_user}:{self.admin_password}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(pair).decode())
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"InfluxQL {q!r} failed ({exc.code}): {exc.read()!r}") from None
        if "error" in answer:
            raise RuntimeError(f"InfluxQL {q!r} failed: {answer['error']}")
        results: list[dict[str, Any]] = answer.get("results", [])
        for result in results:
            if "error" in result:
                raise RuntimeError(f"InfluxQL {q!r} failed: {result['error']}")
        return results

    # -- internals ------------------------------------------------------------------------

    def _config(self) -> str:
        tmp = self._tmp
        return f"""\
reporting-disabled = true
bind-address = "{self.host}:{self.rpc_port}"

[meta]
  dir = "{tmp / "meta"}"
  retention-autocreate = true
  logging-enabled = false

[data]
  dir = "{tmp / "data"}"
  wal-dir = "{tmp / "wal"}"
  query-log-enabled = false
  max-series-per-database = 0
  max-values-per-tag = 0

[coordinator]
  log-queries-after = "0s"

[retention]
  enabled = false

[shard-precreation]
  enabled = false

[monitor]
  store-enabled = false

[subscriber]
  enabled = false

[http]
  enabled = true
  bind-address = "{self.host}:{self.influx_port}"
  auth-enabled = {"true" if self.auth else "false"}
  log-enabled = false
  pprof-enabled = false
  max-body-size = 0
  max-row-limit = 0

[logging]
  level = "info"
  suppress-logo = true

[continuous_queries]
  enabled = false
"""

    def _start_influxd(self) -> bool:
        """Start influxd; True once /ping answers 204, False if it exited (or timed out)."""
        self._log_offset = self.logfile.stat().st_size if self.logfile.exists() else 0
        with open(self.logfile, "ab") as log:
            self._proc = subprocess.Popen(
                [str(self.influxd), "-config", str(self.config_file)],
                cwd=self._tmp,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, not it
            )
        self.pid = self._proc.pid
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.influx_url}/ping", timeout=1) as response:
                    if response.status == 204:
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        self._kill_influxd()
        return False

    def _kill_influxd(self) -> None:
        """SIGKILL the influxd this object started (throwaway data: no clean shutdown)."""
        proc, self._proc, self.pid = self._proc, None, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def _exit_code(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    def _bind_failed(self) -> bool:
        """Whether the last influxd run failed to bind its ports (only its own log lines)."""
        with open(self.logfile, "rb") as log:
            log.seek(self._log_offset)
            tail = log.read().decode("utf-8", errors="replace").lower()
        return any(marker in tail for marker in _BIND_FAILED)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.logfile.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no influxd log)"
        return "\n".join(text.splitlines()[-lines:])


def quote_ident(name: str) -> str:
    """`name` as an InfluxQL identifier (double-quoted)."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quote_string(text: str) -> str:
    """`text` as an InfluxQL string literal (single-quoted)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def main() -> None:
    """Start a server, print how to reach it, keep it until Ctrl-C (or SIGTERM)."""

    def describe(server: InfluxServer) -> None:
        server.create_database("db")
        print(f"InfluxDB 3 API: {server.url}  token={server.token}  database=db")
        print(f"InfluxDB 1.x:   {server.influx_url}  (no auth; log: {server.logfile})")
        print(
            f"write: curl -i '{server.url}/api/v3/write_lp?db=db&precision=second' "
            f"-H 'Authorization: Bearer {server.token}' --data-binary 'm,t=a f=1i 1700000000'"
        )
        print(
            f"query: curl -G '{server.influx_url}/query' --data-urlencode db=db "
            "--data-urlencode 'q=SELECT * FROM m'"
        )
        print(f"fault: curl -d '{{\"status\": 503}}' {server.url}/__faults")

    serve_until_interrupted(InfluxServer(auto_create_databases=True), describe)


if __name__ == "__main__":
    main()
