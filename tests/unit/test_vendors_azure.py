"""The Azure vendor layer (quixsinks.core.vendors.azure): the one azure-core error map that
Azure Blob Storage translates through, and the client builder's refusals."""

from __future__ import annotations

from typing import Any

import pytest

from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    QuixSinksError,
    RetryableError,
    SinkBackpressureError,
)
from quixsinks.core.vendors.azure import (
    AzureService,
    ResponseInfo,
    blob_service_client,
    parse_connection_string,
    translate,
)

SECRET = "sv=2024&sig=not-a-real-signature"
SERVICE = AzureService(location="az://c/p", name="Azure Blob Storage", secrets=(SECRET,), timeout=3)


class Response:
    """What azure-core reads of an HTTP answer (an HttpResponseError keeps it)."""

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers
        self.reason = "reason"
        self.request = None

    def text(self, encoding: str | None = None) -> str:
        return ""


def http_error(status: int, code: str = "", **headers: str) -> Any:
    from azure.core.exceptions import HttpResponseError

    if code:
        headers["x-ms-error-code"] = code
    return HttpResponseError(message=f"echo {SECRET}", response=Response(status, headers))


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (403, "AuthenticationFailed", DestinationAccessDeniedError),
        (401, "", DestinationAccessDeniedError),
        (400, "AuthorizationPermissionMismatch", DestinationAccessDeniedError),
        (404, "BlobNotFound", DestinationNotFoundError),
        (503, "ServerBusy", RetryableError),
        (500, "OperationTimedOut", RetryableError),
        (429, "", RetryableError),
        (500, "InvalidQueryParameterValue", DestinationError),
        (409, "LeaseIdMissing", DestinationError),
    ],
)
def test_answers_are_classified_by_status_and_error_code(
    status: int, code: str, expected: type
) -> None:
    error = translate(http_error(status, code), SERVICE)
    assert type(error) is expected
    assert f"HTTP {status}" in str(error)
    assert "sig=" not in str(error)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [({"Retry-After": "2"}, 2.0), ({"x-ms-retry-after-ms": "1500"}, 1.5)],
)
def test_retry_after_makes_backpressure(headers: dict[str, str], seconds: float) -> None:
    error = translate(http_error(503, "ServerBusy", **headers), SERVICE)
    assert isinstance(error, SinkBackpressureError)
    assert error.retry_after == seconds


def test_the_service_hook_wins_over_the_shared_map() -> None:
    class Missing(DestinationNotFoundError):
        pass

    def classify(info: ResponseInfo) -> QuixSinksError | None:
        return Missing(info.detail) if info.code == "ContainerNotFound" else None

    service = AzureService(location="x", classify=classify)
    assert type(translate(http_error(404, "ContainerNotFound"), service)) is Missing
    assert type(translate(http_error(404, "BlobNotFound"), service)) is DestinationNotFoundError


def test_transport_errors_are_retryable_and_a_timeout_names_its_option() -> None:
    from azure.core.exceptions import ServiceRequestError, ServiceResponseTimeoutError

    timeout = translate(ServiceResponseTimeoutError("read timed out"), SERVICE)
    assert isinstance(timeout, RetryableError)
    assert "option 'storage_timeout_seconds'" in str(timeout)
    unreachable = translate(ServiceRequestError(f"http://h/c?{SECRET} refused"), SERVICE)
    assert isinstance(unreachable, RetryableError)
    assert "sig=" not in str(unreachable)


def test_an_exception_not_of_the_sdk_is_left_to_the_caller() -> None:
    assert translate(KeyError("x"), SERVICE) is None


def test_a_malformed_credential_is_an_option_error_naming_the_option() -> None:
    with pytest.raises(OptionError) as info:
        blob_service_client(
            "https://acct.blob.core.windows.net",
            connection_string="this is no connection string",
            timeout=1,
            retries=0,
            status_retries=0,
            retry_pause=0,
            credential_option="azure_connection_string",
        )
    assert info.value.option == "azure_connection_string"


def test_connection_strings_parse_into_their_pairs() -> None:
    text = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a=b==;"
    assert parse_connection_string(text) == {
        "DefaultEndpointsProtocol": "https",
        "AccountName": "acct",
        "AccountKey": "a=b==",
    }
