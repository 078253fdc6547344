"""The AWS vendor layer (quixsinks.core.vendors.aws): the client builder and the one botocore
error map that S3 and Kinesis translate through."""

from __future__ import annotations

import sys
from typing import Any

import pytest

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
from quixsinks.core.vendors.aws import AwsService, ClientErrorInfo, make_client, translate

SECRET = "wJalrXUtnFEMI-not-a-real-secret"
SERVICE = AwsService(location="s3://bucket", secrets=(SECRET,), timeout=2.5)


def client_error(code: str, status: int, *, headers: dict[str, str] | None = None) -> Any:
    from botocore.exceptions import ClientError

    return ClientError(
        {
            "Error": {"Code": code, "Message": f"the server echoes {SECRET}"},
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers or {}},
        },
        "PutObject",
    )


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("AccessDenied", 403, DestinationAccessDeniedError),
        ("403", 403, DestinationAccessDeniedError),  # a HEAD answer: only the status
        ("UnrecognizedClientException", 400, DestinationAccessDeniedError),
        ("ExpiredTokenException", 400, DestinationAccessDeniedError),
        ("SlowDown", 503, RetryableError),
        ("ThrottlingException", 400, RetryableError),
        ("ProvisionedThroughputExceededException", 400, RetryableError),
        ("RequestTimeout", 400, RetryableError),
        ("Anything", 502, RetryableError),
        ("TooManyRequests", 429, RetryableError),
        ("ValidationException", 400, DestinationError),
        ("MalformedXML", 400, DestinationError),
    ],
)
def test_client_errors_are_classified_by_code_and_status(
    code: str, status: int, expected: type
) -> None:
    error = translate(client_error(code, status), "PutObject", SERVICE)
    assert type(error) is expected
    assert SECRET not in str(error)
    assert code in str(error)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7.0), ("Thu, 01 Jan 2099 00:00:00 GMT", None)],
)
def test_retry_after_makes_backpressure_in_seconds_or_as_a_date(
    header: str, seconds: float | None
) -> None:
    error = translate(client_error("SlowDown", 503, headers={"retry-after": header}), "w", SERVICE)
    assert isinstance(error, SinkBackpressureError)
    if seconds is not None:
        assert error.retry_after == seconds
    else:
        assert error.retry_after > 0  # a date in the future: honoured (the RetryPolicy caps it)


def test_the_service_hook_wins_over_the_shared_map() -> None:
    class Missing(DestinationNotFoundError):
        pass

    def classify(info: ClientErrorInfo, text: str) -> QuixSinksError | None:
        return Missing(f"{text} (ours)") if info.code == "NoSuchThing" else None

    service = AwsService(location="x", classify=classify)
    error = translate(client_error("NoSuchThing", 404), "GetThing", service)
    assert type(error) is Missing
    assert "GetThing failed: NoSuchThing" in str(error)
    assert type(translate(client_error("Other", 404), "GetThing", service)) is DestinationError


def test_access_denied_uses_the_services_error_and_advice() -> None:
    class Denied(DestinationAccessDeniedError):
        pass

    service = AwsService(
        location="stream",
        denied=lambda message, where: Denied(message, location=where),
        denied_advice="check 'aws_access_key_id'",
    )
    error = translate(client_error("AccessDeniedException", 400), "PutRecords", service)
    assert type(error) is Denied
    assert "check 'aws_access_key_id'" in str(error)
    assert error.location == "stream"


def test_errors_without_an_answer() -> None:
    import botocore.exceptions as bex

    assert isinstance(
        translate(bex.NoCredentialsError(), "w", SERVICE), DestinationAccessDeniedError
    )
    region = translate(bex.NoRegionError(), "w", SERVICE)
    assert isinstance(region, OptionError)
    assert region.option == "region_name"
    timeout = translate(bex.ReadTimeoutError(endpoint_url="http://x"), "w", SERVICE)
    assert isinstance(timeout, RetryableError)
    assert "timed out (no answer in 2.5 s; option 'request_timeout_seconds')" in str(timeout)
    dropped = translate(bex.EndpointConnectionError(endpoint_url="http://x"), "w", SERVICE)
    assert isinstance(dropped, RetryableError)
    other = translate(bex.ParamValidationError(report="bad"), "w", SERVICE)
    assert type(other) is DestinationError


def test_every_botocore_error_class_has_a_quixsinks_translation() -> None:
    import botocore.exceptions as bex

    for cls in vars(bex).values():
        if not (isinstance(cls, type) and issubclass(cls, bex.BotoCoreError)):
            continue
        exc = cls.__new__(cls)
        exc.kwargs = {}
        Exception.__init__(exc, "boom")
        exc.fmt = "boom"
        assert isinstance(translate(exc, "w", SERVICE), QuixSinksError), cls


def test_other_exceptions_and_ours_come_back_unchanged() -> None:
    mine = RetryableError("mine")
    assert translate(mine, "w", SERVICE) is mine
    foreign = KeyError("x")
    assert translate(foreign, "w", SERVICE) is foreign


def test_make_client_turns_botocore_retries_off_and_sets_the_timeouts() -> None:
    client = make_client(
        "kinesis",
        extra="kinesis",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:1",
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key=SECRET,
        connect_timeout=1.5,
        read_timeout=4.0,
    )
    try:
        config = client.meta.config
        assert config.retries["total_max_attempts"] == 1
        assert (config.connect_timeout, config.read_timeout) == (1.5, 4.0)
        assert client.meta.region_name == "us-east-1"
    finally:
        client.close()


def test_make_client_without_boto3_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(MissingDependencyError, match=r"quixsinks\[kinesis\]"):
        make_client("kinesis", extra="kinesis", connect_timeout=1, read_timeout=1)
