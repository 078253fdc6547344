"""Azure: one credential and client builder and one azure-core error map.

:func:`blob_service_client` builds an ``azure-storage-blob`` service client from a
connection string, an account key or a SAS token, on a transport with a connect and a read
timeout and a pool sized for the threads that share it, and with the SDK's own retries kept
few (the sink's :class:`~quixsinks.core.backpressure.RetryPolicy` is in charge).
:func:`translate` is the error map behind each Azure destination's one boundary: an
``HttpResponseError`` is classified by its HTTP status and the service's error code (never
its text, which can quote request URLs carrying a SAS token), the transport errors by their
class; :class:`AzureService` is the per-service hook (what "not found" means, which
access-denied error to raise).

The SDK is imported only when a client is made or an error is classified (the ``azure``
extra).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import (
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    QuixSinksError,
    RetryableError,
    SinkBackpressureError,
)
from ..secrets import scrub
from .hooks import ServiceHook
from .http import import_client, retry_after_seconds

__all__ = [
    "AzureService",
    "ResponseInfo",
    "blob_service_client",
    "import_exceptions",
    "parse_connection_string",
    "response_info",
    "translate",
]

#: Error codes of Azure Storage that mean "refused credentials or permissions".
DENIED_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationServiceMismatch",
        "AuthorizationProtocolMismatch",
        "AuthorizationSourceIPMismatch",
        "InsufficientAccountPermissions",
        "AccountIsDisabled",
    }
)
#: Codes of a 500 answer that mean "busy, try again" (other 500s are permanent).
THROTTLING_CODES = frozenset({"ServerBusy", "OperationTimedOut", "InternalError"})
#: Statuses that are retryable whatever the code says.
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
#: The longest wait for a connection, per request (seconds); the read timeout when shorter.
CONNECT_TIMEOUT = 10.0
#: Pooled HTTP connections per client (per process and credentials).
CONNECTION_POOL_SIZE = 32

_EXTRA = "azure"
_PACKAGE = "azure-storage-blob"


def import_exceptions() -> Any:
    """``azure.core.exceptions``, or MissingDependencyError naming the extra."""
    return import_client("azure.core.exceptions", package=_PACKAGE, extra=_EXTRA)


def parse_connection_string(text: str) -> dict[str, str]:
    """The ``Key=Value;...`` pairs of a connection string (keys as written)."""
    pairs: dict[str, str] = {}
    for part in text.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name:
            pairs[name.strip()] = value.strip()
    return pairs


def blob_service_client(
    account_url: str,
    *,
    connection_string: str | None = None,
    account_name: str | None = None,
    account_key: str | None = None,
    sas_token: str | None = None,
    timeout: float,
    retries: int,
    status_retries: int,
    retry_pause: float,
    credential_option: str,
    **config: Any,
) -> Any:
    """A ``BlobServiceClient``: from ``connection_string`` when given, else for
    ``account_url`` with an account key (and its ``account_name``) or a SAS token.

    Args:
        timeout: seconds to wait for an answer (a connection: at most
            :data:`CONNECT_TIMEOUT`).
        retries, status_retries, retry_pause: the SDK's own retries (in all; of which on
            5xx answers) and the pause between them.
        credential_option: the option a malformed credential is blamed on.
        config: more client settings (block sizes...).

    Raises:
        MissingDependencyError: azure-storage-blob is not installed.
        OptionError: the credential is malformed.
    """
    blob = import_client("azure.storage.blob", package=_PACKAGE, extra=_EXTRA)
    _redact_urllib3_logs()
    settings: dict[str, Any] = {
        "transport": _transport(timeout),
        "retry_policy": blob.LinearRetry(
            backoff=retry_pause,
            random_jitter_range=retry_pause / 2,
            retry_total=retries,
            retry_connect=retries,
            retry_read=retries,
            retry_status=status_retries,
        ),
        **config,
    }
    try:
        if connection_string is not None:
            return blob.BlobServiceClient.from_connection_string(connection_string, **settings)
        credential: Any = (
            {"account_name": account_name, "account_key": account_key}
            if account_key is not None
            else sas_token
        )
        return blob.BlobServiceClient(account_url, credential=credential, **settings)
    except ValueError:
        raise OptionError(
            f"{account_url}: the Azure credentials are malformed (is the connection string, "
            "account key or SAS token complete?)",
            option=credential_option,
            value="***",
        ) from None


def _transport(timeout: float) -> Any:
    """The SDK's requests transport with these timeouts and a pool big enough for the
    threads that share one client (block uploads, a driver's parallel moves)."""
    import requests
    from azure.core.pipeline.transport import RequestsTransport
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    session = requests.Session()
    # as the SDK mounts it, with retries left to its retry policy; more pooled connections
    adapter = HTTPAdapter(
        max_retries=Retry(total=False, redirect=False, raise_on_status=False),
        pool_maxsize=CONNECTION_POOL_SIZE,
    )
    for scheme in ("http://", "https://"):
        session.mount(scheme, adapter)
    return RequestsTransport(
        session=session,
        session_owner=True,
        connection_timeout=min(CONNECT_TIMEOUT, timeout),
        read_timeout=timeout,
    )


_SIG_RE = re.compile(r"(?i)\b(sig)=[^\s&'\"]*")


class _RedactSignatures(logging.Filter):
    """Cuts SAS signatures out of log records (urllib3 logs request URLs at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "sig=" in message:
            record.msg, record.args = _SIG_RE.sub(r"\1=REDACTED", message), ()
        return True


_REDACTOR = _RedactSignatures()


def _redact_urllib3_logs() -> None:
    """Make the HTTP library's DEBUG lines safe: they quote URLs, SAS token included (the
    SDK's own logging redacts them already)."""
    connectionpool = logging.getLogger("urllib3.connectionpool")
    if _REDACTOR not in connectionpool.filters:
        connectionpool.addFilter(_REDACTOR)


@dataclass(frozen=True)
class ResponseInfo:
    """What an ``HttpResponseError`` says, read once: status, the service's error code,
    headers and request id."""

    status: int | None
    code: str
    headers: Any
    request_id: str

    @property
    def detail(self) -> str:
        """``HTTP 503 ServerBusy (request id ...)``: for messages."""
        return (
            f"HTTP {self.status}"
            + (f" {self.code}" if self.code else "")
            + (f" (request id {self.request_id})" if self.request_id else "")
        )


def response_info(exc: Any) -> ResponseInfo:
    """The status, error code and headers of an azure-core ``HttpResponseError``."""
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None) or getattr(response, "status_code", None)
    headers = getattr(response, "headers", None) or {}
    raw_code = getattr(exc, "error_code", None) or headers.get("x-ms-error-code") or ""
    code = str(getattr(raw_code, "value", raw_code))  # the SDK gives a StorageErrorCode
    return ResponseInfo(status, code, headers, headers.get("x-ms-request-id") or "")


@dataclass(frozen=True)
class AzureService(ServiceHook):
    """The per-service hook of :func:`translate`: what one Azure service adds to the map
    (besides :class:`~quixsinks.core.vendors.hooks.ServiceHook`'s location, access-denied
    error, timeout and secrets).

    Attributes:
        name: the service, for messages (``Azure Blob Storage``).
        classify: the service's own codes (a missing container...), tried first:
            ``classify(info)`` returns an error, or None to fall through.
    """

    name: str = "Azure"
    classify: Callable[[ResponseInfo], QuixSinksError | None] = lambda info: None
    denied_advice: str = "access denied: the credentials are wrong, expired, or lack a permission"
    timeout_option: str = "storage_timeout_seconds"


def translate(exc: BaseException, service: AzureService) -> QuixSinksError | None:
    """The quixsinks error for ``exc`` raised by an Azure SDK call, or None when ``exc``
    is not the SDK's (the caller raises it as it is).

    Most specific first: the service's own codes; refused credentials (401, 403 or a
    denial code); 404; a busy service (429, 502-504, or 500 with a throttling code; with
    ``Retry-After``, backpressure); any other answer is permanent. Without an answer: a
    timeout and a lost connection are retryable.
    """
    try:
        exceptions = import_exceptions()
    except QuixSinksError:  # pragma: no cover - the SDK raised it, so it is there
        return None
    where, name = service.location, service.name
    if isinstance(exc, exceptions.HttpResponseError):
        info = response_info(exc)
        special = service.classify(info)
        if special is not None:
            return special
        if info.status in (401, 403) or info.code in DENIED_CODES:
            return service.denied(f"{where}: {service.denied_advice} ({info.detail})", where)
        if info.status == 404:
            return DestinationNotFoundError(f"{where}: not found ({info.detail})", location=where)
        if info.status in RETRYABLE_STATUSES or (
            info.status == 500 and info.code in THROTTLING_CODES
        ):
            message = f"{where}: {name} is busy, retry later ({info.detail})"
            retry_after = retry_after_seconds(info.headers)
            if retry_after is not None:
                return SinkBackpressureError(retry_after, message)
            return RetryableError(message)
        return DestinationError(f"{where}: {name} failed ({info.detail})", location=where)
    if isinstance(
        exc, (exceptions.ServiceRequestTimeoutError, exceptions.ServiceResponseTimeoutError)
    ):
        return RetryableError(f"{where}: {name} {service.timed_out()}")
    if isinstance(exc, (exceptions.ServiceRequestError, exceptions.ServiceResponseError)):
        return RetryableError(
            f"{where}: cannot reach {name} ({type(exc).__name__}: "
            f"{_scrub(str(exc), service.secrets)})"
        )
    if isinstance(exc, exceptions.AzureError):
        return DestinationError(
            f"{where}: {name} failed ({type(exc).__name__}: {_scrub(str(exc), service.secrets)})",
            location=where,
        )
    return None


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with query strings (SAS tokens) and known secrets cut out, shortened to its
    first line."""
    text = re.sub(r"\?[^\s'\"]*", "?...", scrub(text, secrets))
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:300]
