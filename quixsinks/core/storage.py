"""The Destination contract: what every storage backend implements.

A :class:`Destination` is a flat key space under a root (``a/b/c.parquet``) with the few
operations the commit protocol needs (see :mod:`quixsinks.core.destinations` for the list
and for local disk). The backends (``s3``, ``azure``, ``gcs``) import this module, and
:func:`quixsinks.core.destinations.destination_for` imports them: the contract sits below
both, so no import runs in a circle.
"""

from __future__ import annotations

import builtins
import io
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from .errors import DestinationNotFoundError

__all__ = ["DEFAULT_STORAGE_TIMEOUT", "MOVE_THREADS", "Destination", "Move"]

#: Seconds an object store client waits for an answer to one request (and, at most
#: its backend's connect cap of them, for a connection): ``storage_timeout_seconds``.
DEFAULT_STORAGE_TIMEOUT = 60.0
#: A move: (source key, destination key).
Move = tuple[str, str]
#: Moves (server-side copies on object stores) run side by side in :meth:`Destination.move_many`.
MOVE_THREADS = 8


class Destination(ABC):
    """A place to write files, addressed by ``/``-separated keys relative to a root."""

    #: True where a file can be appended to in place (local disk only).
    supports_append: bool = False

    @property
    @abstractmethod
    def url(self) -> str:
        """The root, for messages (never with credentials)."""

    @abstractmethod
    def check(self) -> None:
        """Fail early (on the driver) if the root cannot be written."""

    def create_root(self) -> None:
        """Create the bucket or container (object stores; sinks with an
        ``auto_create_bucket`` option call it when :meth:`check` finds it missing)."""
        raise NotImplementedError(f"{type(self).__name__} cannot create its root")

    @abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None:
        """Write (or replace) ``key``."""

    def write_with(self, key: str, produce: Callable[[BinaryIO], None]) -> int:
        """Write (or replace) ``key`` with what ``produce`` writes to a stream; its size.

        The default collects the bytes in memory; backends override it to stream.
        """
        buffer = io.BytesIO()
        produce(buffer)
        self.write_bytes(key, buffer.getvalue())
        return buffer.tell()

    @abstractmethod
    def read_bytes(self, key: str) -> bytes:
        """Read ``key``; DestinationNotFoundError if it does not exist."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Every key below ``prefix`` (a folder-like prefix, recursive), sorted."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete keys; keys that do not exist are ignored."""

    @abstractmethod
    def move(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing ``dst``."""

    def move_many(self, moves: Sequence[Move]) -> builtins.list[Move]:
        """Move each ``(src, dst)`` pair, durably; the pairs found at neither end (their
        source is gone and was never moved). A pair moved already, by an earlier attempt
        or a concurrent committer, is no error.

        The default runs :meth:`move` for several pairs side by side: on an object store
        each is a request (a server-side copy). One pair runs on this thread.
        """

        def moved(move: Move) -> Move | None:
            src, dst = move
            try:
                self.move(src, dst)
                return None
            except DestinationNotFoundError:
                return None if self.exists(dst) else move

        if len(moves) <= 1:
            results = [moved(move) for move in moves]
        else:
            with ThreadPoolExecutor(max_workers=min(MOVE_THREADS, len(moves))) as pool:
                results = list(pool.map(moved, moves))
        return [move for move in results if move is not None]

    @abstractmethod
    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``data`` if it does not exist; False if it already did.

        Readers never see a partial object: the content is complete and durable before
        the key appears.
        """

    @abstractmethod
    def modified(self, key: str) -> float | None:
        """When ``key`` was last written (epoch seconds), or None if it does not exist."""

    def delete_prefix(self, prefix: str) -> None:
        self.delete(self.list(prefix))
