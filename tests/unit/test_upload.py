"""The one streaming upload writer of the object stores (quixsinks.core.upload), over an
in-memory store that records what it is asked to do."""

from __future__ import annotations

import threading
from typing import Any, BinaryIO

import pytest

from quixsinks.core.upload import StreamingUpload, UploadTarget, upload_stream


class MemoryStore(UploadTarget):
    """Keeps parts in memory; the object exists only once completed (or put whole)."""

    def __init__(self, fail_part: int | None = None) -> None:
        self.calls: list[str] = []
        self.parts: dict[int, bytes] = {}
        self.object: bytes | None = None
        self.threads: set[str] = set()
        self.fail_part = fail_part
        self._lock = threading.Lock()

    def put_whole(self, data: bytes) -> None:
        self.calls.append("put_whole")
        self.object = data

    def begin(self) -> None:
        self.calls.append("begin")

    def put_part(self, number: int, data: bytes) -> Any:
        if number == self.fail_part:
            raise OSError(f"part {number} refused")
        with self._lock:
            self.parts[number] = data
            self.threads.add(threading.current_thread().name)
        return f"etag-{number}"

    def complete(self, parts: list[Any], size: int) -> None:
        self.calls.append("complete")
        assert parts == [f"etag-{n}" for n in range(1, len(parts) + 1)]
        self.object = b"".join(self.parts[n] for n in range(1, len(parts) + 1))
        assert len(self.object) == size

    def abort(self) -> None:
        self.calls.append("abort")
        self.parts.clear()


def writes(*pieces: bytes) -> Any:
    def produce(out: BinaryIO) -> None:
        for piece in pieces:
            out.write(piece)

    return produce


def test_an_output_smaller_than_one_part_is_one_put() -> None:
    store = MemoryStore()
    assert upload_stream(store, writes(b"abc", b"de"), part_size=10) == 5
    assert store.calls == ["put_whole"]
    assert store.object == b"abcde"


def test_a_bigger_output_goes_in_parts_of_the_part_size_in_order() -> None:
    store = MemoryStore()
    data = bytes(range(256)) * 10
    assert upload_stream(store, writes(data[:1000], data[1000:]), part_size=1024) == len(data)
    assert store.calls == ["begin", "complete"]
    assert [len(store.parts[n]) for n in sorted(store.parts)] == [1024, 1024, len(data) - 2048]
    assert store.object == data


def test_an_output_of_exactly_one_part_is_a_one_part_upload() -> None:
    store = MemoryStore()
    upload_stream(store, writes(b"x" * 8), part_size=8)
    assert store.calls == ["begin", "complete"]
    assert store.object == b"x" * 8


def test_the_part_size_doubles_every_grow_every_parts() -> None:
    store = MemoryStore()
    upload_stream(store, writes(b"y" * 100), part_size=4, grow_every=2)
    sizes = [len(store.parts[n]) for n in sorted(store.parts)]
    assert sizes[:6] == [4, 4, 8, 8, 16, 16]
    assert sum(sizes) == 100


def test_parts_in_flight_upload_in_worker_threads_and_keep_their_order() -> None:
    store = MemoryStore()
    data = bytes(range(256)) * 40
    upload_stream(store, writes(data), part_size=1000, in_flight=2)
    assert store.object == data
    assert all(name.startswith("upload-part") for name in store.threads)


@pytest.mark.parametrize("in_flight", [0, 2])
def test_a_failing_producer_aborts_and_nothing_becomes_visible(in_flight: int) -> None:
    store = MemoryStore()

    def produce(out: BinaryIO) -> None:
        out.write(b"z" * 25)  # two parts uploaded already
        raise RuntimeError("the format writer failed")

    with pytest.raises(RuntimeError, match="format writer failed"):
        upload_stream(store, produce, part_size=10, in_flight=in_flight)
    assert store.calls == ["begin", "abort"]
    assert store.object is None


@pytest.mark.parametrize("in_flight", [0, 2])
def test_a_failing_part_aborts_the_upload_and_is_raised(in_flight: int) -> None:
    store = MemoryStore(fail_part=2)
    with pytest.raises(OSError, match="part 2 refused"):
        upload_stream(store, writes(b"w" * 35), part_size=10, in_flight=in_flight)
    assert store.calls == ["begin", "abort"]
    assert store.object is None


def test_a_producer_closing_the_stream_does_not_commit() -> None:
    store = MemoryStore()
    upload = StreamingUpload(store, part_size=10)
    upload.write(b"abc")
    upload.close()
    assert store.calls == []
    assert upload.finish() == 3
    assert store.object == b"abc"


def test_no_write_after_finish_or_abort() -> None:
    store = MemoryStore()
    upload = StreamingUpload(store, part_size=10)
    upload.finish()
    with pytest.raises(ValueError, match="finished or aborted"):
        upload.write(b"late")
    upload.abort()  # after a finish: nothing to drop
    assert store.calls == ["put_whole"]
