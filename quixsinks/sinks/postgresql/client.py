"""Connections to PostgreSQL and the one place where psycopg2's errors are translated.

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
22xxx (data), 23xxx (integrity) RecordError
anything else                  DestinationError (not retried)
=============================  ===============================================

A failure to connect carries no SQLSTATE in psycopg2; it is classified from libpq's
connection status instead (server unreachable: retryable). TLS failures are not retried: a
server certificate that does not verify (the error names 'sslrootcert' and 'sslmode'), a
server without TLS under sslmode=require or stricter, and a server that takes only encrypted
connections (pg_hba.conf ``hostssl``) under sslmode=disable.
"""

from __future__ import annotations

import time
from typing import Any

from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    MissingDependencyError,
    QuixSinksError,
    RecordError,
    RetryableError,
    timed_out,
)
from quixsinks.core.tls import certificate_error, libpq_certificate_failure

from .options import PostgreSQLOptions, parse_conninfo

__all__ = ["connect", "describe", "import_psycopg2", "translate"]

_RETRYABLE_CODES = {"40001", "40P01", "57014", "55P03"}
_RETRYABLE_CLASSES = {"08", "53", "57"}


def import_psycopg2() -> Any:
    try:
        import psycopg2
        import psycopg2.extensions
        import psycopg2.sql
    except ImportError as exc:
        raise MissingDependencyError("psycopg2-binary", "postgresql") from exc
    return psycopg2


def describe(options: PostgreSQLOptions) -> str:
    """Where we connect, for messages: never the password."""
    return f"postgresql://{options.user}@{options.host}:{options.port}/{options.dbname}"


def translate(exc: Exception, where: str, *, connecting: bool = False) -> QuixSinksError:
    """The quixsinks error for a psycopg2 exception (see the module docstring)."""
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
    if code[:2] in ("22", "23"):
        return RecordError(f"{message} (SQLSTATE {code})")
    if not code and type(exc).__name__ in ("OperationalError", "InterfaceError"):
        return RetryableError(message)  # the connection broke mid-statement
    return DestinationError(f"{message} (SQLSTATE {code or 'none'})", location=where)


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
        if isinstance(error, RetryableError) and time.monotonic() - started >= min(2, seconds):
            # libpq gives no code for its "timeout expired"; the time spent tells it apart
            # from a refused connection (immediate)
            limit = timed_out(max(2, seconds), "connection_timeout_seconds")
            error = RetryableError(error.message.replace("cannot connect:", f"{limit}:", 1))
        raise error from None
