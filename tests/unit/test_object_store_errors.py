"""The S3 and Azure error boundaries, fed the SDKs' real exception classes, and what the
destinations pickle and show (never a secret)."""

from __future__ import annotations

import pickle

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceExistsError
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from quixsinks.core import azure as azure_module
from quixsinks.core import s3 as s3_module
from quixsinks.core.azure import AzureDestination
from quixsinks.core.errors import (
    AzureContainerAccessDeniedError,
    AzureContainerNotFoundError,
    DestinationNotFoundError,
    RetryableError,
    S3BucketAccessDeniedError,
    S3BucketNotFoundError,
    SinkBackpressureError,
)
from quixsinks.core.s3 import S3Destination

SECRET = "s3cr3t-value-never-shown"


def client_error(code: str, status: int, headers: dict[str, str] | None = None) -> ClientError:
    response = {
        "Error": {"Code": code, "Message": "message"},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers or {}},
    }
    return ClientError(response, "PutObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("NoSuchBucket", 404, S3BucketNotFoundError),
        ("NoSuchKey", 404, DestinationNotFoundError),
        ("AccessDenied", 403, S3BucketAccessDeniedError),
        ("InvalidAccessKeyId", 403, S3BucketAccessDeniedError),
        ("SignatureDoesNotMatch", 403, S3BucketAccessDeniedError),
        ("SlowDown", 503, RetryableError),
        ("InternalError", 500, RetryableError),
    ],
)
def test_s3_answers_are_translated(code: str, status: int, expected: type[Exception]) -> None:
    error = s3_module._translate(client_error(code, status), "b", "s3://b/k")
    assert type(error) is expected


def test_s3_slowdown_with_retry_after_is_backpressure() -> None:
    error = s3_module._translate(client_error("SlowDown", 503, {"retry-after": "3"}), "b", "w")
    assert isinstance(error, SinkBackpressureError)
    assert error.retry_after == 3


def test_s3_412_is_a_lost_create_only_race() -> None:
    error = s3_module._translate(client_error("PreconditionFailed", 412), "b", "w")
    assert isinstance(error, s3_module._PreconditionFailed)


def test_s3_network_failures_retry_and_missing_credentials_are_access_denied() -> None:
    assert isinstance(
        s3_module._translate(EndpointConnectionError(endpoint_url="http://x"), "b", "w"),
        RetryableError,
    )
    assert isinstance(
        s3_module._translate(NoCredentialsError(), "b", "w"), S3BucketAccessDeniedError
    )


def test_a_programming_error_is_not_turned_into_a_destination_error() -> None:
    bug = TypeError("a bug of ours")
    assert s3_module._translate(bug, "b", "w") is bug
    assert azure_module._translate(bug, "c", "w") is bug


def azure_error(cls: type[HttpResponseError], code: str, status: int) -> HttpResponseError:
    error = cls(message="message")
    error.error_code = code
    error.status_code = status
    return error


@pytest.mark.parametrize(
    ("cls", "code", "status", "expected"),
    [
        (HttpResponseError, "ContainerNotFound", 404, AzureContainerNotFoundError),
        (HttpResponseError, "BlobNotFound", 404, DestinationNotFoundError),
        (ClientAuthenticationError, "AuthenticationFailed", 403, AzureContainerAccessDeniedError),
        (HttpResponseError, "ServerBusy", 503, RetryableError),
        (HttpResponseError, "OperationTimedOut", 500, RetryableError),
    ],
)
def test_azure_answers_are_translated(
    cls: type[HttpResponseError], code: str, status: int, expected: type[Exception]
) -> None:
    assert type(azure_module._translate(azure_error(cls, code, status), "c", "w")) is expected


def test_azure_blob_already_exists_is_a_lost_create_only_race() -> None:
    error = azure_module._translate(
        azure_error(ResourceExistsError, "BlobAlreadyExists", 409), "c", "w"
    )
    assert isinstance(error, azure_module._AlreadyExists)


@pytest.mark.parametrize(
    "dest",
    [
        S3Destination("b", "p", aws_access_key_id="AKIA", aws_secret_access_key=SECRET),
        AzureDestination("c", "p", connection_string=f"AccountName=a;AccountKey={SECRET};"),
    ],
    ids=["s3", "azure"],
)
def test_repr_shows_no_secret_and_pickles_without_a_client(dest: object) -> None:
    assert SECRET not in repr(dest)
    copy = pickle.loads(pickle.dumps(dest))
    assert copy == dest
    assert "client" not in " ".join(vars(copy))


def test_azure_urls_parse() -> None:
    dest = AzureDestination.from_url(
        "abfss://box@acct.dfs.core.windows.net/a/b", account_key=SECRET
    )
    assert (dest.container, dest.prefix, dest.account_url) == (
        "box",
        "a/b",
        "https://acct.blob.core.windows.net",
    )
    assert AzureDestination.from_url("az://box/x", connection_string="c").url == "az://box/x"
