"""The `influxdb1` sink's options: Quix's host and port, URLs, credentials, write parameters."""

from __future__ import annotations

import pytest

from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationNotFoundError,
    OptionError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
)
from quixsinks.sinks.influxdb1 import InfluxDB1Options, InfluxDB1Sink
from quixsinks.sinks.influxdb1.client import Answer, translate

BASE = {"host": "influx.example.com", "database": "db", "measurement": "m"}


def options(**given: str) -> InfluxDB1Options:
    return InfluxDB1Options.from_options({**BASE, **given})


def test_a_host_name_and_port_make_the_url_as_in_quix() -> None:
    assert options().url == "http://influx.example.com:8086"
    assert options(port="9999", ssl="true").url == "https://influx.example.com:9999"
    assert options(host="::1").url == "http://[::1]:8086"


def test_a_url_host_sets_the_scheme_and_its_port_wins() -> None:
    assert options(host="https://influx.example.com").url == "https://influx.example.com:8086"
    assert options(host="http://influx.example.com:1234/", port="9").url == (
        "http://influx.example.com:1234"
    )


@pytest.mark.parametrize(
    ("given", "option"),
    [
        ({"host": "ftp://influx.example.com"}, "host"),
        ({"host": "https://u:secret@influx.example.com"}, "host"),
        ({"host": "http://influx.example.com/write"}, "host"),
        ({"host": "influx.example.com/write"}, "host"),
        ({"host": "http://influx.example.com", "ssl": "true"}, "ssl"),
        ({"username": "writer"}, "password"),
        ({"password": "secret"}, "username"),
        ({"consistency": "most"}, "consistency"),
        ({"auth_method": "digest"}, "auth_method"),
    ],
)
def test_bad_options_name_the_option(given: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError) as raised:
        options(**given)
    assert raised.value.option == option
    assert "secret" not in str(raised.value)


def test_write_parameters_carry_the_precision_policy_and_consistency_but_no_secret() -> None:
    opts = options(
        time_precision="ns",
        retention_policy="week",
        consistency="quorum",
        username="writer",
        password="secret",
    )
    assert opts.write_parameters() == {
        "db": "db",
        "precision": "n",
        "rp": "week",
        "consistency": "quorum",
    }
    assert "secret" not in repr(opts)
    assert "secret" not in repr(InfluxDB1Sink(opts))


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (Answer(429, "too many", retry_after="3"), SinkBackpressureError),
        (Answer(503, "busy"), RetryableError),
        (Answer(500, "timeout"), RetryableError),
        (Answer(401, "authorization failed"), DestinationAccessDeniedError),
        (Answer(403, "not authorized"), DestinationAccessDeniedError),
        (Answer(404, 'database not found: "db"'), DestinationNotFoundError),
        (Answer(500, "retention policy not found: week"), DestinationNotFoundError),
        (Answer(400, "partial write: field type conflict: ... dropped=1"), RecordError),
        (Answer(400, "partial write: points beyond retention policy dropped=2"), RecordError),
    ],
)
def test_each_answer_maps_to_one_error(answer: Answer, error: type[Exception]) -> None:
    mapped = translate(answer, "http://influx:8086 database db")
    assert type(mapped) is error
    if isinstance(mapped, SinkBackpressureError):
        assert mapped.retry_after == 3.0
    assert not isinstance(mapped, RetryableError) or error in (
        SinkBackpressureError,
        RetryableError,
    )


def test_a_written_request_maps_to_no_error() -> None:
    assert translate(Answer(204, ""), "here") is None
