"""The Kinesis client: boto3 through the AWS vendor layer, cached per process, and the one
error boundary of Kinesis (:func:`translate` for a failed call, :func:`refused` for the
records a PutRecords answer turned down)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from quixsinks.core.clients import ClientCache, client_key, connect_timeout
from quixsinks.core.errors import (
    DestinationError,
    DestinationNotFoundError,
    QuixSinksError,
    RetryableError,
)
from quixsinks.core.vendors import aws
from quixsinks.core.vendors.http import import_client

from .options import KinesisOptions
from .wire import request_body

__all__ = [
    "RETRYABLE_ENTRY_CODES",
    "KinesisStreamNotFoundError",
    "call",
    "check_dependencies",
    "put_records",
    "refused",
    "translate",
]


@dataclass(frozen=True)
class _Client:
    """A process's boto3 client for one set of options, and its PutRecords with prebuilt
    bodies (None where this botocore cannot: the client's method then)."""

    boto: Any
    put: aws.JsonCall | None


# boto3 clients per process (Python workers are reused between tasks), closed at exit
_CLIENTS: ClientCache[_Client] = ClientCache("kinesis clients", lambda c: c.boto.close())

#: per-record ErrorCodes that mean "not now": the record is resent
RETRYABLE_ENTRY_CODES = frozenset(
    {"ProvisionedThroughputExceededException", "InternalFailure", "KMSThrottlingException"}
)


class KinesisStreamNotFoundError(DestinationNotFoundError):
    """The Kinesis stream does not exist in this region / endpoint (Quix's name)."""


def check_dependencies() -> None:
    """boto3 is installed, or MissingDependencyError names the ``kinesis`` extra."""
    import_client("boto3", package="boto3", extra="kinesis")


def _new_client(options: KinesisOptions) -> _Client:
    boto = aws.make_client(
        "kinesis",
        extra="kinesis",
        region_name=options.region_name,
        endpoint_url=options.endpoint_url,
        aws_access_key_id=options.aws_access_key_id,
        aws_secret_access_key=options.aws_secret_access_key,
        aws_session_token=options.aws_session_token,
        connect_timeout=connect_timeout(options.request_timeout_seconds),
        read_timeout=options.request_timeout_seconds,
        max_pool_connections=max(10, 2 * options.max_inflight),
        # every record is checked against Kinesis's limits before it is sent (wire.py);
        # botocore's per-record validation of the same would cost CPU per record again
        parameter_validation=False,
    )
    return _Client(boto, aws.JsonCall.of(boto))


def call(options: KinesisOptions, what: str, fn: Callable[[Any], Any]) -> Any:
    """``fn(client)`` with this process's boto3 client for ``options``; any error
    translated."""
    return _call(options, what, lambda c: fn(c.boto))


def put_records(options: KinesisOptions, what: str, entries: Sequence[dict[str, Any]]) -> Any:
    """PutRecords of ``entries`` (``put_records``'s ``Records``) into the options' stream;
    its answer (``FailedRecordCount``, ``Records``), any error translated.

    The request's JSON is built here (:func:`.wire.request_body`) and the answer read as
    JSON (:class:`~quixsinks.core.vendors.aws.JsonCall`): botocore's shape walk over each
    record and each result entry cost most of a task's CPU. The client signs and sends it
    as its own ``put_records`` would."""

    def send(c: _Client) -> Any:
        if c.put is None:
            return c.boto.put_records(StreamName=options.stream_name, Records=entries)
        return c.put("PutRecords", request_body(options.stream_name, entries))

    return _call(options, what, send)


def _call(options: KinesisOptions, what: str, fn: Callable[[_Client], Any]) -> Any:
    try:
        return fn(_CLIENTS.get(client_key(options), lambda: _new_client(options)))
    except Exception as exc:
        error = translate(
            exc,
            what,
            stream=options.stream_name,
            secrets=options.secret_values(),
            timeout=options.request_timeout_seconds,
        )
        if error is exc:
            raise
        raise error from None


def translate(
    exc: BaseException,
    where: str,
    *,
    stream: str,
    secrets: Sequence[str] = (),
    timeout: float | None = None,
) -> BaseException:
    """The quixsinks error for a failed Kinesis call (botocore's error, or ours unchanged);
    ``timeout``: ``request_timeout_seconds``, named when the call timed out. A timeout or a
    dropped connection is retryable: the records may have landed, and the resend carries
    the same dedupe ids."""

    def classify(info: aws.ClientErrorInfo, text: str) -> QuixSinksError | None:
        if info.code == "ResourceNotFoundException":
            return KinesisStreamNotFoundError(
                f"{where}: the stream {stream!r} does not exist in this region / endpoint; "
                f"create it first ({info.code}: {info.detail})",
                location=stream,
            )
        return None

    return aws.translate(
        exc,
        where,
        aws.AwsService(
            location=stream,
            classify=classify,
            denied_advice="check aws_access_key_id, aws_secret_access_key, aws_session_token "
            f"and region_name, and that they may put records into stream {stream!r}",
            timeout=timeout,
            secrets=tuple(secrets),
        ),
    )


def refused(answer: dict[str, Any], sent: int, *, where: str, stream: str) -> list[int]:
    """Indices of the records of a PutRecords answer to resend (throttled, an internal
    failure, or an unknown code); a permanent per-record error (KMS) fails the task.

    No per-record ErrorCode of PutRecords is about the record's content (they are
    throttling, internal failures and the stream's KMS key): none is a row-level refusal.
    What Kinesis refuses for a record's content (size, partition key, hash key) it refuses
    for the whole call, so :mod:`.wire` checks those before sending."""
    results = answer.get("Records") or []
    if len(results) != sent:
        raise RetryableError(
            f"{where}: PutRecords answered {len(results)} results for {sent} records"
        )
    if not answer.get("FailedRecordCount"):
        return []
    resend: list[int] = []
    for index, result in enumerate(results):
        code = result.get("ErrorCode")
        if not code:
            continue
        if code not in RETRYABLE_ENTRY_CODES and code.startswith("KMS"):
            raise DestinationError(
                f"{where}: PutRecords refused a record with {code}: "
                f"{result.get('ErrorMessage', '')} (check the stream's KMS key and its "
                "permissions)",
                location=stream,
            )
        resend.append(index)
    return resend
