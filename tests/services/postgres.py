"""A throwaway PostgreSQL cluster on 127.0.0.1 for integration tests.

`PostgresServer` runs Debian's ``initdb`` and ``pg_ctl`` (as the ``postgres`` OS user when
running as root) against a fresh temporary directory, with fsync off: fast, not durable
across a machine crash, durable across a server crash (``synchronous_commit`` stays on, so
a committed transaction's WAL reaches the OS before the COMMIT returns: the crash tests
need that).
Install the binaries with ``bash tests/services/install.sh``.

Manual use: ``python tests/services/postgres.py`` starts a server, prints its DSN and keeps it
running until Ctrl-C.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if __package__:
    from .common import Service, free_port, serve_until_interrupted
else:  # run as a script: python tests/services/postgres.py
    from common import (  # type: ignore[no-redef,import-not-found]
        Service,
        free_port,
        serve_until_interrupted,
    )

if TYPE_CHECKING:
    from psycopg2.extensions import connection

    from .tls import TestCertificates

PG_ROOT = Path("/usr/lib/postgresql")
INSTALL_HINT = "bash tests/services/install.sh"
OS_USER = "postgres"
_BIND_FAILED = re.compile(r"could not (bind|create listen socket)|Address already in use")


def find_pg_bin(root: Path = PG_ROOT) -> Path:
    """The ``bin`` directory of the highest PostgreSQL version installed under `root`."""
    bins = [pg_ctl.parent for pg_ctl in root.glob("*/bin/pg_ctl")]
    if not bins:
        raise RuntimeError(
            f"PostgreSQL server binaries not found ({root}/*/bin/pg_ctl); run: {INSTALL_HINT}"
        )

    def version(bin_dir: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", bin_dir.parent.name))

    return max(bins, key=version)


class PostgresServer(Service):
    """One throwaway PostgreSQL cluster: ``start()`` it (or use ``with``), then ``stop()``.

    The superuser ``postgres`` authenticates with a random password (scram-sha-256), over TCP
    on 127.0.0.1 or over the Unix socket in the cluster's private temporary directory.

    With ``tls`` (`tests.services.tls.make_certificates`), the server presents that
    certificate (``ssl=on``) and takes TCP connections over TLS only.
    """

    host = "127.0.0.1"
    user = "postgres"
    dbname = "postgres"

    def __init__(
        self,
        pg_bin: Path | None = None,
        start_timeout: int = 60,
        *,
        synchronous_commit: bool = True,
        tls: TestCertificates | None = None,
    ) -> None:
        self.pg_bin = pg_bin or find_pg_bin()
        self.tls = tls
        self.synchronous_commit = synchronous_commit
        self.start_timeout = start_timeout
        self.password = secrets.token_urlsafe(24)
        self.port = 0
        self.pid: int | None = None
        self.tmpdir: Path | None = None

    # -- paths ----------------------------------------------------------------------------

    @property
    def datadir(self) -> Path:
        """The cluster's data directory (inside the temporary directory)."""
        return self._tmp / "data"

    @property
    def logfile(self) -> Path:
        """The server log (inside the temporary directory)."""
        return self._tmp / "server.log"

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, attempts: int = 3) -> PostgresServer:
        """Create, initialise and start the cluster; retries on a port taken meanwhile."""
        if self.tmpdir is not None:
            raise RuntimeError("PostgresServer is already started")
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-pg-"))
        try:
            self._initdb()
            if self.tls is not None:
                self._configure_tls(self.tls)
            for attempt in range(1, attempts + 1):
                self.port = free_port(self.host)
                result = self._pg_ctl(
                    "start",
                    f"--timeout={self.start_timeout}",
                    f"--log={self.logfile}",
                    f"--options={self._server_options()}",
                )
                if result.returncode == 0:
                    break
                if attempt == attempts or not _BIND_FAILED.search(self._log_tail()):
                    raise RuntimeError(
                        f"pg_ctl start failed (exit {result.returncode}): "
                        f"{result.stdout.strip()} {result.stderr.strip()}\n"
                        f"--- server log (tail) ---\n{self._log_tail()}"
                    )
            self.pid = int((self.datadir / "postmaster.pid").read_text(encoding="utf-8").split()[0])
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server this object started (``-m immediate``) and delete its directory."""
        if self.tmpdir is None:
            return
        try:
            if (self.datadir / "postmaster.pid").exists():
                self._pg_ctl("stop", "--mode=immediate", "--timeout=30")
            if self.pid is not None and _is_postmaster_of(self.pid, self.datadir):
                os.kill(self.pid, signal.SIGKILL)  # pg_ctl failed: kill our postmaster only
        finally:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
            self.pid = None

    def restart(self) -> None:
        """Restart the server (``pg_ctl restart --mode=fast``) on the same port and settings:
        every open connection is cut, as in a server crash or failover."""
        if self.tmpdir is None:
            raise RuntimeError("PostgresServer is not started")
        result = self._pg_ctl(
            "restart", "--mode=fast", f"--timeout={self.start_timeout}", f"--log={self.logfile}"
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"pg_ctl restart failed (exit {result.returncode}): {result.stdout.strip()} "
                f"{result.stderr.strip()}\n--- server log (tail) ---\n{self._log_tail()}"
            )
        self.pid = int((self.datadir / "postmaster.pid").read_text(encoding="utf-8").split()[0])

    def crash(self) -> None:
        """Crash the server (``pg_ctl stop -m immediate``: every backend killed, no
        checkpoint) and start it again on the same port: it runs crash recovery, which,
        among other things, empties every UNLOGGED table."""
        if self.tmpdir is None:
            raise RuntimeError("PostgresServer is not started")
        stopped = self._pg_ctl("stop", "--mode=immediate", "--timeout=30")
        if stopped.returncode != 0:
            raise RuntimeError(f"pg_ctl stop -m immediate failed: {stopped.stderr.strip()}")
        result = self._pg_ctl(
            "start",
            f"--timeout={self.start_timeout}",
            f"--log={self.logfile}",
            f"--options={self._server_options()}",
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"pg_ctl start after a crash failed (exit {result.returncode}): "
                f"{result.stderr.strip()}\n--- server log (tail) ---\n{self._log_tail()}"
            )
        self.pid = int((self.datadir / "postmaster.pid").read_text(encoding="utf-8").split()[0])

    # -- client helpers -------------------------------------------------------------------

    def dsn(self, dbname: str | None = None) -> str:
        """A libpq keyword/value connection string (for psycopg2, psql, ...)."""
        params = {
            "host": self.host,
            "port": str(self.port),
            "user": self.user,
            "password": self.password,
            "dbname": dbname or self.dbname,
        }
        return " ".join(f"{key}={_dsn_quote(value)}" for key, value in params.items())

    def jdbc_url(self, dbname: str | None = None) -> str:
        """A JDBC URL (pass `user` and `password` separately)."""
        return f"jdbc:postgresql://{self.host}:{self.port}/{dbname or self.dbname}"

    def connect(self, dbname: str | None = None) -> connection:
        """A new psycopg2 connection (autocommit off); the caller closes it."""
        import psycopg2

        return psycopg2.connect(self.dsn(dbname))

    def psql_env(self, dbname: str | None = None) -> dict[str, str]:
        """``os.environ`` plus the ``PG*`` variables that point psql & co. at this server."""
        return {
            **os.environ,
            "PGHOST": self.host,
            "PGPORT": str(self.port),
            "PGUSER": self.user,
            "PGPASSWORD": self.password,
            "PGDATABASE": dbname or self.dbname,
        }

    def create_database(self, name: str, *, exist_ok: bool = False) -> str:
        """Create database `name` (with `exist_ok`, keep it if it exists) and return its DSN."""
        from psycopg2 import errors, sql

        conn = self.connect()
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except errors.DuplicateDatabase:
            if not exist_ok:
                raise
        finally:
            conn.close()
        return self.dsn(name)

    # -- internals ------------------------------------------------------------------------

    def _initdb(self) -> None:
        pwfile = self._tmp / "pwfile"
        pwfile.write_text(self.password + "\n", encoding="utf-8")
        if os.geteuid() == 0:  # the tree must belong to the user the server runs as
            owner = _os_user()
            for path in (self._tmp, pwfile):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        try:
            self._run(
                self.pg_bin / "initdb",
                f"--pgdata={self.datadir}",
                f"--username={self.user}",
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                check=True,
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def _server_options(self) -> str:
        settings = {
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self._tmp),
            "fsync": "off",
            "synchronous_commit": "on" if self.synchronous_commit else "off",
            "full_page_writes": "off",
            "max_connections": "200",
            # write_mode=prepared (two-phase commit) needs prepared transactions
            "max_prepared_transactions": "100",
        }
        if self.tls is not None:
            settings.update(
                ssl="on",
                ssl_cert_file=str(self._tmp / "server.crt"),
                ssl_key_file=str(self._tmp / "server.key"),
            )
        return " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in settings.items())

    def _configure_tls(self, tls: TestCertificates) -> None:
        """TLS on, and TLS only over TCP: pg_hba.conf has ``hostssl`` lines and no ``host``
        line, so the server refuses every unencrypted TCP connection (the Unix socket stays
        open to the OS user). The key is copied where the server's OS user owns it, 0600."""
        for source, name in ((tls.server_cert, "server.crt"), (tls.server_key, "server.key")):
            target = self._tmp / name
            shutil.copyfile(source, target)
            os.chmod(target, 0o600)
            if os.geteuid() == 0:
                owner = _os_user()
                os.chown(target, owner.pw_uid, owner.pw_gid)
        (self.datadir / "pg_hba.conf").write_text(
            "local   all  all                 scram-sha-256\n"
            f"hostssl all  all  {self.host}/32  scram-sha-256\n",
            encoding="utf-8",
        )

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run(self.pg_bin / "pg_ctl", f"--pgdata={self.datadir}", "--wait", *args)

    def _run(self, *cmd: str | Path, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run `cmd` as the server's OS user, in the temporary directory, output captured."""
        argv = [str(part) for part in cmd]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", OS_USER, "--", *argv]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        result = subprocess.run(
            argv, cwd=self._tmp, env=env, capture_output=True, text=True, check=False
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{shlex.join(argv)} failed (exit {result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )
        return result

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.logfile.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])


def _dsn_quote(value: str) -> str:
    """Quote a libpq keyword/value connection-string value when it needs it."""
    if value and not re.search(r"[\s'\\]", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _os_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(OS_USER)
    except KeyError:
        raise RuntimeError(f"no '{OS_USER}' OS user; run: {INSTALL_HINT}") from None


def _is_postmaster_of(pid: int, datadir: Path) -> bool:
    """Whether `pid` is still running and is the postmaster of `datadir` (not a reused PID)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return os.fsencode(datadir) in argv


def main() -> None:
    """Start a server, print how to reach it, keep it until Ctrl-C (or SIGTERM)."""

    def describe(server: PostgresServer) -> None:
        print(f"DSN:  {server.dsn()}  (pid {server.pid}, log: {server.logfile})")
        print(f"JDBC: {server.jdbc_url()}  user={server.user} password={server.password}")
        print(f"psql: psql '{server.dsn()}'")

    serve_until_interrupted(PostgresServer(), describe)


if __name__ == "__main__":
    main()
