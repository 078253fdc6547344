"""The driver side of the Spark glue, without a SparkSession: what commit() does with receipts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from quixsinks.core.publish import StagedFile
from quixsinks.core.sink import Receipt
from quixsinks.sinks.file import FileOptions, FileSink
from quixsinks.spark.datasource import ReceiptMessage, SinkStreamArrowWriter


def planned_sink(out: Path, **options: str) -> FileSink:
    sink = FileSink(FileOptions.from_options({"path": str(out), **options}))
    sink.prepare(pa.schema([("id", pa.int64())]))
    sink.preflight()
    return sink


def test_a_micro_batch_without_receipts_commits_nothing_under_a_made_up_id(
    tmp_path: Path,
) -> None:
    """The commit runs in a Spark worker without a SparkContext: with no receipts there is
    no query id, so nothing may be recorded (formerly a random ``query-<uuid>`` entry)."""
    out = tmp_path / "out"
    writer = SinkStreamArrowWriter(planned_sink(out))
    writer.commit([], 3)
    writer.commit([None, None], 4)  # Spark passes None for failed tasks
    assert [p for p in out.rglob("*") if p.is_file()] == []


def test_the_commit_uses_the_query_id_the_tasks_reported(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = SinkStreamArrowWriter(planned_sink(out, sink_id="orders"))
    receipt: Receipt[StagedFile] = Receipt("orders", 0, 0, "a0", query_id="q-123")
    writer.commit([ReceiptMessage(receipt)], 0)
    owner = out / "_quixsinks" / "ledger" / "orders" / "owner.json"
    assert '"query_id": "q-123"' in owner.read_text()


def test_an_executor_that_cannot_see_the_directory_says_why(tmp_path: Path) -> None:
    import shutil

    import pytest

    from quixsinks.core.batch import WriteContext
    from quixsinks.core.errors import DestinationNotFoundError
    from quixsinks.core.sink import Task

    out = tmp_path / "out"
    sink = planned_sink(out)
    shutil.rmtree(out)  # as on an executor machine without the driver's local disk
    with pytest.raises(DestinationNotFoundError, match="every executor sees"):
        sink.setup(Task(WriteContext("s", 0)))


def test_files_roll_over_at_max_rows_per_file(tmp_path: Path) -> None:
    from quixsinks.core.batch import SinkBatch, WriteContext
    from quixsinks.core.sink import Task

    sink = planned_sink(tmp_path / "out", max_rows_per_file="3")
    context = WriteContext("s", 0)
    table = pa.table({"id": pa.array(range(10), pa.int64())})
    assert sink.records is not None
    batch = SinkBatch(table, sink.records, context, task=Task(context))
    staged = sink.write(batch)
    assert [f.rows for f in staged] == [3, 3, 3, 1]
    assert len({f.final_key for f in staged}) == 4


def test_a_worker_with_another_quixsinks_version_refuses_to_write(tmp_path: Path) -> None:
    """The writer carries the planning side's version to the tasks: a worker whose
    quixsinks differs refuses before any data moves, naming both versions and the fix."""
    import pickle

    import pytest

    import quixsinks
    from quixsinks.spark.datasource import SinkArrowWriter, VersionMismatchError

    out = tmp_path / "out"
    writer = SinkArrowWriter(planned_sink(out))
    assert writer.planned_with == quixsinks.__version__
    writer.planned_with = "0.0.1"  # as planned by a driver with another install
    shipped = pickle.loads(pickle.dumps(writer))
    batch = pa.record_batch([pa.array([1, 2], pa.int64())], names=["id"])
    with pytest.raises(VersionMismatchError) as info:
        shipped.write(iter([batch]))
    message = str(info.value)
    assert f"quixsinks {quixsinks.__version__} on the Spark worker" in message
    assert "planned with quixsinks 0.0.1" in message
    assert "same quixsinks version on the driver and every executor" in message
    frames, tb = [], info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames[1:] == ["edge"]  # below this test, the edge cut our frames (errors first)
    assert not out.exists() or [p for p in out.rglob("*") if p.is_file()] == []
