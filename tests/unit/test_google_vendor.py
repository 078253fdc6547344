"""Google's vendor layer without a server: one service-account rule set, one error map."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import grpc
import pytest
from google.api_core import exceptions as api

from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    GCSBucketAccessDeniedError,
    OptionError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
)
from quixsinks.core.vendors.google import (
    GoogleService,
    classify,
    credentials,
    service_account_info,
)

SERVICE = GoogleService(name="Example", roles="grant the role X")
KEY = {
    "type": "service_account",
    "client_email": "a@p.iam.gserviceaccount.com",
    "private_key": "-----BEGIN PRIVATE KEY-----\nSECRET-abc\n-----END PRIVATE KEY-----\n",
    "token_uri": "https://oauth2.example/token",
}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('{"private_key": "SECRET-abc"', "not valid JSON"),
        ("SECRET-abc, not a path", "neither JSON text nor the path"),
        ('["SECRET-abc"]', "neither JSON text nor the path"),
        ('{"type": "authorized_user", "refresh_token": "SECRET-abc"}', "not a usable"),
        (json.dumps({**KEY, "token_uri": ""}), "not a usable"),
    ],
)
def test_a_key_that_does_not_read_is_one_option_error_that_never_shows_it(
    value: str, why: str
) -> None:
    with pytest.raises(OptionError, match=why) as caught:
        service_account_info(value)
    error = caught.value
    assert error.option == "service_account_json"
    assert "SECRET" not in str(error)
    assert error.__context__ is None


def test_a_key_file_reads_like_its_text(tmp_path: Path) -> None:
    path = tmp_path / "key.json"
    path.write_text(json.dumps(KEY))
    assert service_account_info(str(path)) == service_account_info(json.dumps(KEY)) == KEY


def test_a_key_whose_private_key_does_not_load_is_refused_without_its_text() -> None:
    with pytest.raises(OptionError, match="does not load") as caught:
        credentials(json.dumps(KEY))
    assert "SECRET" not in str(caught.value)
    assert caught.value.__context__ is None


def test_no_key_means_application_default_or_anonymous_for_an_emulator() -> None:
    from google.auth.credentials import AnonymousCredentials

    assert credentials(None) is None
    assert isinstance(credentials(None, anonymous=True), AnonymousCredentials)


def test_errors_are_classified_by_class_and_status() -> None:
    assert isinstance(classify(api.NotFound("x"), "w", SERVICE), DestinationNotFoundError)
    denied = classify(api.Forbidden("no"), "w", SERVICE)
    assert isinstance(denied, DestinationAccessDeniedError)
    assert "grant the role X" in str(denied)
    quota = api.Forbidden("slow down", errors=[{"reason": "rateLimitExceeded"}])
    assert isinstance(classify(quota, "w", SERVICE), RetryableError)
    for transient in (api.ServiceUnavailable("x"), api.InternalServerError("x"), api.Aborted("x")):
        assert isinstance(classify(transient, "w", SERVICE), RetryableError)
    assert "timed out" in str(classify(api.DeadlineExceeded("x"), "w", SERVICE))
    refused = classify(api.BadRequest("x"), "w", SERVICE)
    assert type(refused) is DestinationError
    assert classify(ValueError("a caller's bug"), "w", SERVICE) is None


def test_throttling_waits_as_long_as_retry_after_says() -> None:
    class Response:
        headers = {"Retry-After": "7"}

    throttled = classify(api.TooManyRequests("x", response=Response()), "w", SERVICE)
    assert isinstance(throttled, SinkBackpressureError)
    assert throttled.retry_after == 7.0
    paced = GoogleService(name="Example", roles="", throttle_seconds=5.0)
    assert classify(api.ResourceExhausted("x"), "w", paced).retry_after == 5.0  # type: ignore[union-attr]
    unpaced = classify(api.ResourceExhausted("x"), "w", SERVICE)
    assert type(unpaced) is RetryableError


def test_the_last_error_behind_the_librarys_retries_decides() -> None:
    gone = api.RetryError("deadline", cause=api.NotFound("gone"))
    assert isinstance(classify(gone, "w", SERVICE), DestinationNotFoundError)
    busy = api.RetryError("deadline", cause=api.ServiceUnavailable("busy"))
    assert "retries ran out" in str(classify(busy, "w", SERVICE))


def test_a_raw_grpc_error_is_classified_by_its_status_code() -> None:
    class Failed(grpc.RpcError, grpc.Call):  # type: ignore[misc]
        def code(self) -> object:
            return grpc.StatusCode.UNAVAILABLE

        def details(self) -> str:
            return "connection refused"

        def trailing_metadata(self) -> tuple[()]:
            return ()

        def initial_metadata(self) -> tuple[()]:
            return ()

        def is_active(self) -> bool:
            return False

        def time_remaining(self) -> None:
            return None

        def cancel(self) -> bool:
            return False

        def add_callback(self, callback: object) -> bool:
            return False

    error = classify(Failed(), "w", SERVICE)
    assert isinstance(error, RetryableError)
    assert "UNAVAILABLE" in str(error)


def test_a_services_hook_and_denied_class_come_first() -> None:
    def hook(exc: BaseException, where: str) -> RecordError | None:
        return RecordError(f"{where}: refused") if isinstance(exc, api.InvalidArgument) else None

    service = GoogleService(name="S", roles="", denied=GCSBucketAccessDeniedError, hook=hook)
    assert isinstance(classify(api.InvalidArgument("x"), "w", service), RecordError)
    assert isinstance(classify(api.Unauthorized("x"), "w", service), GCSBucketAccessDeniedError)


def test_every_api_core_error_class_is_classified() -> None:
    """A class the map does not know would fail the task as a plain DestinationError: each
    one here is a deliberate choice (this fails when google.api_core adds a class)."""
    known_permanent = {
        "BadRequest", "InvalidArgument", "FailedPrecondition", "OutOfRange", "Conflict",
        "AlreadyExists", "PreconditionFailed", "MethodNotAllowed", "LengthRequired",
        "RequestRangeNotSatisfiable", "MethodNotImplemented", "DataLoss", "ClientError",
        "GoogleAPICallError", "Redirection", "MovedPermanently", "NotModified",
        "TemporaryRedirect", "ResumeIncomplete", "BadRequestError", "ResumableTransferError",
        "MissingStatusHeaderError", "TransferStalledError", "UnseekableStreamError",
        "UploadCancelledError",
    }  # fmt: skip
    for name, cls in inspect.getmembers(api, inspect.isclass):
        if not issubclass(cls, api.GoogleAPICallError):
            continue
        try:
            instance = cls("x")  # type: ignore[call-arg]
        except TypeError:
            continue
        error = classify(instance, "w", SERVICE)
        assert error is not None, name
        if type(error) is DestinationError:
            assert name in known_permanent, f"{name}: classify it, or list it as permanent"
