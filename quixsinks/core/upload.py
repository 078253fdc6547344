"""The one streaming upload writer of the object-store destinations.

A producer (a format writer) writes into a :class:`StreamingUpload`, a write-only file.
It buffers the bytes and hands full parts to the store's :class:`UploadTarget` as it goes
(S3 multipart parts, Azure blocks, GCS resumable chunks), so memory stays bounded whatever
the object's size; an output smaller than one part is one plain put. Nothing is visible
before :meth:`StreamingUpload.finish` commits, and :meth:`StreamingUpload.abort` drops what
was uploaded. :func:`upload_stream` runs a producer through it: finish on success, abort on
any failure.

A target translates its SDK's errors itself (its destination's one error boundary).
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO, cast

__all__ = ["StreamingUpload", "UploadTarget", "upload_stream"]


class UploadTarget(ABC):
    """One object being uploaded in parts: the hooks a store implements.

    :meth:`put_part` may run in worker threads (``in_flight`` > 0), every other hook runs
    in the producer's thread.
    """

    @abstractmethod
    def put_whole(self, data: bytes) -> None:
        """Write the whole object in one request (an output smaller than one part)."""

    def begin(self) -> None:  # noqa: B027 - a hook, empty where a store needs nothing
        """Called once before the first part (e.g. S3 CreateMultipartUpload)."""

    @abstractmethod
    def put_part(self, number: int, data: bytes) -> Any:
        """Upload part ``number`` (1-based); what :meth:`complete` needs to name it."""

    @abstractmethod
    def complete(self, parts: list[Any], size: int) -> None:
        """Make the object visible from its parts (in order), ``size`` bytes in all."""

    def abort(self) -> None:  # noqa: B027 - a hook, empty where a store needs nothing
        """Drop what was uploaded (best effort: never raises)."""


class StreamingUpload(io.RawIOBase):
    """A write-only file that uploads through an :class:`UploadTarget` in parts.

    Args:
        target: the store's hooks for this object.
        part_size: bytes per part (every part but the last is exactly this big).
        grow_every: double the part size after this many parts (S3 allows 10,000 parts);
            None keeps it fixed.
        in_flight: parts uploaded in background threads while the producer fills the
            next one (memory: ``in_flight + 1`` parts); 0 uploads each part in place.

    Closing the file does not commit: the producer may close it, :meth:`finish` commits.
    """

    def __init__(
        self,
        target: UploadTarget,
        *,
        part_size: int,
        grow_every: int | None = None,
        in_flight: int = 0,
    ) -> None:
        super().__init__()
        self._target = target
        self._part_size = part_size
        self._grow_every = grow_every
        self._in_flight = in_flight
        self._buffer = bytearray()
        self._size = 0
        self._parts: list[Any] = []
        self._pending: list[Future[Any]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._done = False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._size

    def close(self) -> None:  # the producer may close us: finishing is the caller's job
        pass

    def write(self, data: Any) -> int:
        if self._done:
            raise ValueError("write to a finished or aborted upload")
        view = memoryview(data).cast("B")
        self._buffer += view
        self._size += len(view)
        while len(self._buffer) >= self.part_size:
            size = self.part_size
            self._put(bytes(self._buffer[:size]))
            del self._buffer[:size]
        return len(view)

    @property
    def part_size(self) -> int:
        """The size of the next part."""
        if self._grow_every is None:
            return self._part_size
        return self._part_size << (self._count() // self._grow_every)

    def _count(self) -> int:
        return len(self._parts) + len(self._pending)

    def _put(self, data: bytes) -> None:
        if self._count() == 0:
            self._target.begin()
        number = self._count() + 1
        if self._in_flight <= 0:
            self._parts.append(self._target.put_part(number, data))
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._in_flight, thread_name_prefix="upload-part")
        while len(self._pending) >= self._in_flight:
            self._parts.append(self._pending.pop(0).result())
        self._pending.append(self._pool.submit(self._target.put_part, number, data))

    def finish(self) -> int:
        """Commit what was written (one put if it is less than one part); its size."""
        if self._done:
            raise ValueError("the upload is finished or aborted already")
        if self._count() == 0:
            self._target.put_whole(bytes(self._buffer))
        else:
            if self._buffer:
                self._put(bytes(self._buffer))
            while self._pending:
                self._parts.append(self._pending.pop(0).result())
            self._target.complete(self._parts, self._size)
        self._release()
        return self._size

    def abort(self) -> None:
        """Stop the background uploads and drop what was uploaded: nothing becomes visible."""
        if self._done:
            return
        for future in self._pending:
            future.cancel()
        self._release()
        self._target.abort()

    def _release(self) -> None:
        self._done = True
        self._buffer = bytearray()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._pending.clear()


def upload_stream(
    target: UploadTarget,
    produce: Callable[[BinaryIO], None],
    *,
    part_size: int,
    grow_every: int | None = None,
    in_flight: int = 0,
) -> int:
    """Upload what ``produce`` writes to a stream, in parts (see :class:`StreamingUpload`);
    its size. Any failure, the producer's included, aborts the upload and is raised."""
    upload = StreamingUpload(
        target, part_size=part_size, grow_every=grow_every, in_flight=in_flight
    )
    try:
        produce(cast(BinaryIO, upload))
        return upload.finish()
    except BaseException:
        upload.abort()
        raise
