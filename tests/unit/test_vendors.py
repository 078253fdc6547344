"""The vendor layer's shared helpers (quixsinks.core.vendors)."""

from __future__ import annotations

import pytest

from quixsinks.core.errors import MissingDependencyError
from quixsinks.core.vendors.http import import_client, retry_after_seconds

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "2.5"}, 2.5),
        ({"RETRY-AFTER": "-3"}, 0.0),
        ({"Retry-After": "Tue, 14 Nov 2023 22:13:50 GMT"}, 30.0),
        ({"Retry-After": "Tue, 14 Nov 2023 22:00:00 GMT"}, 0.0),  # in the past
        ({"retry-after-ms": "1500"}, 1.5),
        ({"x-ms-retry-after-ms": "250"}, 0.25),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "nan"}, None),
        ({"Content-Type": "text/plain"}, None),
        ({}, None),
        (None, None),
        ("12", 12.0),
        (b"3", 3.0),
        (4, 4.0),
        ("Tue, 14 Nov 2023 22:13:21 GMT", 1.0),
        ("", None),
    ],
)
def test_retry_after_reads_seconds_dates_and_millisecond_headers(
    source: object, expected: float | None
) -> None:
    assert retry_after_seconds(source, now=NOW) == expected


def test_retry_after_reads_multidict_like_headers() -> None:
    class Headers:
        def items(self) -> list[tuple[str, str]]:
            return [("Retry-After", "9")]

    assert retry_after_seconds(Headers()) == 9.0


def test_import_client_names_the_extra() -> None:
    assert import_client("json", package="json", extra="core").dumps([]) == "[]"
    with pytest.raises(
        MissingDependencyError,
        match=r"'no-such-client' is not installed; install it with: pip install "
        r"'quixsinks\[nothing\]'",
    ):
        import_client("no_such_client_module", package="no-such-client", extra="nothing")
