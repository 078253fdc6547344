"""Binary COPY encoding of the `postgresql` sink, and its CSV fallback (no server)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.records import RecordSchema
from quixsinks.sinks.postgresql.schema import Column
from quixsinks.sinks.postgresql.wire import copy_data

BINARY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def batch_of(table: pa.Table) -> SinkBatch:
    records = RecordSchema.resolve(table.schema, key_column="none", timestamp_column="none")
    return SinkBatch(table, records, WriteContext("sink", 1, 0, "a0"))


def values(table: pa.Table, types: dict[str, str]) -> list[Column]:
    return [Column(name, types[name], "value") for name in table.column_names]


def test_the_benchmark_columns_go_as_binary() -> None:
    table = pa.table(
        {
            "l": [1, 2],
            "d": [0.5, 1.5],
            "b": [True, None],
            "s": ["x", "y"],
            "ts": pa.array([dt.datetime(2024, 5, 1), None], pa.timestamp("us", "UTC")),
            "n": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(10, 2)),
            "j": pa.array([[1, 2], None], pa.list_(pa.int64())),
        }
    )
    types = {
        "l": "bigint",
        "d": "double precision",
        "b": "boolean",
        "s": "text",
        "ts": "timestamp with time zone",
        "n": "numeric(10,2)",
        "j": "jsonb",
    }
    batch = batch_of(table)
    data = copy_data(batch, values(table, types))
    assert data.fmt == "binary"
    assert data.payload.startswith(BINARY_SIGNATURE)
    assert batch.counters.get("copy_csv_fallbacks", 0) == 0


def test_an_integer_is_cast_to_the_existing_columns_width() -> None:
    table = pa.table({"i": pa.array([1, 2], pa.int32())})
    data = copy_data(batch_of(table), values(table, {"i": "bigint"}))
    assert data.fmt == "binary"


@pytest.mark.parametrize(
    ("array", "pg"),
    [
        (pa.array([0.5]), "numeric"),  # a float would be rounded by numeric's binary reader
        (pa.array(["5f0c2a4e-0000-4000-8000-000000000000"]), "uuid"),
        (pa.array([dt.date(2024, 1, 1)]), "timestamp with time zone"),
        (pa.array(["x"]), "citext"),
    ],
)
def test_a_pair_the_encoder_cannot_map_exactly_falls_back_to_csv(array: pa.Array, pg: str) -> None:
    table = pa.table({"c": array})
    batch = batch_of(table)
    data = copy_data(batch, values(table, {"c": pg}))
    assert data.fmt == "csv"
    assert batch.counters["copy_csv_fallbacks"] == 1


def test_csv_can_be_asked_for() -> None:
    table = pa.table({"l": [1]})
    data = copy_data(batch_of(table), values(table, {"l": "bigint"}), binary=False)
    assert (data.fmt, data.payload) == ("csv", b"1\n")
