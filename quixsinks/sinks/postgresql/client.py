"""The PostgreSQL client: psycopg2's import, connections (built, cached per process, one
transaction per session) and the one place where psycopg2's errors are translated.

:func:`translate` maps a psycopg2 exception to a quixsinks error by SQLSTATE class,
the most specific match winning, with the original chained:

=============================  ===============================================
SQLSTATE                       quixsinks error
=============================  ===============================================
28xxx (authentication)         DestinationAccessDeniedError
42501 (insufficient privilege) DestinationAccessDeniedError
3D000 (no such database)       DestinationNotFoundError
42P01 / 3F000 (no table/schema) DestinationNotFoundError
08xxx, 40001, 40P01, 53xxx,    RetryableError (connection lost, serialisation
57P0x, 57014                   failure, deadlock, server shutting down, timeout)
22xxx (data), 23xxx (integrity) RecordError where the statement wrote rows of one
                               task (``rows=True``: the write path, whose rows the
                               sink can isolate); else DestinationError
anything else                  DestinationError (not retried)
=============================  ===============================================

The class decides, never the message text: :func:`row_level` says which errors are
about what a row holds (see docs/sinks/postgresql.md, "Row-level errors").

A failure to connect carries no SQLSTATE in psycopg2 (libpq reports only the server's
FATAL text): that one case is classified from the text (server unreachable: retryable).
TLS failures are not retried: a server certificate that does not verify (the error names
'sslrootcert' and 'sslmode'), a server without TLS under sslmode=require or stricter, and a
server that takes only encrypted connections (pg_hba.conf ``hostssl``) under sslmode=disable.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from quixsinks.core.clients import ClientCache, ClientPool, client_key
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    QuixSinksError,
    RecordError,
    RetryableError,
    timed_out,
)
from quixsinks.core.tls import certificate_error, libpq_certificate_failure
from quixsinks.core.vendors.http import import_client

from .options import PostgreSQLOptions, parse_conninfo

if TYPE_CHECKING:
    from quixsinks.core.sink import Task

__all__ = [
    "autocommit_session",
    "connect",
    "describe",
    "import_psycopg2",
    "is_stale",
    "row_level",
    "session",
    "task_connection",
    "translate",
]

_RETRYABLE_CODES = {"40001", "40P01", "57014", "55P03"}
_RETRYABLE_CLASSES = {"08", "53", "57"}


#: SQLSTATEs that mean the target changed behind the sink's back (dropped table, schema or
#: column): what a process remembers of it is stale (see :func:`is_stale`)
_STALE_CODES = frozenset({"42P01", "3F000", "42703"})


def import_psycopg2() -> Any:
    """psycopg2 with its ``sql`` and ``extensions`` modules, or MissingDependencyError."""
    for module in ("psycopg2.extensions", "psycopg2.sql"):
        import_client(module, package="psycopg2-binary", extra="postgresql")
    return import_client("psycopg2", package="psycopg2-binary", extra="postgresql")


def describe(options: PostgreSQLOptions) -> str:
    """Where we connect, for messages: never the password."""
    return f"postgresql://{options.user}@{options.host}:{options.port}/{options.dbname}"


def row_level(exc: BaseException) -> bool:
    """Whether PostgreSQL refused a statement for what a row holds: SQLSTATE class 22
    (data exception: invalid text for the type, out of range, too long, bad encoding) or
    23 (integrity: NOT NULL, CHECK, unique, foreign key)."""
    code = getattr(exc, "pgcode", None) or ""
    return code[:2] in ("22", "23")


def translate(
    exc: Exception, where: str, *, connecting: bool = False, rows: bool = False
) -> QuixSinksError:
    """The quixsinks error for a psycopg2 exception (see the module docstring).

    ``rows``: the statement wrote one task's rows, so a row-level error (:func:`row_level`)
    is a RecordError (the sink's rows can be isolated); elsewhere (DDL, the driver's
    commit) it fails the batch as a DestinationError."""
    code = getattr(exc, "pgcode", None) or ""
    text = (str(getattr(exc, "pgerror", None) or exc)).strip().splitlines()
    detail = text[0] if text else type(exc).__name__
    message = f"{where}: {detail}"
    if connecting and not code:
        return _connect_error(exc, where, detail)
    if code.startswith("28") or code == "42501":
        return DestinationAccessDeniedError(message, location=where)
    if code in ("3D000", "42P01", "3F000"):
        return DestinationNotFoundError(message, location=where)
    if code in _RETRYABLE_CODES or code[:2] in _RETRYABLE_CLASSES:
        return RetryableError(message)
    if row_level(exc):
        if rows:
            return RecordError(f"{message} (SQLSTATE {code})")
        return DestinationError(
            f"{message} (SQLSTATE {code}; a row-level error that cannot be traced to one "
            "task's rows here: see 'Row-level errors' in docs/sinks/postgresql.md)",
            location=where,
        )
    if not code and isinstance(exc, _connection_errors()):
        return RetryableError(message)  # the connection broke mid-statement
    return DestinationError(f"{message} (SQLSTATE {code or 'none'})", location=where)


def _connection_errors() -> tuple[type[Exception], ...]:
    """psycopg2's classes for a connection that broke (none when psycopg2 is missing: an
    exception from anywhere else is not one)."""
    try:
        psycopg2 = import_psycopg2()
    except ImportError:
        return ()
    return (psycopg2.OperationalError, psycopg2.InterfaceError)


def is_stale(exc: Exception) -> bool:
    """Whether ``exc`` says a table, schema or column is gone or changed since it was seen."""
    return getattr(exc, "pgcode", None) in _STALE_CODES


def _connect_error(exc: Exception, where: str, detail: str) -> QuixSinksError:
    """libpq gives no SQLSTATE when a connection fails; the server's FATAL text has it."""
    lowered = detail.lower()
    if (
        "password authentication failed" in lowered
        or "no password supplied" in lowered
        or ("authentication failed" in lowered)
    ):
        return DestinationAccessDeniedError(
            f"{where}: authentication failed; check 'user' and 'password' (or PGPASSWORD)",
            location=where,
        )
    if libpq_certificate_failure(detail):
        return certificate_error(
            where,
            detail,
            trust="set 'sslrootcert' to a file holding its CA certificate (PEM)",
            skip="sslmode=require and leave sslrootcert unset (given a CA file, libpq "
            "verifies under require too)",
        )
    if "server does not support ssl" in lowered:
        return DestinationError(
            f"{where}: {detail}; the server does not offer TLS: lower 'sslmode' (prefer "
            "encrypts when the server can) or switch TLS on in the server",
            location=where,
        )
    if "no pg_hba.conf entry" in lowered and "no encryption" in lowered:
        return DestinationAccessDeniedError(
            f"{where}: {detail}; the server takes only encrypted connections here: set "
            "'sslmode' to require, verify-ca or verify-full",
            location=where,
        )
    if "database" in lowered and "does not exist" in lowered:
        return DestinationNotFoundError(
            f"{where}: the database does not exist; create it or fix 'dbname'", location=where
        )
    if "permission denied" in lowered:
        return DestinationAccessDeniedError(f"{where}: {detail}", location=where)
    return RetryableError(f"{where}: cannot connect: {detail}")


def connect(options: PostgreSQLOptions) -> Any:
    """A new psycopg2 connection (autocommit off), statement timeout set."""
    psycopg2 = import_psycopg2()
    params: dict[str, Any] = {
        "host": options.host,
        "port": options.port,
        "dbname": options.dbname,
        "user": options.user,
        "connect_timeout": options.connection_timeout_seconds,
        "sslmode": options.sslmode,
        "application_name": "quixsinks",
    }
    if options.sslrootcert is not None:
        params["sslrootcert"] = options.sslrootcert
    if options.password is not None:
        params["password"] = options.password
    extra = parse_conninfo(options.connect_options)
    # UTC sessions: timestamps are sent as naive UTC text (much faster to produce). The
    # user's own `options` come first, ours last, so that no setting of theirs can shift
    # the session's time zone (the later -c wins).
    user_options = extra.pop("options", "")
    params.update(extra)
    params["options"] = " ".join(
        part
        for part in (
            f"-c statement_timeout={options.statement_timeout_seconds * 1000}",
            user_options,
            "-c timezone=UTC",
        )
        if part
    )
    started = time.monotonic()
    try:
        return psycopg2.connect(**params)
    except psycopg2.Error as exc:
        error = translate(exc, describe(options), connecting=True)
        seconds = options.connection_timeout_seconds
        waited = time.monotonic() - started
        if isinstance(error, RetryableError) and (
            "timeout expired" in str(exc) or waited >= min(2, seconds)
        ):
            # libpq gives no code for its "timeout expired". Its text tells it apart from
            # a refused connection; the time spent does where a locale translates the text
            # (a CI run once saw the text after less than 2 s by this process's clock).
            limit = timed_out(max(2, seconds), "connection_timeout_seconds")
            error = RetryableError(error.message.replace("cannot connect:", f"{limit}:", 1))
        raise error from None


# Executor connections, reused by the tasks of one Python worker process
_CONNECTIONS: ClientCache[Any] = ClientCache("postgresql connections", lambda c: c.close())


def task_connection(options: PostgreSQLOptions, task: Task | None) -> Any:
    """The task's connection: the process's cached one, healthy and idle, or a new one. A
    connection the task leaves broken or mid-transaction is dropped from the cache."""
    key = client_key(options)
    conn = _CONNECTIONS.get(key, lambda: connect(options))
    if conn.closed:
        _CONNECTIONS.discard(key)
        conn = _CONNECTIONS.get(key, lambda: connect(options))
    if task is not None and "conn" not in task.state:
        task.state["conn"] = conn

        def release() -> None:
            if conn.closed or conn.get_transaction_status() != 0:  # 0: idle
                _CONNECTIONS.discard(key)

        task.on_close(release)
    return conn


def rollback_cached(options: PostgreSQLOptions, conn: Any) -> None:
    """Roll back a cached connection; one that is broken (the server went away) is dropped
    from the cache instead, so that the retry connects anew."""
    if not _rollback(conn):
        _CONNECTIONS.discard(client_key(options))


def _usable(conn: Any) -> bool:
    """Whether an idle pooled connection can run the next transaction: open, idle, and
    nothing to read on its socket (a server that restarted, or ended the session, has
    closed it or sent its last words: either reads as ready)."""
    if conn.closed or conn.get_transaction_status() != 0:  # 0: idle
        return False
    try:
        ready, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not ready


# Connections of the driver-side transactions (commits, DDL, ledger), kept open between
# micro-batches in the process Spark runs them in: a new connection costs a backend start
# and the password exchange (17.6 ms on the test server; 0.17 ms for a statement on an
# open one), more with TLS or over a network
_SESSIONS: ClientPool[Any] = ClientPool("postgresql sessions", lambda c: c.close(), alive=_usable)


@contextlib.contextmanager
def session(options: PostgreSQLOptions) -> Iterator[Any]:
    """A cursor for one transaction, on a connection of this process's pool (or a new
    one): commit on success, roll back and translate psycopg2's error on failure. A
    connection whose transaction committed goes back to the pool; any other is closed."""
    psycopg2 = import_psycopg2()
    key = client_key(options)
    conn = _SESSIONS.take(key, lambda: connect(options))
    committed = False
    try:
        with conn.cursor() as cur:
            yield cur
        conn.commit()
        committed = True
    except psycopg2.Error as exc:
        _rollback(conn)
        raise translate(exc, describe(options)) from exc
    except BaseException:
        _rollback(conn)
        raise
    finally:
        _SESSIONS.give_back(key, conn, keep=committed and not conn.closed)


@contextlib.contextmanager
def autocommit_session(options: PostgreSQLOptions, lock_key: str | None = None) -> Iterator[Any]:
    """An autocommit cursor (COMMIT PREPARED cannot run in a transaction block) on a new
    connection, holding the advisory lock ``lock_key`` for the whole session when given."""
    psycopg2 = import_psycopg2()
    conn = connect(options)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            if lock_key is not None:
                cur.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (lock_key,))
            yield cur
    except psycopg2.Error as exc:
        raise translate(exc, describe(options)) from exc
    finally:
        conn.close()  # releases the session's advisory lock


def _rollback(conn: Any) -> bool:
    """Roll back ``conn``; False (and nothing raised) when the connection is broken."""
    if conn.closed:
        return False
    try:
        conn.rollback()
    except import_psycopg2().Error:
        return False
    return True
