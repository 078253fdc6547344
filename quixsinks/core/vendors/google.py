"""Google Cloud: the credentials and the error map every Google service shares.

**Credentials** (:func:`credentials`): the option ``service_account_json`` holds a service
account key, as its JSON text or the path of its key file; one rule set reads it
(:func:`service_account_info`): a JSON object of type ``service_account`` with
``client_email``, ``private_key`` and ``token_uri``. A value that is none of that is an
:class:`~quixsinks.core.errors.OptionError` naming the option and never the value (nor
does a parser's exception, which may hold the text, ride along as its context). Without a
key, an emulator gets anonymous credentials; anything else uses Google's
application-default credentials.

**Errors** (:func:`classify`): ``google.api_core`` and ``google.auth`` exceptions (and raw
gRPC errors, converted by their status code) become quixsinks errors by class and status
code, never by message text:

- no credentials, refused credentials, 401/403 -> access denied (a 403 whose reason is
  ``rateLimitExceeded`` or ``quotaExceeded`` is throttling);
- 404 -> not found;
- 429 / RESOURCE_EXHAUSTED -> :class:`SinkBackpressureError` (its ``retry_after`` from
  the response's ``Retry-After``, else the service's pause) or :class:`RetryableError`;
- 5xx, UNAVAILABLE, ABORTED, CANCELLED, UNKNOWN, a passed deadline, a dropped connection ->
  :class:`RetryableError`;
- any other API error -> :class:`DestinationError` (fails the task).

A :class:`GoogleService` names the service in messages and may classify first (its
``hook``: a topic or bucket that is missing, a refused record).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    QuixSinksError,
    RetryableError,
    SinkBackpressureError,
)
from .http import retry_after_seconds

__all__ = [
    "GoogleService",
    "classify",
    "credentials",
    "emulator_channel",
    "service_account_info",
]

#: the option that holds a service account key, in every Google sink and destination
OPTION = "service_account_json"
_KEY_FIELDS = ("client_email", "private_key", "token_uri")
#: a key file's path is short and on one line; longer text is taken for a key
_MAX_PATH = 4096
#: ``errors[].reason`` of a 403 that means "slow down", not "not allowed"
_THROTTLE_REASONS = frozenset({"rateLimitExceeded", "quotaExceeded", "userRateLimitExceeded"})


# -- credentials ------------------------------------------------------------------------------


def service_account_info(text: str) -> dict[str, Any]:
    """The fields of a service account key given as JSON text or as the path of its file.

    Raises:
        OptionError: not a readable key (the message never shows the value).
    """
    source: str | None = text.strip()
    if source is not None and not source.startswith("{"):
        path = os.path.expanduser(source)
        if len(source) > _MAX_PATH or "\n" in source or not os.path.isfile(path):
            raise _bad_key("is neither JSON text nor the path of a readable file")
        source = _read_text(path)
        if source is None:
            raise _bad_key("names a file that cannot be read")
    info = _json_or_none(source)
    if not isinstance(info, dict):  # text that starts with "{" is an object or no JSON
        raise _bad_key("is not valid JSON")
    if info.get("type") not in (None, "service_account") or not all(
        info.get(f) for f in _KEY_FIELDS
    ):
        raise _bad_key(
            "is not a usable service account key (type 'service_account' with "
            + ", ".join(_KEY_FIELDS[:-1])
            + f" and {_KEY_FIELDS[-1]})"
        )
    return info


def credentials(
    service_account_json: str | None,
    *,
    scopes: Sequence[str] | None = None,
    anonymous: bool = False,
) -> Any:
    """Credentials for a Google client.

    Args:
        service_account_json: the option's value (JSON text or a key file's path), or None.
        scopes: the OAuth scopes of a service account's tokens (None: the library's).
        anonymous: no key means anonymous requests (an emulator).

    Returns:
        service account credentials (their ``project_id`` is the key's project),
        ``AnonymousCredentials``, or None: the client library finds the application-default
        credentials itself.

    Raises:
        OptionError: the key cannot be read or loaded (the value is never shown).
    """
    if service_account_json is None:
        if not anonymous:
            return None
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()  # type: ignore[no-untyped-call]
    info = service_account_info(service_account_json)
    from google.oauth2 import service_account

    loaded = _load_key(service_account, info, scopes)
    if loaded is None:  # raised here, not in an except: the loader's error holds the key
        raise _bad_key("is not a usable service account key (its private key does not load)")
    return loaded


def emulator_channel(target: str, *, max_message_bytes: int | None = None) -> Any:
    """A plain-text gRPC channel to an emulator at ``host:port``."""
    import grpc

    options = []
    if max_message_bytes is not None:
        options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
    return grpc.insecure_channel(target, options=options)


def _load_key(module: Any, info: dict[str, Any], scopes: Sequence[str] | None) -> Any:
    try:
        return module.Credentials.from_service_account_info(
            info, scopes=list(scopes) if scopes else None
        )
    except (ValueError, KeyError, TypeError):
        return None


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _json_or_none(text: str | None) -> Any:
    try:
        return json.loads(text or "", strict=False)  # a pasted key may hold raw newlines
    except ValueError:
        return None


def _bad_key(what: str) -> OptionError:
    return OptionError(
        f"option {OPTION!r} {what}; give the content of a service account key file (JSON) "
        "or its path (the value is not shown)",
        option=OPTION,
        value="***",
        allowed=("service account key JSON", "the path of a key file"),
    )


# -- errors -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoogleService:
    """What one Google service adds to the shared error map.

    Attributes:
        name: what messages name as unreachable or answering (``"BigQuery"``, a topic).
        roles: what the credentials need, for an access-denied message.
        timed_out: the words for a call that got no answer, naming the options that bound it
            (see :func:`quixsinks.core.errors.timed_out`).
        connect_hint: advice for a connection that failed.
        throttle_seconds: the pause after throttling when the service sends no
            ``Retry-After`` (None: the RetryPolicy's backoff).
        denied: the access-denied error class.
        hook: classifies first, ``(exception, where) -> error or None``: the service's own
            cases (a missing topic or bucket, a refused record).
    """

    name: str
    roles: str
    timed_out: str = "timed out"
    connect_hint: str = "check the network and the endpoint"
    throttle_seconds: float | None = None
    denied: type[DestinationAccessDeniedError] = DestinationAccessDeniedError
    hook: Callable[[BaseException, str], QuixSinksError | None] | None = field(
        default=None, compare=False
    )


def classify(exc: BaseException, where: str, service: GoogleService) -> QuixSinksError | None:
    """The quixsinks error for an exception a Google client raised, or None for one that is
    not Google's, gRPC's or a transport's (a caller's bug: re-raise it).

    ``where`` starts each message (a table, a topic, an object; never a credential).
    """
    if isinstance(exc, QuixSinksError):
        return exc
    try:
        from google.api_core import exceptions as api
        from google.auth import exceptions as auth
    except ImportError:  # pragma: no cover - a Google client raised, so it is installed
        return None
    exc = _as_api_error(exc, api)
    if service.hook is not None:
        mine = service.hook(exc, where)
        if mine is not None:
            return mine
    if isinstance(exc, api.RetryError):
        if exc.cause is None:
            return RetryableError(f"{where}: {service.name}: {_short(exc.message)}")
        inner = classify(exc.cause, where, service)  # the last error behind the retries
        if isinstance(inner, RetryableError):
            return RetryableError(f"{inner.message} (the client library's retries ran out)")
        return inner
    text = _describe(exc)
    if isinstance(exc, auth.DefaultCredentialsError):
        return service.denied(
            f"{where}: no Google credentials found; give option {OPTION!r} or set up "
            "application-default credentials (gcloud auth application-default login, or "
            "GOOGLE_APPLICATION_CREDENTIALS)",
            location=where,
        )
    if isinstance(exc, auth.TransportError):  # fetching a token failed on the network
        return RetryableError(f"{where}: cannot reach Google's token service ({text})")
    if isinstance(exc, (auth.GoogleAuthError, api.Unauthorized)):
        return service.denied(
            f"{where}: the credentials were refused ({text}); check option {OPTION!r} or the "
            "application-default credentials (a wrong, expired or revoked key, or one of "
            "another project?)",
            location=where,
        )
    if isinstance(exc, api.NotFound):
        return DestinationNotFoundError(f"{where}: not found ({text})", location=where)
    throttled = isinstance(exc, (api.TooManyRequests, api.ResourceExhausted))
    if isinstance(exc, api.Forbidden) and not throttled:
        if _reason(exc) not in _THROTTLE_REASONS:
            return service.denied(
                f"{where}: access denied ({text}); {service.roles}", location=where
            )
        throttled = True
    if throttled:
        pause = retry_after_seconds(_headers(exc))
        pause = service.throttle_seconds if pause is None else pause
        message = f"{where}: {service.name} throttled the call ({text})"
        if pause is None:
            return RetryableError(message)
        return SinkBackpressureError(pause, message)
    if isinstance(exc, (api.DeadlineExceeded, TimeoutError)) or _is_requests(exc, "Timeout"):
        return RetryableError(f"{where}: {service.name} {service.timed_out} ({text})")
    if _transient(exc, api):
        pause = retry_after_seconds(_headers(exc))
        message = f"{where}: cannot reach {service.name} ({text})"
        if pause is not None:
            return SinkBackpressureError(pause, message)
        return RetryableError(message)
    if isinstance(exc, ConnectionError) or _is_requests(exc, "ConnectionError"):
        return RetryableError(
            f"{where}: cannot reach {service.name} ({type(exc).__name__}); {service.connect_hint}"
        )
    if isinstance(exc, api.GoogleAPICallError):
        return DestinationError(f"{where}: {service.name} answered {text}", location=where)
    return None


def _as_api_error(exc: BaseException, api: Any) -> BaseException:
    """A raw gRPC error (a channel's own call) as the api_core error of its status code."""
    try:
        import grpc
    except ImportError:  # pragma: no cover - only the REST clients are installed
        return exc
    if isinstance(exc, grpc.RpcError) and isinstance(exc, grpc.Call):
        converted: BaseException = api.from_grpc_error(exc)
        return converted
    return exc


def _transient(exc: BaseException, api: Any) -> bool:
    """5xx (but 501 and data loss), UNAVAILABLE, ABORTED, CANCELLED, UNKNOWN."""
    if isinstance(exc, (api.MethodNotImplemented, api.DataLoss)):
        return False
    return isinstance(exc, (api.ServerError, api.Aborted, api.Cancelled))


def _is_requests(exc: BaseException, name: str) -> bool:
    try:
        import requests
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, getattr(requests, name))


def _headers(exc: BaseException) -> Any:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return headers if hasattr(headers, "items") else None


def _reason(exc: BaseException) -> str:
    for error in getattr(exc, "errors", None) or []:
        if isinstance(error, dict) and error.get("reason"):
            return str(error["reason"])
    return ""


def _describe(exc: BaseException) -> str:
    """``NotFound 404: message`` (a gRPC error: its status name), on one line."""
    kind = type(exc).__name__
    status = getattr(exc, "grpc_status_code", None)
    code = getattr(status, "name", None) or getattr(exc, "code", None)
    text = getattr(exc, "message", None) or str(exc)
    head = f"{kind} {code}" if isinstance(code, (int, str)) and code else kind
    return f"{head}: {_short(str(text))}" if text else head


def _short(message: str | None, limit: int = 300) -> str:
    text = " ".join((message or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
