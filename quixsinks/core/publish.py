"""Exactly-once publishing of staged files: the commit protocols of the file-like sinks.

Executors *stage*: each task writes its pieces under a hidden staging area, in a folder
named after the sink id, the batch id and the task's unique attempt id, and reports
them in its receipt. The driver *publishes* in ``commit`` with one of two protocols,
and writes its ledger entry in the destination, next to the data:

:class:`FilePublisher` (new files per micro-batch; local disk, S3, Azure)
    1. create the batch's marker **create-only**; it holds the manifest (staged key ->
       final key) of the receipts that won. If the marker already exists, a previous
       or concurrent commit of this batch won: its manifest is used instead, and the
       files staged by this attempt are discarded.
    2. move every manifest entry still in staging to its fixed final key (a move that
       already happened is skipped, so a crash half-way is finished by the replay);
    3. delete the batch's staging folder (losing attempts included).

:class:`AppendPublisher` (one growing file, local disk only; ``csvfile`` and ``file``
with ``append``)
    Under an exclusive lock, a ledger line ``begin`` with the file's length is written
    before appending and ``done`` after. A batch with ``done`` is skipped; a ``begin``
    without ``done`` (a crash mid-append) is undone by truncating the file back to the
    recorded length before anything else is appended, as a Bytewax file partition
    resumes from its recorded offset.

Readers of the plain directory may see a half-published batch for a moment, never a
duplicate. ``abort`` deletes staged files, except those of a batch whose marker
exists: that batch has been committed (Spark can call abort after a commit that
raised late), and its replay will finish it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from .batch import WriteContext
from .destinations import Destination, LocalDestination
from .errors import CommitError, DestinationNotFoundError

__all__ = ["AppendPublisher", "FilePublisher", "PublishResult", "StagedFile", "StagingArea"]

logger = logging.getLogger("quixsinks.publish")

#: Ledger entries (markers) kept per sink id; Spark replays only the last batches.
KEEP_BATCHES = 100
_BATCH_DIGITS = 20
_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class StagedFile:
    """One staged piece, as carried in a receipt."""

    staging_key: str
    final_key: str
    rows: int
    nbytes: int


def check_sink_id(sink_id: str) -> str:
    if not _SAFE_ID.match(sink_id) or sink_id in (".", ".."):
        raise ValueError(f"sink id {sink_id!r} may only contain letters, digits, '.', '_' and '-'")
    return sink_id


class StagingArea:
    """The hidden folder (``state_prefix``) where tasks stage and the ledger lives."""

    def __init__(self, destination: Destination, state_prefix: str = "_quixsinks") -> None:
        self.destination = destination
        self.state_prefix = state_prefix

    def batch_prefix(self, sink_id: str, batch_id: int) -> str:
        return f"{self.state_prefix}/staging/{check_sink_id(sink_id)}/{batch_id:0{_BATCH_DIGITS}d}"

    def marker_key(self, sink_id: str, batch_id: int) -> str:
        return (
            f"{self.state_prefix}/ledger/{check_sink_id(sink_id)}/{batch_id:0{_BATCH_DIGITS}d}.json"
        )

    def check(self) -> None:
        """Prove (on the driver) that the destination and the staging area are writable."""
        self.destination.check()
        probe = f"{self.state_prefix}/probe-{uuid.uuid4().hex}"
        self.destination.write_bytes(probe, b"")
        self.destination.delete([probe])

    def stage(
        self,
        context: WriteContext,
        name: str,
        data: bytes | Callable[[BinaryIO], None],
        *,
        final_key: str,
        rows: int,
    ) -> StagedFile:
        """Write one piece of a task's output into staging (executor side).

        ``data`` is the content, or a function that streams it into a file.
        """
        key = f"{self.batch_prefix(context.sink_id, context.batch_id)}/{context.attempt_id}/{name}"
        if callable(data):
            size = self.destination.write_with(key, data)
        else:
            self.destination.write_bytes(key, data)
            size = len(data)
        return StagedFile(staging_key=key, final_key=final_key, rows=rows, nbytes=size)

    def discard(self, sink_id: str, batch_id: int) -> None:
        """Delete the batch's staging folder (every attempt's pieces)."""
        self.destination.delete_prefix(self.batch_prefix(sink_id, batch_id))

    def prune(self, sink_id: str, batch_id: int) -> None:
        """Forget markers older than KEEP_BATCHES and leftovers of earlier batches."""
        ledger = f"{self.state_prefix}/ledger/{check_sink_id(sink_id)}"
        old = [
            k
            for k in self.destination.list(ledger)
            if _batch_of(k, ledger) < batch_id - KEEP_BATCHES
        ]
        staging = f"{self.state_prefix}/staging/{sink_id}"
        old += [k for k in self.destination.list(staging) if _batch_of(k, staging) < batch_id]
        if old:
            self.destination.delete(old)


def _batch_of(key: str, prefix: str) -> int:
    """The batch id of a key below ``prefix`` (its first component: digits[.json])."""
    first = key[len(prefix) + 1 :].split("/", 1)[0].split(".", 1)[0]
    return int(first) if first.isdigit() else -1


@dataclass(frozen=True)
class PublishResult:
    files: int
    already_committed: bool


class FilePublisher:
    """Publishes staged files to fixed final keys, exactly once per (sink id, batch id)."""

    def __init__(self, staging: StagingArea) -> None:
        self.staging = staging
        self.destination = staging.destination

    def is_committed(self, sink_id: str, batch_id: int) -> bool:
        return self.destination.exists(self.staging.marker_key(sink_id, batch_id))

    def publish(
        self,
        sink_id: str,
        batch_id: int,
        files: Sequence[StagedFile],
        *,
        replace_prefix: str | None = None,
        keep_ledger: bool = True,
    ) -> PublishResult:
        """Publish a batch (driver side). See the module docstring for the protocol.

        Args:
            replace_prefix: overwrite mode: delete every published file whose key starts
                with this prefix (outside the state folder) before moving the new ones.
            keep_ledger: keep the marker so a replay is recognised (streaming); a batch
                write, which Spark never replays, drops it at the end.
        """
        marker = self.staging.marker_key(sink_id, batch_id)
        manifest: dict[str, Any] = {
            "sink_id": sink_id,
            "batch_id": batch_id,
            "replace_prefix": replace_prefix,
            "files": [[f.staging_key, f.final_key] for f in files],
        }
        created = self.destination.create_exclusive(marker, json.dumps(manifest).encode())
        if not created:
            manifest = json.loads(self.destination.read_bytes(marker))
            logger.info(
                "sink %s batch %d: already committed, finishing its publish", sink_id, batch_id
            )
        moves = [(src, dst) for src, dst in manifest["files"]]
        if manifest.get("replace_prefix") is not None:
            self._delete_published(str(manifest["replace_prefix"]), {dst for _, dst in moves})
        for src, dst in moves:
            try:
                self.destination.move(src, dst)
                continue
            except DestinationNotFoundError:
                pass  # moved already: by an earlier attempt, or a concurrent committer
            if not self.destination.exists(dst):
                raise CommitError(
                    f"sink {sink_id} batch {batch_id}: staged file {src} is gone and "
                    f"{dst} was never published; the staging folder was deleted by hand?"
                )
        self.staging.discard(sink_id, batch_id)
        if keep_ledger:
            self.staging.prune(sink_id, batch_id)
        else:
            self.destination.delete([marker])
        return PublishResult(files=len(moves), already_committed=not created)

    def _delete_published(self, prefix: str, keep: set[str]) -> None:
        state = self.staging.state_prefix + "/"
        doomed = [
            key
            for key in self.destination.list(prefix)
            if not key.startswith(state)
            and key not in keep
            and not any(part.startswith((".", "_")) for part in key.split("/"))
        ]
        self.destination.delete(doomed)

    def abort(self, sink_id: str, batch_id: int, files: Sequence[StagedFile]) -> None:
        """Delete this attempt's staged files, unless the batch was in fact committed."""
        if self.is_committed(sink_id, batch_id):
            logger.warning(
                "sink %s batch %d: abort after a commit that landed; keeping it", sink_id, batch_id
            )
            return
        self.destination.delete([f.staging_key for f in files])


class AppendPublisher:
    """Appends staged pieces to one local file, exactly once per (sink id, batch id)."""

    def __init__(self, staging: StagingArea, target_key: str, ledger_key: str) -> None:
        if not isinstance(staging.destination, LocalDestination):
            raise TypeError("appending needs a local destination")
        self.staging = staging
        self.destination: LocalDestination = staging.destination
        self.target = self.destination.path(target_key)
        self.ledger = self.destination.path(ledger_key)

    @contextlib.contextmanager
    def _locked_ledger(
        self,
    ) -> Iterator[tuple[list[dict[str, Any]], Callable[[dict[str, Any]], None]]]:
        """Lock the ledger; yield its entries and a function that appends one durably.

        A line torn by a crash (no final newline) is cut off first: it was a ``begin``
        whose append never started, or a ``done`` whose batch is redone after the
        preceding ``begin`` is rolled back.
        """
        os.makedirs(os.path.dirname(self.ledger), exist_ok=True)
        with open(os.open(self.ledger, os.O_RDWR | os.O_CREAT, 0o644), "r+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                text = handle.read()
                complete = text[: text.rfind(b"\n") + 1]
                if len(complete) != len(text):
                    handle.truncate(len(complete))
                handle.seek(len(complete))
                entries = [json.loads(line) for line in complete.splitlines() if line.strip()]

                def log(entry: dict[str, Any]) -> None:
                    handle.write(json.dumps(entry).encode() + b"\n")
                    handle.flush()
                    os.fsync(handle.fileno())

                yield entries, log
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def is_committed(self, sink_id: str, batch_id: int) -> bool:
        if not os.path.exists(self.ledger):
            return False
        with open(self.ledger, "rb") as handle:
            text = handle.read()
        complete = text[: text.rfind(b"\n") + 1]  # a torn last line is no entry
        return any(
            _is_done(json.loads(line), sink_id, batch_id)
            for line in complete.splitlines()
            if line.strip()
        )

    def publish(
        self, sink_id: str, batch_id: int, files: Sequence[StagedFile], header: bytes = b""
    ) -> PublishResult:
        with self._locked_ledger() as (entries, log):
            if any(_is_done(e, sink_id, batch_id) for e in entries):
                self.staging.discard(sink_id, batch_id)
                return PublishResult(files=0, already_committed=True)
            size = os.path.getsize(self.target) if os.path.exists(self.target) else 0
            if entries and entries[-1]["state"] == "begin":
                offset = int(str(entries[-1]["offset"]))
                logger.warning(
                    "%s: undoing a half-finished append of sink %s batch %s "
                    "(truncating %d -> %d bytes)",
                    self.target,
                    entries[-1]["sink_id"],
                    entries[-1]["batch_id"],
                    size,
                    offset,
                )
                with open(self.target, "r+b") as f:
                    f.truncate(offset)
                size = offset
            entry = {"sink_id": sink_id, "batch_id": batch_id, "offset": size}
            log({**entry, "state": "begin"})
            # r+b and a seek, not "ab": sendfile refuses files opened with O_APPEND
            with open(os.open(self.target, os.O_RDWR | os.O_CREAT, 0o644), "r+b") as out:
                out.seek(size)
                if size == 0 and header:
                    out.write(header)
                    out.flush()
                for piece in files:
                    _append_file(out, self.destination.path(piece.staging_key))
                os.fsync(out.fileno())
                end = out.tell()
            log({**entry, "state": "done", "end": end})
        self.staging.discard(sink_id, batch_id)
        self.staging.prune(sink_id, batch_id)
        return PublishResult(files=len(files), already_committed=False)

    def abort(self, sink_id: str, batch_id: int, files: Sequence[StagedFile]) -> None:
        if self.is_committed(sink_id, batch_id):
            return
        self.destination.delete([f.staging_key for f in files])


def _append_file(out: BinaryIO, source: str) -> None:
    """Append the file ``source`` to ``out`` in bounded memory (in-kernel where possible)."""
    with _translate_missing(source), open(source, "rb") as src:
        out.flush()
        try:
            while os.sendfile(out.fileno(), src.fileno(), None, 1 << 30):
                pass
        except OSError:  # no sendfile between these files: copy through user space
            src.seek(0)
            out.seek(0, os.SEEK_END)
            shutil.copyfileobj(src, out, 1 << 20)
        out.flush()


@contextlib.contextmanager
def _translate_missing(path: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as exc:
        raise CommitError(
            f"staged file {path} is gone; was the staging folder deleted by hand?"
        ) from exc


def _is_done(entry: dict[str, object], sink_id: str, batch_id: int) -> bool:
    return (
        entry.get("state") == "done"
        and entry.get("sink_id") == sink_id
        and entry.get("batch_id") == batch_id
    )
