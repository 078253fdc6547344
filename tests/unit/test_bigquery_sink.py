"""The bigquery sink without a server: options, type mapping, Arrow conversion, errors.

The emulator (tests/integration/test_bigquery.py) cannot store BIGNUMERIC and accepts any
credentials, so those two are checked here, at the boundary: the mapping and the Arrow
type sent, and the translation of Google's real credential error classes.
"""

from __future__ import annotations

import datetime as dt
import decimal
import pickle

import pyarrow as pa
import pytest

from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationNotFoundError,
    OptionError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
)
from quixsinks.core.vendors.google import service_account_info as parse_service_account
from quixsinks.sinks.bigquery import BigQueryOptions, BigQuerySink
from quixsinks.sinks.bigquery.client import credentials, translate
from quixsinks.sinks.bigquery.schema import BQField, arrow_type, bq_field, conflict, convert
from quixsinks.sinks.bigquery.wire import chunks as _chunks

BASE = {"project_id": "p", "dataset_id": "d", "table_name": "t"}


def options(**extra: str) -> BigQueryOptions:
    return BigQueryOptions.from_options({**BASE, **extra})


def test_quix_option_names_and_defaults() -> None:
    o = options(serviceAccountJson='{"k": "S3CRET"}')
    assert (o.schema_auto_update, o.ddl_timeout, o.insert_timeout, o.retry_timeout) == (
        True,
        10.0,
        10.0,
        30.0,
    )
    assert o.write_mode == "exactly-once"
    assert "S3CRET" not in repr(o)
    assert o.redacted()["service_account_json"] == "***"
    assert pickle.loads(pickle.dumps(BigQuerySink(o))).options == o


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"dataset_id": "my-data"}, "dataset_id"),
        ({"table_name": "a.b"}, "table_name"),
        ({"max_request_bytes": "20000000"}, "max_request_bytes"),
        ({"write_mode": "fast"}, "write_mode"),
    ],
)
def test_bad_options_fail_naming_the_option(extra: dict[str, str], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        options(**extra)


def test_project_id_is_required_or_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    with pytest.raises(OptionError, match="project_id"):
        BigQueryOptions.from_options({"dataset_id": "d", "table_name": "t"})
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    assert BigQueryOptions.from_options({"dataset_id": "d", "table_name": "t"}).project_id == (
        "from-env"
    )


def test_service_account_json_that_does_not_parse_is_never_echoed(tmp_path: object) -> None:
    for raw in ('{"private_key": "TOPSECRET"', "TOPSECRET-not-a-path", '["TOPSECRET"]'):
        with pytest.raises(OptionError) as info:
            parse_service_account(raw)
        assert "TOPSECRET" not in str(info.value)
        assert info.value.option == "service_account_json"
    with pytest.raises(OptionError, match="not a usable service account key") as info:
        credentials(options(service_account_json='{"type": "service_account", "k": "TOPSECRET"}'))
    assert "TOPSECRET" not in str(info.value)


def test_an_http_endpoint_without_a_key_uses_anonymous_credentials() -> None:
    from google.auth.credentials import AnonymousCredentials

    assert isinstance(credentials(options(api_endpoint="http://127.0.0.1:1")), AnonymousCredentials)
    assert credentials(options()) is None  # application-default credentials


@pytest.mark.parametrize(
    ("t", "field"),
    [
        (pa.int8(), BQField("c", "INT64")),
        (pa.int64(), BQField("c", "INT64")),
        (pa.float32(), BQField("c", "FLOAT64")),
        (pa.decimal128(10, 2), BQField("c", "NUMERIC")),
        (pa.decimal128(38, 9), BQField("c", "NUMERIC")),
        (pa.decimal128(38, 10), BQField("c", "BIGNUMERIC")),
        (pa.decimal128(38, 0), BQField("c", "BIGNUMERIC")),
        (pa.timestamp("us", "UTC"), BQField("c", "TIMESTAMP")),
        (pa.timestamp("us"), BQField("c", "DATETIME")),
        (pa.date32(), BQField("c", "DATE")),
        (pa.binary(), BQField("c", "BYTES")),
        (pa.list_(pa.string()), BQField("c", "STRING", "REPEATED")),
        (
            pa.map_(pa.string(), pa.int64()),
            BQField(
                "c", "RECORD", "REPEATED", (BQField("key", "STRING"), BQField("value", "INT64"))
            ),
        ),
        (
            pa.struct([("a", pa.bool_())]),
            BQField("c", "RECORD", "NULLABLE", (BQField("a", "BOOL"),)),
        ),
    ],
)
def test_spark_types_map_to_bigquery_types(t: pa.DataType, field: BQField) -> None:
    assert bq_field("c", t) == field


def test_arrays_of_arrays_and_odd_names_are_refused_before_any_task() -> None:
    with pytest.raises(OptionError, match="array of arrays"):
        bq_field("c", pa.list_(pa.list_(pa.int64())))
    for name in ("a`b", "_PARTITIONTIME", "x" * 301):
        with pytest.raises(OptionError, match="rename the column"):
            bq_field(name, pa.int64())


def test_bignumeric_values_are_sent_as_decimal256_76_38() -> None:
    field = bq_field("c", pa.decimal128(38, 20))
    value = decimal.Decimal("123456789012345678.12345678901234567890")
    out = convert(pa.array([value, None], pa.decimal128(38, 20)), field)
    assert out.type == arrow_type(field) == pa.decimal256(76, 38)
    assert out.to_pylist() == [value, None]


def test_values_outside_bigquery_ranges_are_record_errors_naming_column_and_row() -> None:
    early = pa.array([dt.date(2024, 1, 1), None, dt.date(1, 1, 1)], pa.date32())
    assert convert(early, BQField("d", "DATE")).null_count == 1
    before = pa.array([0, -719163], pa.int32()).cast(pa.date32())
    with pytest.raises(RecordError, match=r"column 'd', row 1: outside") as info:
        convert(before, BQField("d", "DATE"))
    assert (info.value.column, info.value.row) == ("d", 1)
    with pytest.raises(RecordError, match=r"column 'n', row 1: the value does not fit"):
        convert(
            pa.array(
                [decimal.Decimal("1.5"), decimal.Decimal("0.1234567891")], pa.decimal128(20, 10)
            ),
            BQField("n", "NUMERIC"),
        )
    with pytest.raises(
        RecordError, match=r"column 'r', row 1: null, and the table's column is REQUIRED"
    ):
        convert(pa.array([1, None]), BQField("r", "INT64", "REQUIRED"))
    with pytest.raises(RecordError, match=r"column 'l', row 2: an array holding a null"):
        convert(pa.array([[1], [], [2, None]]), BQField("l", "INT64", "REPEATED"))


def test_maps_become_key_value_records_and_ints_fit_a_quix_float64_column() -> None:
    m = pa.array([[("a", 1), ("b", 2)], None], pa.map_(pa.string(), pa.int64()))
    out = convert(m, bq_field("m", m.type))
    assert out.to_pylist() == [[{"key": "a", "value": 1}, {"key": "b", "value": 2}], None]
    assert conflict(BQField("c", "INT64"), BQField("c", "FLOAT64")) is None
    assert convert(pa.array([1, 2]), BQField("c", "FLOAT64")).type == pa.float64()
    assert "STRING" in (conflict(BQField("c", "STRING"), BQField("c", "INT64")) or "")


def test_a_sliced_list_column_converts_only_its_rows() -> None:
    lists = pa.array([[1], [2, 3], [4]]).slice(1, 2)
    assert convert(lists, BQField("l", "INT64", "REPEATED")).to_pylist() == [[2, 3], [4]]


def test_timestamps_keep_microseconds_in_utc() -> None:
    t = pa.array([dt.datetime(2024, 5, 1, 12, 0, 0, 123456)], pa.timestamp("us", "UTC"))
    assert convert(t, BQField("t", "TIMESTAMP")).type == pa.timestamp("us", "UTC")
    assert convert(t, BQField("t", "DATETIME")).to_pylist() == [
        dt.datetime(2024, 5, 1, 12, 0, 0, 123456)
    ]


def test_append_requests_stay_below_the_limit_and_a_huge_row_is_a_record_error() -> None:
    table = pa.table({"s": ["x" * 100] * 1000})
    chunks = list(_chunks(table, 20_000))
    assert sum(c.num_rows for c in chunks) == 1000
    assert len(chunks) > 1
    assert all(c.serialize().size <= 20_000 for c in chunks)
    with pytest.raises(RecordError, match=r"row 1 of this batch is \d+ bytes"):
        list(_chunks(pa.table({"s": ["x", "y" * 50_000]}), 20_000))


def test_google_errors_are_translated_by_class() -> None:
    from google.api_core import exceptions as g
    from google.auth import exceptions as auth

    refused = auth.RefreshError(
        "('invalid_grant: Invalid JWT Signature.', {'error': 'invalid_grant'})"
    )
    assert isinstance(translate(refused, "w"), DestinationAccessDeniedError)
    assert "service_account_json" in str(translate(refused, "w"))
    missing = auth.DefaultCredentialsError("Your default credentials were not found.")
    assert "application-default" in str(translate(missing, "w"))
    assert isinstance(translate(g.Forbidden("denied"), "w"), DestinationAccessDeniedError)
    quota = g.Forbidden("quota", errors=[{"reason": "rateLimitExceeded"}])
    assert isinstance(translate(quota, "w"), SinkBackpressureError)
    assert isinstance(translate(g.NotFound("x"), "w"), DestinationNotFoundError)
    assert isinstance(translate(g.TooManyRequests("x"), "w"), SinkBackpressureError)
    assert isinstance(translate(g.ResourceExhausted("x"), "w"), SinkBackpressureError)
    assert isinstance(translate(g.ServiceUnavailable("x"), "w"), RetryableError)
    assert not isinstance(translate(g.BadRequest("x"), "w"), RetryableError)
    retried = g.RetryError("Timeout of 30.0s exceeded", cause=g.NotFound("gone"))
    assert isinstance(translate(retried, "w"), DestinationNotFoundError)


def test_a_struct_key_is_written_as_json_text() -> None:
    keys = pa.array([{"a": 1, "b": "x"}, None], pa.struct([("a", pa.int32()), ("b", pa.string())]))
    assert convert(keys, BQField("__key", "STRING")).to_pylist() == ['{"a":1,"b":"x"}', None]


def test_the_last_microsecond_of_9999_is_in_range_and_the_next_is_not() -> None:
    last = pa.array([253402300799999999], pa.int64()).cast(pa.timestamp("us", "UTC"))
    assert convert(last, BQField("t", "TIMESTAMP")).to_pylist()[0].year == 9999
    after = pa.array([253402300800000000], pa.int64()).cast(pa.timestamp("us", "UTC"))
    with pytest.raises(RecordError, match="outside BigQuery's range"):
        convert(after, BQField("t", "TIMESTAMP"))
    first = pa.array([-62135596800000000], pa.int64()).cast(pa.timestamp("us"))
    assert convert(first, BQField("t", "DATETIME")).to_pylist()[0].year == 1


def test_json_columns_write_maps_as_objects_and_bytes_as_base64() -> None:
    t = pa.struct([("m", pa.map_(pa.string(), pa.int64())), ("b", pa.binary())])
    value = pa.array([{"m": [("k", 1)], "b": b"\x00"}, None], t)
    out = convert(value, BQField("j", "JSON")).to_pylist()
    assert out == ['{"m":{"k":1},"b":"AA=="}', None]


def test_bytes_fit_a_quix_string_key_column_as_utf8_text() -> None:
    assert conflict(BQField("__key", "BYTES"), BQField("__key", "STRING")) is None
    keys = pa.array([b"sensor-1", None, "ü".encode()], pa.binary())
    assert convert(keys, BQField("__key", "STRING")).to_pylist() == ["sensor-1", None, "ü"]
    with pytest.raises(RecordError, match=r"column '__key', row 2: bytes that are not UTF-8"):
        convert(pa.array([b"a", None, b"\xff\xfe"], pa.binary()), BQField("__key", "STRING"))


def test_a_float_goes_into_numeric_only_as_a_decimal_that_reads_back_as_it() -> None:
    """A cast alone rounds to NUMERIC's 9 places without a word (1e-10 became 0): a float
    is taken when its NUMERIC reads back as the same float, else its row is refused."""
    fine = convert(pa.array([0.1, 19.99, -3.5, None], pa.float64()), BQField("c", "NUMERIC"))
    assert [None if v is None else float(v) for v in fine.to_pylist()] == [0.1, 19.99, -3.5, None]
    with pytest.raises(RecordError, match="row 1: the float 1e-10 has no NUMERIC") as error:
        convert(pa.array([0.1, 1e-10], pa.float64()), BQField("c", "NUMERIC"))
    assert error.value.row == 1
    wide = convert(pa.array([1e-10], pa.float64()), BQField("c", "BIGNUMERIC"))
    assert float(wide[0].as_py()) == 1e-10
