"""AWS: one boto3 client builder and one botocore error map for every AWS service we use.

:func:`make_client` builds a boto3 client from explicit credentials (else boto3's default
chain), a region, an endpoint and timeouts, with botocore's own retries off by default:
the sink's :class:`~quixsinks.core.backpressure.RetryPolicy` retries, and counts, every
retry. :func:`translate` is the error map behind each AWS destination's one boundary: a
``ClientError`` is classified by its error code and HTTP status (never its text), the
``BotoCoreError``\\ s by their class, and :class:`AwsService` is the per-service hook (what
"not found" means, which access-denied error to raise, which options to name).
:class:`JsonCall` sends a body the caller built through a client of a JSON-protocol
service (Kinesis's PutRecords), for bulk calls whose records botocore would otherwise walk
one by one.

boto3 is imported only when a client is made (the ``s3`` and ``kinesis`` extras).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import (
    DestinationError,
    OptionError,
    QuixSinksError,
    RetryableError,
    SinkBackpressureError,
)
from ..secrets import scrub
from .hooks import ServiceHook
from .http import import_client, retry_after_seconds

__all__ = [
    "AwsService",
    "ClientErrorInfo",
    "JsonCall",
    "client_error_info",
    "make_client",
    "translate",
]

#: Error codes of any AWS service that mean "refused credentials or permissions".
DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "AccountProblem",
        "AllAccessDisabled",
        "ExpiredToken",
        "ExpiredTokenException",
        "Forbidden",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "InvalidSecurity",
        "InvalidSignatureException",
        "InvalidToken",
        "KMSAccessDeniedException",
        "MissingAuthenticationToken",
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
        "UnrecognizedClientException",
    }
)
#: Error codes of any AWS service that mean "not now": the call is retried whole.
RETRYABLE_CODES = frozenset(
    {
        "ConditionalRequestConflict",
        "InternalError",
        "InternalFailure",
        "InternalFailureException",
        "KMSThrottlingException",
        "LimitExceededException",
        "OperationAborted",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
    }
)
#: HTTP statuses that are retryable whatever the code says.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
#: What a bodyless answer (HEAD) means.
_REASONS = {403: "Forbidden (wrong credentials, or no permission)", 404: "Not Found"}


def make_client(
    service: str,
    *,
    extra: str,
    region_name: str | None = None,
    endpoint_url: str | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
    connect_timeout: float,
    read_timeout: float,
    max_attempts: int = 1,
    **config: Any,
) -> Any:
    """A boto3 client of ``service``; credentials not given come from boto3's default chain.

    Args:
        extra: the quixsinks extra that brings boto3, named when it is missing.
        max_attempts: botocore's attempts per call, the first included (1: no retries of
            its own, the RetryPolicy does them).
        config: more ``botocore.config.Config`` settings (pool size, addressing style...).

    Raises:
        MissingDependencyError: boto3 is not installed.
    """
    boto3 = import_client("boto3", package="boto3", extra=extra)
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=aws_access_key_id,
        aws_secret_access_key=aws_secret_access_key,
        aws_session_token=aws_session_token,
        region_name=region_name,
    )
    settings = Config(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"total_max_attempts": max_attempts, "mode": "standard"},
        **config,
    )
    return session.client(service, endpoint_url=endpoint_url, config=settings)


class JsonCall:
    """One operation of a JSON-protocol AWS service, called with a body the caller built.

    botocore's client walks a request's parameters through the service's shapes to
    serialize them, and walks the answer back the same way: for Kinesis's PutRecords that
    is most of a task's CPU (serializing 500 records, then parsing 500 result entries, per
    call). A bulk caller that builds the request's JSON itself hands it to
    :meth:`__call__`; the client's own parts do the rest, as in one of its calls: its
    signer signs (its credentials, region and signature version), its HTTP session sends
    (its timeouts, pool, proxies and TLS settings), and an error answer is parsed by
    botocore and raised as the client's own ``ClientError`` subclass (so :func:`translate`
    maps it as any other). A success is the answer's JSON, read with :func:`json.loads`.

    The signer and HTTP session are attributes botocore keeps private (``_request_signer``,
    ``_endpoint``): :meth:`of` answers None when a botocore without them is installed, and
    the caller then uses the client's own method. botocore's event hooks do not run for
    these calls (nothing of ours registers any).

    Args:
        client: a boto3 client of a JSON-protocol service (:func:`make_client`).
    """

    def __init__(self, client: Any) -> None:
        from botocore.awsrequest import AWSRequest
        from botocore.parsers import create_parser

        self._client = client
        self._signer = client._request_signer
        self._http = client._endpoint.http_session
        self._request = AWSRequest
        model = client.meta.service_model
        self._model = model
        self._target = model.metadata["targetPrefix"]
        self._content_type = f"application/x-amz-json-{model.metadata.get('jsonVersion', '1.0')}"
        self._url = client.meta.endpoint_url.rstrip("/") + "/"
        self._user_agent = client.meta.config.user_agent or "quixsinks (botocore)"
        self._errors = create_parser(model.resolved_protocol)

    @classmethod
    def of(cls, client: Any) -> JsonCall | None:
        """A JsonCall of ``client``; None when its botocore lacks the parts it needs, or
        the service does not speak JSON."""
        try:
            model = client.meta.service_model
            if model.resolved_protocol != "json" or "targetPrefix" not in model.metadata:
                return None
            client._request_signer.sign  # noqa: B018 - checks the attribute is there
            client._endpoint.http_session.send  # noqa: B018
            return cls(client)
        except (AttributeError, ImportError, KeyError):
            return None

    def __call__(self, operation: str, body: bytes) -> dict[str, Any]:
        """The answer of ``operation`` to ``body`` (its JSON text, UTF-8).

        Raises:
            botocore.exceptions.ClientError: the service answered an error (the client's
                modeled subclass where there is one).
            botocore.exceptions.BotoCoreError: no answer (timeout, lost connection, no
                credentials), as the client's own call raises it.
        """
        request = self._request(
            method="POST",
            url=self._url,
            data=body,
            headers={
                "X-Amz-Target": f"{self._target}.{operation}",
                "Content-Type": self._content_type,
                "User-Agent": self._user_agent,
            },
        )
        self._signer.sign(operation, request)
        answer = self._http.send(request.prepare())
        content = answer.content
        if answer.status_code < 300:
            parsed: dict[str, Any] = json.loads(content) if content else {}
            return parsed
        error = self._errors.parse(
            {"status_code": answer.status_code, "headers": answer.headers, "body": content},
            self._model.operation_model(operation).output_shape,
        )
        code = error.get("Error", {}).get("Code")
        raise self._client.exceptions.from_code(code)(error, operation)


@dataclass(frozen=True)
class ClientErrorInfo:
    """What a botocore ``ClientError`` says, read once.

    Attributes:
        code: the service's error code, else the HTTP status as text ('' if neither).
        status: the HTTP status, if any.
        message: the service's message, secrets scrubbed ('' if none).
        headers: the answer's HTTP headers.
    """

    code: str
    status: int | None
    message: str
    headers: Mapping[str, Any]

    @property
    def detail(self) -> str:
        """The message, or what the status means when the answer had no body (HEAD)."""
        return self.message or _REASONS.get(self.status or 0, f"HTTP {self.status}")


def client_error_info(exc: Any, secrets: Iterable[Any] = ()) -> ClientErrorInfo:
    """The code, status, message and headers of a botocore ``ClientError``."""
    response = getattr(exc, "response", None) or {}
    error = response.get("Error", {})
    meta = response.get("ResponseMetadata", {})
    status = meta.get("HTTPStatusCode")
    return ClientErrorInfo(
        code=str(error.get("Code") or status or ""),
        status=status,
        message=scrub(str(error.get("Message") or ""), secrets),
        headers=meta.get("HTTPHeaders") or {},
    )


@dataclass(frozen=True)
class AwsService(ServiceHook):
    """The per-service hook of :func:`translate`: what one AWS service adds to the map
    (besides :class:`~quixsinks.core.vendors.hooks.ServiceHook`'s location, access-denied
    error, timeout and secrets).

    Attributes:
        classify: the service's own codes (a missing bucket, stream or key), tried first:
            ``classify(info, text)`` returns an error, or None to fall through.
    """

    classify: Callable[[ClientErrorInfo, str], QuixSinksError | None] = lambda info, text: None


def translate(exc: BaseException, what: str, service: AwsService) -> BaseException:
    """The quixsinks error for ``exc`` raised by a boto3 call ``what`` (``exc`` itself when
    it is not botocore's, or already ours).

    Most specific first: the service's own codes; refused credentials (code or 403); a
    throttled or failing service (code, or 429/5xx; with ``Retry-After``, backpressure);
    anything else the service refused is permanent. Without an answer: no credentials, no
    region, a timeout and a lost connection (retryable: the call may have landed, which an
    at-least-once resend or an idempotent write absorbs).
    """
    if isinstance(exc, QuixSinksError):
        return exc
    try:
        import botocore.exceptions as bex
    except ImportError:  # pragma: no cover - boto3 brings botocore
        return exc
    where = service.location

    def clean(text: str) -> str:
        return scrub(text, service.secrets)

    if isinstance(exc, bex.ClientError):
        info = client_error_info(exc, service.secrets)
        text = f"{what} failed: {info.code}: {info.detail}"
        special = service.classify(info, text)
        if special is not None:
            return special
        if info.code in DENIED_CODES or info.status == 403:
            return service.denied(f"{text}; {service.denied_advice}", where)
        if info.code in RETRYABLE_CODES or info.status in RETRYABLE_STATUSES:
            retry_after = retry_after_seconds(info.headers)
            if retry_after is not None:
                return SinkBackpressureError(retry_after, text)
            return RetryableError(text)
        return DestinationError(text, location=where)
    if isinstance(exc, (bex.NoCredentialsError, bex.PartialCredentialsError)):
        return service.denied(
            f"{what} failed: no usable AWS credentials ({type(exc).__name__}); set "
            "aws_access_key_id and aws_secret_access_key, or configure the default credential "
            "chain (environment, profile, instance role)",
            where,
        )
    if isinstance(exc, bex.NoRegionError):
        return OptionError(
            f"{what}: no AWS region; set 'region_name' (or AWS_REGION)", option="region_name"
        )
    if isinstance(exc, (bex.ConnectTimeoutError, bex.ReadTimeoutError)):
        return RetryableError(f"{what} {service.timed_out()}: {clean(str(exc))}")
    if isinstance(exc, (bex.ConnectionError, bex.HTTPClientError)):
        return RetryableError(f"{what} failed: {clean(str(exc))}")
    if isinstance(exc, bex.BotoCoreError):
        return DestinationError(f"{what} failed: {clean(str(exc))}", location=where)
    return exc
