"""Keyed batch writes (options ``sink_id`` and ``batch_id``), without a SparkSession: the
options refused at planning, the contexts the glue gives the sink, and a rerun that the
ledger recognises. tests/integration/test_idempotent_batch_writes.py runs them on Spark
against every ledger sink."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from quixsinks.core.batch import WriteContext, name_prefix
from quixsinks.core.errors import LedgerFenceError, OptionError
from quixsinks.core.ledger import BATCH_WRITE_QUERY_ID
from quixsinks.core.sink import CommitContext, Receipt
from quixsinks.sinks.file import FileSink
from quixsinks.spark.datasource import (
    QuixDataSource,
    ReceiptMessage,
    SinkArrowWriter,
    SinkStreamArrowWriter,
    data_source_for,
)

SCHEMA = StructType([StructField("id", LongType())])


def source(tmp_path: Path, **options: str) -> QuixDataSource:
    return data_source_for(FileSink)({"path": str(tmp_path / "out"), **options})


def batch_writer(tmp_path: Path, **options: str) -> SinkArrowWriter:
    return source(tmp_path, **options).writer(SCHEMA, False)


# ----------------------------------------------------------------------------- refused options


def test_batch_id_without_sink_id_is_refused_at_planning(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="needs option 'sink_id'") as info:
        batch_writer(tmp_path, batch_id="7")
    assert (info.value.option, info.value.value) == ("batch_id", "7")


def test_batch_id_in_a_streaming_query_is_refused_before_any_task(tmp_path: Path) -> None:
    data_source = source(tmp_path, sink_id="orders", batchId="7")
    with pytest.raises(OptionError, match="for batch writes") as info:
        data_source.streamWriter(SCHEMA, False)
    assert info.value.option == "batch_id"


@pytest.mark.parametrize("text", ["-1", "x", "1.5", str(2**53)])
def test_a_batch_id_that_is_no_integer_from_0_to_2_pow_53_minus_1_is_refused(
    tmp_path: Path, text: str
) -> None:
    with pytest.raises(OptionError) as info:
        batch_writer(tmp_path, sink_id="orders", batch_id=text)
    assert info.value.option == "batch_id"


def test_the_largest_batch_id_is_accepted(tmp_path: Path) -> None:
    batch_writer(tmp_path, sink_id="orders", batch_id=str(2**53 - 1))


# ----------------------------------------------------------------------------- contexts


def test_a_keyed_batch_write_is_ledgered_under_the_users_key(tmp_path: Path) -> None:
    writer = batch_writer(tmp_path, sink_id="orders", batch_id="7")
    context = writer._commit_context([], 0)
    assert context == CommitContext("orders", 7, False, BATCH_WRITE_QUERY_ID, "file")
    assert context.ledgered
    assert not context.streaming


def test_a_batch_write_without_the_key_is_a_new_unledgered_write_each_time(
    tmp_path: Path,
) -> None:
    first = batch_writer(tmp_path, sink_id="orders")._commit_context([], 0)
    second = batch_writer(tmp_path, sink_id="orders")._commit_context([], 0)
    assert first is not None
    assert second is not None
    assert first.sink_id.startswith("write-")
    assert first.sink_id != second.sink_id
    assert (first.batch_id, first.query_id, first.ledgered) == (0, "", False)


def test_two_runs_of_a_keyed_write_give_their_tasks_one_sink_id_and_batch_id(
    tmp_path: Path,
) -> None:
    """What the message sinks' dedupe ids derive from (kinesis, pubsub): with the key they
    are the same when the job runs again; without it each run has ids of its own."""
    runs = [batch_writer(tmp_path, sink_id="orders", batch_id="7")._context() for _ in "ab"]
    assert {(c.sink_id, c.batch_id, c.query_id) for c in runs} == {
        ("orders", 7, BATCH_WRITE_QUERY_ID)
    }
    assert runs[0].ledgered
    unkeyed = [batch_writer(tmp_path, sink_id="orders")._context() for _ in "ab"]
    assert unkeyed[0].sink_id != unkeyed[1].sink_id


def test_streaming_is_ledgered_and_keyed_batch_writes_name_files_by_the_bare_sink_id() -> None:
    assert WriteContext("orders", 3, streaming=True, query_id="6b0f1c2d-aaaa").ledgered
    assert name_prefix("orders", "6b0f1c2d-aaaa") == "orders-6b0f1c2d"
    assert name_prefix("orders", BATCH_WRITE_QUERY_ID) == "orders"


def test_the_fence_names_keyed_batch_writes_as_such() -> None:
    error = LedgerFenceError(
        sink_id="orders", owner_query_id=BATCH_WRITE_QUERY_ID, query_id="6b0f1c2d-aaaa"
    )
    assert "belongs to keyed batch writes" in str(error)
    assert "this is streaming query 6b0f1c2d-aaaa" in str(error)
    assert "takeover_query_id='batch-write'" in str(error)


# ----------------------------------------------------------------------------- the rerun


def stage_and_commit(writer: SinkArrowWriter, content: bytes) -> None:
    """The driver side of one keyed write of the file sink: one task's staged file."""
    sink = writer.sink
    assert isinstance(sink, FileSink)
    context = WriteContext("orders", 7, 0, f"a-{content.hex()}", False, BATCH_WRITE_QUERY_ID)
    name = "orders-0000000007-00000-0000.jsonl"
    staged = sink.staging().stage(context, name, content, final_key=name, rows=1)
    receipt = Receipt("orders", 7, 0, context.attempt_id, BATCH_WRITE_QUERY_ID, rows=1)
    receipt.staged.append([staged])
    writer.commit([ReceiptMessage(receipt)])


def test_a_rerun_of_a_committed_key_publishes_nothing_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two runs of one keyed write: the second run's staged file is discarded, the first
    run's file stays the only one."""
    out = tmp_path / "out"

    def run(content: bytes) -> None:
        stage_and_commit(batch_writer(tmp_path, sink_id="orders", batch_id="7"), content)

    run(b'{"id": 1}\n')
    with caplog.at_level(logging.INFO, logger="quixsinks"):
        run(b'{"id": 2}\n')
    published = sorted(p.name for p in out.iterdir() if p.is_file())
    assert published == ["orders-0000000007-00000-0000.jsonl"]
    assert (out / published[0]).read_bytes() == b'{"id": 1}\n'
    assert "batch 7 of sink id orders is in the ledger already" in caplog.text
    assert not [p for p in (out / "_quixsinks" / "staging").rglob("*") if p.is_file()]


def test_a_streaming_query_and_keyed_batch_writes_sharing_a_sink_id_are_fenced(
    tmp_path: Path,
) -> None:
    stream = source(tmp_path, sink_id="orders").streamWriter(SCHEMA, False)
    assert isinstance(stream, SinkStreamArrowWriter)
    receipt: Receipt[object] = Receipt("orders", 0, 0, "s0", query_id="6b0f1c2d-aaaa")
    stream.commit([ReceiptMessage(receipt)], 0)

    with pytest.raises(LedgerFenceError, match="belongs to streaming query 6b0f1c2d-aaaa"):
        stage_and_commit(batch_writer(tmp_path, sink_id="orders", batch_id="7"), b"{}\n")
    taken = batch_writer(
        tmp_path, sink_id="orders", batch_id="7", takeover_query_id="6b0f1c2d-aaaa"
    )
    stage_and_commit(taken, b'{"id": 1}\n')
    assert (tmp_path / "out" / "orders-0000000007-00000-0000.jsonl").exists()
