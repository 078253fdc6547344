"""Clients of the BigQuery sink, and the one place where Google's errors become ours.

``clients(options)`` gives the process's cached pair of a ``google.cloud.bigquery.Client``
(REST: tables, queries) and a ``BigQueryWriteClient`` (gRPC: the Storage Write API), made
from the sink's options. ``translate`` maps ``google.api_core`` and ``google.auth``
exceptions to the quixsinks error tree: not found, access denied, retryable (throttling,
unavailable, deadline), everything else a DestinationError that fails the task.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    MissingDependencyError,
    OptionError,
    QuixSinksError,
    RetryableError,
    SinkBackpressureError,
)

from .options import BigQueryOptions

__all__ = [
    "Clients",
    "clients",
    "credentials",
    "describe",
    "import_bigquery",
    "translate",
    "write_retry",
]


def import_bigquery() -> Any:
    """``google.cloud.bigquery``, or MissingDependencyError naming the extra."""
    try:
        import google.cloud.bigquery_storage_v1  # noqa: F401
        from google.cloud import bigquery
    except ImportError as exc:
        raise MissingDependencyError("google-cloud-bigquery-storage", "bigquery") from exc
    return bigquery


def describe(options: BigQueryOptions) -> str:
    """Where the sink writes, for messages (never a credential)."""
    return f"bigquery table {options.table_path}"


def credentials(options: BigQueryOptions) -> Any:
    """Credentials from ``service_account_json`` (JSON text or a file path), anonymous for
    an http:// emulator endpoint, else application-default credentials."""
    raw = options.service_account_json
    if raw is None:
        if options.emulator:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()  # type: ignore[no-untyped-call]
        return None  # the client libraries find application-default credentials
    info = parse_service_account(raw)
    from google.oauth2 import service_account

    try:
        return service_account.Credentials.from_service_account_info(info)  # type: ignore[no-untyped-call]
    except (ValueError, KeyError) as exc:
        # the key's fields are never shown: only which one is wrong
        reason = str(exc).split(":")[0][:120] if isinstance(exc, ValueError) else f"{exc}"
        raise OptionError(
            "option 'service_account_json' is not a usable service account key "
            f"({type(exc).__name__}: {reason}; the value is not shown)",
            option="service_account_json",
            value="***",
        ) from None


def parse_service_account(raw: str) -> dict[str, Any]:
    """The key as a dict: ``raw`` is its JSON text or the path of its file. OptionError,
    never echoing the text, when it is neither."""
    text = raw
    if not raw.lstrip().startswith("{"):
        if not os.path.isfile(raw):
            raise OptionError(
                "option 'service_account_json' is neither a JSON object nor the path of an "
                "existing file (the value is not shown)",
                option="service_account_json",
                value="***",
            )
        with open(raw, encoding="utf-8") as f:
            text = f.read()
    try:
        info = json.loads(text)
    except ValueError as exc:
        raise OptionError(
            "option 'service_account_json' is not valid JSON (line "
            f"{getattr(exc, 'lineno', '?')}, column {getattr(exc, 'colno', '?')}; the value "
            "is not shown)",
            option="service_account_json",
            value="***",
        ) from None
    if not isinstance(info, dict):
        raise OptionError(
            "option 'service_account_json' must hold a JSON object (a service account key)",
            option="service_account_json",
            value="***",
        )
    return info


@dataclass
class Clients:
    """One process's BigQuery clients for one set of options."""

    bigquery: Any
    write: Any
    channel: Any = None

    def close(self) -> None:
        try:
            self.bigquery.close()
        finally:
            if self.channel is not None:
                self.channel.close()


def _create(options: BigQueryOptions) -> Clients:
    bigquery = import_bigquery()
    from google.api_core.client_options import ClientOptions
    from google.cloud import bigquery_storage_v1

    creds = credentials(options)
    endpoint = options.api_endpoint
    rest_options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    try:
        bq = bigquery.Client(
            project=options.project_id,
            credentials=creds,
            location=options.location,
            client_options=rest_options,
        )
    except Exception as exc:
        raise translate(exc, describe(options)) from exc
    channel = None
    if options.emulator and options.grpc_endpoint:
        import grpc
        from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
            BigQueryWriteGrpcTransport,
        )

        channel = grpc.insecure_channel(
            options.grpc_endpoint,
            options=[
                ("grpc.max_send_message_length", 20 * 1024 * 1024),
                ("grpc.max_receive_message_length", 20 * 1024 * 1024),
            ],
        )
        write = bigquery_storage_v1.BigQueryWriteClient(
            transport=BigQueryWriteGrpcTransport(channel=channel)
        )
    else:
        grpc_options = (
            ClientOptions(api_endpoint=options.grpc_endpoint) if options.grpc_endpoint else None
        )
        try:
            write = bigquery_storage_v1.BigQueryWriteClient(
                credentials=creds, client_options=grpc_options
            )
        except Exception as exc:
            bq.close()
            raise translate(exc, describe(options)) from exc
    return Clients(bq, write, channel)


_CLIENTS: ClientCache[Clients] = ClientCache("bigquery clients", lambda c: c.close())


def write_retry(options: BigQueryOptions) -> Any:
    """The retry of a Storage Write API call: the library's own (a passed deadline, throttling,
    an unavailable service), for at most ``retry_timeout`` seconds. Its defaults retry for
    10 minutes (20 for CreateWriteStream, a day for AppendRows): against a hung endpoint a
    task would wait that long, whatever the per-call timeout."""
    from google.api_core import exceptions as gexc
    from google.api_core.retry import Retry, if_exception_type

    return Retry(
        initial=0.1,
        maximum=10.0,
        multiplier=1.3,
        predicate=if_exception_type(
            gexc.DeadlineExceeded, gexc.ResourceExhausted, gexc.ServiceUnavailable
        ),
        timeout=options.retry_timeout,
    )


def clients(options: BigQueryOptions) -> Clients:
    """The process's cached clients for ``options`` (made on first use)."""
    return _CLIENTS.get(client_key(options), lambda: _create(options))


def forget(options: BigQueryOptions) -> None:
    _CLIENTS.discard(client_key(options))


def translate(exc: BaseException, where: str) -> QuixSinksError:
    """The quixsinks error for a Google client exception (the original is chained)."""
    if isinstance(exc, QuixSinksError):
        return exc
    try:
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as aexc
    except ImportError:  # pragma: no cover - the extra is installed wherever this runs
        return DestinationError(f"{where}: {type(exc).__name__}: {exc}")
    if isinstance(exc, gexc.RetryError) and exc.cause is not None:
        inner = translate(exc.cause, where)  # the last error behind the retries
        if isinstance(inner, RetryableError):
            return RetryableError(f"{inner.message} (retried until retry_timeout)")
        return inner
    text = _message(exc)
    if isinstance(exc, aexc.DefaultCredentialsError):
        return DestinationAccessDeniedError(
            f"{where}: no Google credentials found; set 'service_account_json' or configure "
            "application-default credentials (gcloud auth application-default login, or "
            "GOOGLE_APPLICATION_CREDENTIALS)",
            location=where,
        )
    if isinstance(exc, aexc.GoogleAuthError):
        return DestinationAccessDeniedError(
            f"{where}: the credentials were refused ({type(exc).__name__}: {text}); check "
            "'service_account_json' (the key may be revoked or for another project)",
            location=where,
        )
    if isinstance(exc, gexc.NotFound):
        return DestinationNotFoundError(f"{where}: not found: {text}", location=where)
    if isinstance(exc, (gexc.Unauthorized, gexc.Forbidden)) and not isinstance(
        exc, gexc.TooManyRequests
    ):
        if _reason(exc) in ("rateLimitExceeded", "quotaExceeded"):
            return SinkBackpressureError(5.0, f"{where}: {text}")
        return DestinationAccessDeniedError(
            f"{where}: access denied ({type(exc).__name__}): {text}; the credentials need "
            "roles/bigquery.dataEditor on the dataset and roles/bigquery.jobUser on the project",
            location=where,
        )
    if isinstance(exc, (gexc.TooManyRequests, gexc.ResourceExhausted)):
        return SinkBackpressureError(5.0, f"{where}: throttled: {text}")
    if isinstance(exc, (gexc.DeadlineExceeded, TimeoutError)):
        return RetryableError(f"{where}: timed out ({type(exc).__name__}: {text}; {_TIMEOUTS})")
    if isinstance(
        exc,
        (
            gexc.ServiceUnavailable,
            gexc.InternalServerError,
            gexc.BadGateway,
            gexc.GatewayTimeout,
            gexc.DeadlineExceeded,
            gexc.RetryError,
            gexc.Aborted,
        ),
    ):
        return RetryableError(f"{where}: {type(exc).__name__}: {text}")
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return RetryableError(f"{where}: {type(exc).__name__}: {exc}")
    try:
        import requests

        if isinstance(exc, requests.Timeout):
            return RetryableError(f"{where}: timed out ({type(exc).__name__}; {_TIMEOUTS})")
        if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
            return RetryableError(
                f"{where}: cannot reach BigQuery ({type(exc).__name__}); check the network "
                "and api_endpoint"
            )
    except ImportError:  # pragma: no cover
        pass
    return DestinationError(f"{where}: {type(exc).__name__}: {text}", location=where)


#: what bounds a call, for timeout messages
_TIMEOUTS = "no answer within the options ddl_timeout, insert_timeout or retry_timeout"


def _reason(exc: Any) -> str:
    for error in getattr(exc, "errors", None) or []:
        if isinstance(error, dict) and error.get("reason"):
            return str(error["reason"])
    return ""


def _message(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return str(text).splitlines()[0][:500] if text else type(exc).__name__
