"""Specification of the exception tree (quixsinks.core.errors).

Errors cross from Spark executors to the driver by pickle: each one must come back
with its class, message and attributes.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from quixsinks.core import errors
from quixsinks.core.errors import (
    CommitError,
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    InvalidFormatError,
    LocalStateError,
    MissingDependencyError,
    OptionError,
    QuixSinksError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
    format_allowed,
)

# (error, the attributes it must keep through a pickle round trip)
EXAMPLES: list[tuple[QuixSinksError, dict[str, Any]]] = [
    (QuixSinksError("boom"), {}),
    (
        OptionError("bad option", option="mode", value="medium", allowed=("fast", "slow")),
        {"option": "mode", "value": "medium", "allowed": ("fast", "slow")},
    ),
    (
        InvalidFormatError("bad format", option="format", value="xml", allowed=("json",)),
        {"option": "format", "value": "xml", "allowed": ("json",)},
    ),
    (RecordError("bad row", column="value", row=3), {"column": "value", "row": 3}),
    (DestinationError("refused", location="s3://b/k"), {"location": "s3://b/k"}),
    (DestinationNotFoundError("missing", location="/data"), {"location": "/data"}),
    (DestinationAccessDeniedError("denied", location="/data"), {"location": "/data"}),
    (CommitError("commit failed"), {}),
    (RetryableError("try again", retry_after=1.5), {"retry_after": 1.5}),
    (SinkBackpressureError(2.5), {"retry_after": 2.5}),
    (SinkBackpressureError(0.0, "slow down please"), {"retry_after": 0.0}),
    (MissingDependencyError("redis", "redis"), {"extra": "redis"}),
    (
        LocalStateError("refused", path="/tmp/x", reason="a symbolic link"),
        {"path": "/tmp/x", "reason": "a symbolic link"},
    ),
]
IDS = [f"{type(e).__name__}-{i}" for i, (e, _) in enumerate(EXAMPLES)]


def round_trip(error: QuixSinksError) -> QuixSinksError:
    return pickle.loads(pickle.dumps(error))  # type: ignore[no-any-return]


@pytest.mark.parametrize(("error", "attributes"), EXAMPLES, ids=IDS)
def test_error_pickles_with_its_class(error: QuixSinksError, attributes: dict[str, Any]) -> None:
    assert type(round_trip(error)) is type(error)


@pytest.mark.parametrize(("error", "attributes"), EXAMPLES, ids=IDS)
def test_error_pickles_with_its_message(error: QuixSinksError, attributes: dict[str, Any]) -> None:
    copy = round_trip(error)
    assert (str(copy), copy.message) == (str(error), error.message)


@pytest.mark.parametrize(("error", "attributes"), EXAMPLES, ids=IDS)
def test_error_pickles_with_its_attributes(
    error: QuixSinksError, attributes: dict[str, Any]
) -> None:
    copy = round_trip(error)
    assert {name: getattr(copy, name) for name in attributes} == attributes


def test_pickled_error_pickles_again() -> None:
    error = round_trip(round_trip(RecordError("bad row", column="c", row=1)))
    assert (error.column, error.row) == ("c", 1)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", [n for n in errors.__all__ if n[0].isupper()])
def test_every_error_derives_from_quixsinks_error(name: str) -> None:
    assert issubclass(getattr(errors, name), QuixSinksError)


@pytest.mark.parametrize(
    ("error_class", "base"),
    [
        (OptionError, ValueError),
        (InvalidFormatError, OptionError),
        (RecordError, ValueError),
        (DestinationNotFoundError, DestinationError),
        (DestinationAccessDeniedError, DestinationError),
        (SinkBackpressureError, RetryableError),
        (MissingDependencyError, ImportError),
    ],
)
def test_error_is_a(error_class: type[Exception], base: type[Exception]) -> None:
    assert issubclass(error_class, base)


def test_missing_dependency_is_caught_as_import_error() -> None:
    with pytest.raises(ImportError):
        raise MissingDependencyError("psycopg2", "postgresql")


def test_missing_dependency_names_the_extra_to_install() -> None:
    assert "quixsinks[postgresql]" in str(MissingDependencyError("psycopg2", "postgresql"))


def test_backpressure_retry_after_defaults_to_zero() -> None:
    assert SinkBackpressureError().retry_after == 0.0


def test_backpressure_with_negative_retry_after_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="retry_after"):
        SinkBackpressureError(-1)


def test_backpressure_keeps_a_custom_message() -> None:
    assert str(SinkBackpressureError(1.0, "HTTP 429")) == "HTTP 429"


@pytest.mark.parametrize(
    ("values", "text"),
    [([], ""), (["a"], "'a'"), (["a", "b"], "'a' or 'b'"), (["a", "b", "c"], "'a', 'b' or 'c'")],
)
def test_format_allowed(values: list[str], text: str) -> None:
    assert format_allowed(values) == text


@pytest.mark.parametrize(
    ("text", "expected", "message"),
    [
        (
            "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: "
            'Traceback (most recent call last):\n  File "x.py", line 83, in edge\n'
            "quixsinks.core.errors.OptionError: file: unknown option 'pathh'\n SQLSTATE: 38000",
            errors.OptionError,
            "file: unknown option 'pathh'",
        ),
        (
            "[STREAM_FAILED] ... quixsinks.core.errors.CommitError: pg: no commit SQLSTATE: "
            "38000 SQLSTATE: XXKST\n=== Streaming Query ===",
            errors.CommitError,
            "pg: no commit",
        ),
        (
            "quixsinks.spark.workers.WorkerPythonError: workers start python3",
            None,  # a subclass outside core.errors, found by its module
            "workers start python3",
        ),
    ],
)
def test_error_from_rebuilds_the_error_in_sparks_text(
    text: str, expected: type[QuixSinksError] | None, message: str
) -> None:
    found = errors.error_from(text)
    assert found is not None
    assert found.message == message
    if expected is not None:
        assert type(found) is expected
    else:
        assert type(found).__name__ == "WorkerPythonError"


def test_error_from_ignores_what_is_not_a_quixsinks_error() -> None:
    assert errors.error_from("builtins.ValueError: no") is None
    assert errors.error_from("quixsinks.core.errors.NotAnError: made up") is None
    assert errors.error_from("quixsinks.core.errors.format_allowedError: x") is None
