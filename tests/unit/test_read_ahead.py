"""A task's read-ahead: Spark's record batches read by a thread while the sink writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quixsinks.spark.datasource import _read_ahead


def batches(count: int, rows: int = 100) -> list[pa.RecordBatch]:
    # from_arrays: pyarrow 15 (the compat run) takes no mapping
    return [
        pa.RecordBatch.from_arrays([pa.array(range(i * rows, (i + 1) * rows), pa.int64())], ["id"])
        for i in range(count)
    ]


class Source:
    """Spark's iterator, counting how far it was read and by which threads."""

    def __init__(self, items: list[pa.RecordBatch], error: Exception | None = None) -> None:
        self.items, self.error = items, error
        self.taken = 0
        self.threads: set[str] = set()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for item in self.items:
            self.threads.add(threading.current_thread().name)
            self.taken += 1
            yield item
        if self.error is not None:
            raise self.error


def test_every_batch_arrives_in_order_the_rest_from_another_thread() -> None:
    """The first SinkBatch's worth (here one batch) is read on the task's thread, where
    nothing could overlap it; the rest by the read-ahead thread."""
    source = Source(batches(50))
    out = list(_read_ahead(iter(source), max_bytes=1))  # at most one batch ahead
    assert [b.column(0)[0].as_py() for b in out] == [i * 100 for i in range(50)]
    assert source.threads == {threading.current_thread().name, "quixsinks-read-ahead"}


def test_an_input_of_one_sinkbatch_starts_no_thread() -> None:
    """A small micro-batch (the common streaming case) costs no thread start."""
    source = Source(batches(3))
    before = threading.active_count()
    started: list[str] = []
    original = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        started.append(thread.name)
        original(thread)

    threading.Thread.start = start  # type: ignore[method-assign]
    try:
        out = list(_read_ahead(iter(source), max_bytes=10**9))
    finally:
        threading.Thread.start = original  # type: ignore[method-assign]
    assert len(out) == 3
    assert started == []
    assert source.threads == {threading.current_thread().name}
    assert threading.active_count() == before


def test_an_error_within_the_first_sinkbatch_comes_after_the_batches_before_it() -> None:
    source = Source(batches(2), error=OSError("socket closed"))
    reader = _read_ahead(iter(source), max_bytes=10**9)
    assert len([next(reader), next(reader)]) == 2
    with pytest.raises(OSError, match="socket closed"):
        next(reader)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    done = threading.Event()
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        done.wait(0.001)


def test_the_reader_runs_ahead_while_the_sink_works_but_at_most_max_bytes() -> None:
    items = batches(40)
    source = Source(items)
    reader = _read_ahead(iter(source), max_bytes=3 * items[0].nbytes)
    next(reader)  # the sink now "works" on the first batch, taking nothing
    # the thread reads on: three batches wait, and it holds one more from Spark
    wait_for(lambda: source.taken == 5)
    threading.Event().wait(0.05)
    assert source.taken == 5
    assert len(list(reader)) == 39


def test_an_error_of_sparks_iterator_comes_after_the_batches_before_it() -> None:
    items = batches(5)
    source = Source(items, error=OSError("socket closed"))
    reader = _read_ahead(iter(source), max_bytes=2 * items[0].nbytes)  # the thread meets it
    seen = [next(reader) for _ in range(5)]
    with pytest.raises(OSError, match="socket closed"):
        next(reader)
    assert len(seen) == 5


def test_a_consumer_that_stops_stops_the_reader() -> None:
    source = Source(batches(1000))
    reader = _read_ahead(iter(source), max_bytes=1)
    next(reader)
    wait_for(lambda: source.taken == 3)  # one batch waits, one in the thread's hand
    reader.close()  # the sink failed: the generator is closed
    threading.Event().wait(0.05)
    assert source.taken == 3


def test_a_task_writes_the_same_rows_with_and_without_read_ahead(tmp_path: Path) -> None:
    """The whole task path (file sink, small SinkBatches so several are read ahead)."""
    from quixsinks.sinks.file import FileOptions, FileSink
    from quixsinks.spark.datasource import SinkArrowWriter

    written = {}
    for read_ahead in ("true", "false"):
        out = tmp_path / read_ahead
        options = {
            "path": str(out),
            "format": "parquet",
            "max_batch_bytes": "2000",
            "read_ahead": read_ahead,
        }
        sink = FileSink(FileOptions.from_options(options))
        sink.prepare(pa.schema([("id", pa.int64())]))
        sink.preflight()
        writer = SinkArrowWriter(sink)
        message = writer.write(iter(batches(30)))
        writer.commit([message])
        rows = [r for f in sorted(out.rglob("*.parquet")) for r in pq.read_table(f)["id"]]
        written[read_ahead] = sorted(v.as_py() for v in rows)
    assert written["true"] == written["false"] == list(range(3000))
