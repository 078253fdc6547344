"""Specification of SinkBatch (quixsinks.core.batch): chunking, column views, row items."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, SinkItem, WriteContext
from quixsinks.core.records import RecordSchema

START = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
START_MS = int(START.timestamp() * 1000)


def make_batch(table: pa.Table, **resolve: Any) -> SinkBatch:
    return SinkBatch(
        table, RecordSchema.resolve(table.schema, **resolve), WriteContext("sink", 1, 0, "a0")
    )


def rows_table(n: int) -> pa.Table:
    return pa.table(
        {
            "key": [f"k{i}" for i in range(n)],
            "timestamp": pa.array(
                [START + dt.timedelta(milliseconds=i) for i in range(n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "v": pa.array(range(n), pa.int64()),
        }
    )


def kafka_table() -> pa.Table:
    return pa.table(
        {
            "key": pa.array([b"k0", None], pa.binary()),
            "value": pa.array([b'{"a": 1}', b'{"a": 2, "b": "x"}'], pa.binary()),
            "topic": ["orders", "orders"],
            "partition": pa.array([3, 3], pa.int32()),
            "offset": pa.array([10, 11], pa.int64()),
            "timestamp": pa.array([START, START], pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0, 0], pa.int32()),
            "headers": pa.array(
                [[{"key": "h", "value": b"1"}], None],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )


def values_of(chunks: list[SinkBatch]) -> list[int]:
    return [v for chunk in chunks for v in chunk.column("v").to_pylist()]


# ----------------------------------------------------------------------------- chunking


def test_chunks_have_n_rows_and_the_last_is_shorter() -> None:
    chunks = list(make_batch(rows_table(10)).iter_chunks(4))
    assert [len(c) for c in chunks] == [4, 4, 2]


def test_chunks_cover_every_row_in_order() -> None:
    assert values_of(list(make_batch(rows_table(10)).iter_chunks(3))) == list(range(10))


def test_chunk_size_larger_than_the_batch_gives_one_chunk() -> None:
    assert [len(c) for c in make_batch(rows_table(5)).iter_chunks(100)] == [5]


def test_chunks_of_an_empty_batch_are_none() -> None:
    assert list(make_batch(rows_table(0)).iter_chunks(3)) == []


@pytest.mark.parametrize("size", [0, -1, 1.5, "2", True, None])
def test_invalid_chunk_size_is_refused(size: Any) -> None:
    with pytest.raises(ValueError, match="positive integer"):
        list(make_batch(rows_table(3)).iter_chunks(size))


def test_chunks_keep_records_and_context() -> None:
    batch = make_batch(rows_table(4))
    chunk = next(batch.iter_chunks(2))
    assert (chunk.records, chunk.context) == (batch.records, batch.context)


@pytest.mark.parametrize("max_bytes", [1, 50, 200, 10**9])
def test_byte_chunks_cover_every_row_in_order(max_bytes: int) -> None:
    chunks = list(make_batch(rows_table(37)).iter_chunks_by_bytes(max_bytes))
    assert all(len(c) >= 1 for c in chunks)
    assert values_of(chunks) == list(range(37))


def test_byte_chunks_are_one_row_each_below_a_rows_size() -> None:
    chunks = list(make_batch(rows_table(5)).iter_chunks_by_bytes(1))
    assert [len(c) for c in chunks] == [1] * 5


def test_byte_chunks_split_a_batch_larger_than_max_bytes() -> None:
    batch = make_batch(rows_table(100))
    chunks = list(batch.iter_chunks_by_bytes(batch.nbytes // 4))
    assert len(chunks) >= 4


def test_byte_chunks_of_an_empty_batch_are_none() -> None:
    assert list(make_batch(rows_table(0)).iter_chunks_by_bytes(100)) == []


@pytest.mark.parametrize("max_bytes", [0, -5, 2.0, True])
def test_invalid_max_bytes_is_refused(max_bytes: Any) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        list(make_batch(rows_table(3)).iter_chunks_by_bytes(max_bytes))


def test_chunks_of_parsed_json_values_stay_aligned() -> None:
    batch = make_batch(kafka_table())
    batch.values()  # parsed once on the whole batch, then sliced
    second = list(batch.iter_chunks(1))[1]
    assert second.values().to_pylist() == [{"a": 2, "b": "x"}]


# ----------------------------------------------------------------------------- properties


def test_batch_exposes_its_context() -> None:
    batch = SinkBatch(
        rows_table(3),
        RecordSchema.resolve(rows_table(3).schema),
        WriteContext("sink", 7, 2, "attempt-9"),
    )
    assert (batch.batch_id, batch.partition_id, batch.attempt_id) == (7, 2, "attempt-9")
    assert (len(batch), batch.num_rows) == (3, 3)
    assert batch.nbytes == rows_table(3).nbytes


def test_count_adds_to_a_counter() -> None:
    batch = make_batch(rows_table(1))
    batch.count("skipped")
    batch.count("skipped", 3)
    assert batch.counters == {"skipped": 4}


def test_counts_in_a_chunk_reach_the_whole_batch() -> None:
    batch = make_batch(rows_table(4))
    for chunk in batch.iter_chunks(2):
        chunk.count("pieces")
    assert batch.counters == {"pieces": 2}


# ----------------------------------------------------------------------------- row items


def test_iteration_yields_one_item_per_row() -> None:
    items = list(make_batch(rows_table(3)))
    assert items[1] == SinkItem(key="k1", value={"v": 1}, timestamp=START_MS + 1)


def test_item_timestamp_is_epoch_milliseconds() -> None:
    table = pa.table({"timestamp": pa.array([1_700_000_000_123_999], pa.timestamp("us")), "v": [1]})
    assert next(iter(make_batch(table))).timestamp == 1_700_000_000_123


def test_item_without_key_or_timestamp_column_has_none() -> None:
    item = next(iter(make_batch(pa.table({"v": [1]}))))
    assert (item.key, item.timestamp, item.value) == (None, None, {"v": 1})


def test_kafka_item_has_the_messages_own_value_and_metadata() -> None:
    first, second = make_batch(kafka_table())
    assert first == SinkItem(
        key=b"k0",
        value={"a": 1},  # its own keys, as a Quix app gets it: no null for "b"
        timestamp=START_MS,
        headers=[{"key": "h", "value": b"1"}],
        topic="orders",
        partition=3,
        offset=10,
    )
    assert (second.key, second.value, second.headers, second.offset) == (
        None,
        {"a": 2, "b": "x"},
        None,
        11,
    )


def test_empty_batch_yields_no_items() -> None:
    assert list(make_batch(rows_table(0))) == []


def test_column_views() -> None:
    batch = make_batch(rows_table(2))
    assert batch.keys().to_pylist() == ["k0", "k1"]
    assert batch.timestamps_ms().to_pylist() == [START_MS, START_MS + 1]
    assert batch.values().column_names == ["v"]


def test_items_without_value_columns_have_their_own_value_dicts() -> None:
    table = pa.table({"key": ["a", "b"], "value": ["{}", "{}"]})
    first, second = make_batch(table, value_format="json")
    first.value["seen"] = True
    assert second.value == {}
