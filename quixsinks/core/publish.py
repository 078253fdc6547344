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

Both protocols keep a **fenced ledger** (:mod:`quixsinks.core.ledger`): every entry
carries the streaming query id, the marker folder of a sink id holds an ``owner`` object
(created create-only by the first query that commits), and a query that does not own the
sink id fails before anything is published (``LedgerFenceError``) unless the options
hand the sink id over (``takeover_query_id``).

Readers of the plain directory may see a half-published batch for a moment, never a
duplicate. ``abort`` deletes staged files, except those of a batch whose marker
exists: that batch has been committed (Spark can call abort after a commit that
raised late), and its replay will finish it (a keyed batch write: its rerun). A failed
batch ``df.write`` without the key (never seen again) is rolled back instead: published
files, marker and staging are removed.

In overwrite (complete) mode a committer that finds a newer batch of its sink id already
committed is *superseded*: it publishes nothing and deletes nothing of the newer batch.
Staging that nobody will publish (a query that never runs again) is swept by later
commits once it is older than ``staging_max_age_hours`` and no marker names it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from .batch import WriteContext
from .commits import CommitRecord
from .destinations import Destination, LocalDestination
from .errors import CommitError, DestinationError, DestinationNotFoundError, LedgerFenceError
from .ledger import (
    DEFAULT_KEEP_BATCHES,
    Ledger,
    LedgerEntry,
    LedgerStore,
    RecordingLedgerStore,
    beyond_kept,
    check_sink_id,
    log_already_committed,
)

__all__ = ["AppendPublisher", "FilePublisher", "PublishResult", "StagedFile", "StagingArea"]

logger = logging.getLogger("quixsinks.publish")

_BATCH_DIGITS = 20
#: Prune old markers and sweep abandoned staging in every N-th batch's commit (listing
#: the ledger and the staging area costs requests on an object store).
HOUSEKEEPING_EVERY = 10
#: An empty marker older than this was torn by a crash between create and write.
TORN_MARKER_SECONDS = 60.0
#: Staging older than this, that no marker names, belongs to nobody (hours).
DEFAULT_STAGING_MAX_AGE_HOURS = 24.0


@dataclass(frozen=True)
class StagedFile:
    """One staged piece, as carried in a receipt."""

    staging_key: str
    final_key: str
    rows: int
    nbytes: int


class StagingArea:
    """The hidden folder (``state_prefix``) where tasks stage and the ledger lives."""

    def __init__(
        self,
        destination: Destination,
        state_prefix: str = "_quixsinks",
        *,
        keep_batches: int = DEFAULT_KEEP_BATCHES,
        staging_max_age_hours: float = DEFAULT_STAGING_MAX_AGE_HOURS,
    ) -> None:
        self.destination = destination
        self.state_prefix = state_prefix
        self.keep_batches = keep_batches
        self.staging_max_age_hours = staging_max_age_hours

    def batch_prefix(self, sink_id: str, batch_id: int) -> str:
        return f"{self.state_prefix}/staging/{check_sink_id(sink_id)}/{batch_id:0{_BATCH_DIGITS}d}"

    def ledger_prefix(self, sink_id: str) -> str:
        return f"{self.state_prefix}/ledger/{check_sink_id(sink_id)}"

    def marker_key(self, sink_id: str, batch_id: int) -> str:
        return f"{self.ledger_prefix(sink_id)}/{batch_id:0{_BATCH_DIGITS}d}.json"

    def owner_key(self, sink_id: str) -> str:
        return f"{self.ledger_prefix(sink_id)}/owner.json"

    def markers(self, sink_id: str) -> dict[int, str]:
        """The sink id's markers by batch id (not its owner object, nor a marker's temporary
        file while it is linked into place)."""
        prefix = self.ledger_prefix(sink_id)
        found: dict[int, str] = {}
        for key in self.destination.list(prefix):
            batch = _marker_batch(key[len(prefix) + 1 :])
            if batch is not None:
                found[batch] = key
        return found

    def forget(self, sink_id: str, batch_id: int) -> None:
        """Delete a batch write's marker and its sink id's owner: a batch write is never
        replayed, and the next one of the same sink id starts with a fresh ledger."""
        self.destination.delete([self.marker_key(sink_id, batch_id), self.owner_key(sink_id)])

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
        """Housekeeping after ``batch_id``'s commit.

        * Markers: all but the newest ``keep_batches`` go (by count: keyed batch writes
          use sparse ids, :meth:`~quixsinks.core.ledger.RecordingLedgerStore.prune`).
        * Staging of lower batch ids that have a marker: the pieces of attempts that lost
          go; the pieces the marker's manifest names stay (a publish a crash interrupted,
          which the batch's rerun finishes).
        * Staging of lower batch ids without a marker stays: a keyed write of the sink id
          may be committing it right now; :meth:`sweep` removes it once it is abandoned.
        """
        markers = self.markers(sink_id)
        old = [markers[b] for b in sorted(beyond_kept(markers, self.keep_batches, batch_id))]
        staging = f"{self.state_prefix}/staging/{sink_id}"
        leftovers: dict[int, list[str]] = {}
        for key in self.destination.list(staging):
            earlier = _batch_of(key, staging)
            if 0 <= earlier < batch_id and earlier in markers:
                leftovers.setdefault(earlier, []).append(key)
        for earlier, keys in sorted(leftovers.items()):
            named = self._still_to_move(markers[earlier])
            if named is not None:
                old += [k for k in keys if k not in named]
        if old:
            self.destination.delete(old)

    def _still_to_move(self, marker: str) -> set[str] | None:
        """The staged keys a marker's manifest names (its publish moves them), or None when
        the marker cannot be read now (being written, or gone): keep everything."""
        try:
            manifest = self.read_marker(marker)
        except CommitError:
            return None
        if manifest is None:
            return None
        return {str(src) for src, _ in manifest.get("files", [])}

    def sweep(self, now: float | None = None) -> list[str]:
        """Delete abandoned staging: batch folders of any sink id that no marker names and
        whose newest file is older than ``staging_max_age_hours``. Returns what went."""
        now = time.time() if now is None else now
        limit = now - self.staging_max_age_hours * 3600
        root = f"{self.state_prefix}/staging"
        folders: dict[tuple[str, str], list[str]] = {}
        for key in self.destination.list(root):
            parts = key[len(root) + 1 :].split("/")
            if len(parts) >= 2:
                folders.setdefault((parts[0], parts[1]), []).append(key)
        doomed: list[str] = []
        for (sink_id, batch), keys in folders.items():
            if not batch.isdigit() or self.destination.exists(self.marker_key(sink_id, int(batch))):
                continue  # a committed batch whose publish a replay may still finish
            times = [self.destination.modified(k) or now for k in keys]
            if max(times) < limit:
                doomed.extend(keys)
        if doomed:
            logger.warning(
                "%s: deleting %d abandoned staged file(s) older than %g h",
                self.destination.url,
                len(doomed),
                self.staging_max_age_hours,
            )
            self.destination.delete(doomed)
        return doomed

    def ledger(self, takeover_query_id: str | None = None) -> Ledger:
        """The fenced ledger kept in this staging area's marker folders."""
        return Ledger(
            MarkerStore(self),
            takeover_query_id=takeover_query_id,
            keep_batches=self.keep_batches,
        )

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The commit records kept in the markers of ``sink_id`` (or of every sink id),
        oldest first; markers without one (written before records were kept, or pruned
        beyond ``keep_batches``) give none."""
        root = f"{self.state_prefix}/ledger"
        prefix = self.ledger_prefix(sink_id) if sink_id is not None else root
        records = []
        for key in self.destination.list(prefix):
            folder, _, name = key.rpartition("/")
            if _marker_batch(name) is None:
                continue  # owner objects, anything else
            if sink_id is None and folder.rpartition("/")[0] != root:
                continue
            try:
                manifest = self.read_marker(key)
            except (CommitError, DestinationNotFoundError):
                continue  # being written, or pruned meanwhile
            record = (manifest or {}).get("record")
            if isinstance(record, dict):
                records.append(CommitRecord.from_dict(record))
        return sorted(records, key=lambda r: (r.committed_at, r.sink_id, r.batch_id))

    def read_marker(self, key: str) -> dict[str, Any] | None:
        """A marker's manifest; None when it is missing, or torn (empty and old enough)."""
        try:
            data = self.destination.read_bytes(key)
        except DestinationNotFoundError:
            return None
        if data.strip():
            parsed: dict[str, Any] = json.loads(data)
            return parsed
        age = time.time() - (self.destination.modified(key) or time.time())
        if age < TORN_MARKER_SECONDS:
            raise CommitError(
                f"marker {key} is being written by another committer (or was torn less than "
                f"{TORN_MARKER_SECONDS:g} s ago); the batch will be committed by the replay"
            )
        logger.warning("%s: removing a marker torn by a crash (empty)", key)
        self.destination.delete([key])
        return None


class MarkerStore(RecordingLedgerStore):
    """Ledger entries as marker objects, plus one ``owner`` object per sink id."""

    def __init__(self, staging: StagingArea) -> None:
        self.staging = staging
        self.destination = staging.destination
        self._owners: dict[str, set[str]] = {}  # read once per store (one commit)

    def owners(self, sink_id: str) -> set[str]:
        if sink_id in self._owners:
            return self._owners[sink_id]
        found = self._read_owners(sink_id)
        self._owners[sink_id] = found
        return found

    def _read_owners(self, sink_id: str) -> set[str]:
        owner = self.staging.read_marker(self.staging.owner_key(sink_id))
        if owner is not None:
            return {str(owner.get("query_id", ""))}
        # markers without an owner object (quixsinks 0.1): their query ids, if any
        markers = self.staging.markers(sink_id)
        if not markers:
            return set()
        newest = self.staging.read_marker(markers[max(markers)])
        return {str(newest.get("query_id", ""))} if newest is not None else set()

    def claim(self, sink_id: str, query_id: str) -> None:
        """Make ``query_id`` the owner (create-only); LedgerFenceError if another is."""
        key = self.staging.owner_key(sink_id)
        body = json.dumps({"sink_id": sink_id, "query_id": query_id}).encode()
        if self.destination.create_exclusive(key, body):
            self._owners[sink_id] = {query_id}
            return
        owner = self.staging.read_marker(key)
        if owner is None:  # torn, removed: try once more
            if self.destination.create_exclusive(key, body):
                return
            owner = self.staging.read_marker(key) or {}
        if owner.get("query_id") != query_id:
            raise LedgerFenceError(
                sink_id=sink_id, owner_query_id=str(owner.get("query_id", "")), query_id=query_id
            )

    def get(self, sink_id: str, batch_id: int) -> LedgerEntry | None:
        manifest = self.staging.read_marker(self.staging.marker_key(sink_id, batch_id))
        if manifest is None:
            return None
        return LedgerEntry(sink_id, batch_id, str(manifest.get("query_id", "")))

    def record(self, entry: LedgerEntry) -> bool:
        body = json.dumps(
            {"sink_id": entry.sink_id, "batch_id": entry.batch_id, "query_id": entry.query_id}
        ).encode()
        return self.destination.create_exclusive(
            self.staging.marker_key(entry.sink_id, entry.batch_id), body
        )

    def drop_query(self, sink_id: str, query_id: str) -> None:
        # a sink id has one owner at a time: every marker and the owner object go
        self.destination.delete(self.destination.list(self.staging.ledger_prefix(sink_id)))
        self._owners.pop(sink_id, None)

    def prune(self, sink_id: str, keep: int, recorded: int) -> None:
        markers = self.staging.markers(sink_id)
        gone = beyond_kept(markers, keep, recorded)
        self.destination.delete([markers[b] for b in sorted(gone)])

    def newest_batch(self, sink_id: str) -> int:
        return max(self.staging.markers(sink_id), default=-1)


def _marker_batch(name: str) -> int | None:
    """The batch id of a marker's file name (``<digits>.json``); None for anything else."""
    if name.endswith(".json") and name[:-5].isdigit():
        return int(name[:-5])
    return None


def _batch_of(key: str, prefix: str) -> int:
    """The batch id of a key below ``prefix`` (its first component: digits[.json])."""
    first = key[len(prefix) + 1 :].split("/", 1)[0].split(".", 1)[0]
    return int(first) if first.isdigit() else -1


@dataclass(frozen=True)
class PublishResult:
    """How a publish ended.

    Attributes:
        files: how many files the batch's manifest names.
        already_committed: the marker was there (the manifest is an earlier attempt's).
        superseded: complete mode: a newer batch landed; nothing was published.
        published: the final keys of the manifest's files.
    """

    files: int
    already_committed: bool
    superseded: bool = False
    published: tuple[str, ...] = ()


class FilePublisher:
    """Publishes staged files to fixed final keys, exactly once per (sink id, batch id)."""

    def __init__(self, staging: StagingArea, takeover_query_id: str | None = None) -> None:
        self.staging = staging
        self.destination = staging.destination
        self.store = MarkerStore(staging)
        self.ledger = Ledger(
            self.store, takeover_query_id=takeover_query_id, keep_batches=staging.keep_batches
        )

    def is_committed(self, sink_id: str, batch_id: int) -> bool:
        return self.destination.exists(self.staging.marker_key(sink_id, batch_id))

    def publish(
        self,
        sink_id: str,
        batch_id: int,
        files: Sequence[StagedFile],
        *,
        query_id: str = "",
        replace_prefix: str | None = None,
        name_prefix: str | None = None,
        keep_ledger: bool = True,
        record: CommitRecord | None = None,
    ) -> PublishResult:
        """Publish a batch (driver side). See the module docstring for the protocol.

        Args:
            query_id: the streaming query committing (fences the ledger).
            name_prefix: overwrite mode: published names of this writer start with
                ``<name_prefix>-<batch id, 10 digits>-``; files of its newer batches are
                never deleted by an older batch.
            replace_prefix: overwrite mode: delete every published file whose key starts
                with this prefix (outside the state folder) before moving the new ones.
            keep_ledger: keep the marker so a replay is recognised (streaming, or a keyed
                batch write); a batch write without the key, never seen again, drops it at
                the end.
            record: the batch's commit record, kept in the marker (``record``) and read
                back by :meth:`StagingArea.commit_records`.
        """
        self.ledger.fence(sink_id, query_id)
        if self.store.owners(sink_id) != {query_id}:  # read once, cached: claim only if new
            self.store.claim(sink_id, query_id)
        marker = self.staging.marker_key(sink_id, batch_id)
        if replace_prefix is not None and self._newer_committed(sink_id, batch_id):
            return self._superseded(sink_id, batch_id)
        manifest: dict[str, Any] = {
            "sink_id": sink_id,
            "batch_id": batch_id,
            "query_id": query_id,
            "replace_prefix": replace_prefix,
            "files": [[f.staging_key, f.final_key] for f in files],
        }
        if record is not None:
            manifest["record"] = record.to_dict()
        created = self.destination.create_exclusive(marker, json.dumps(manifest).encode())
        if not created:
            existing = self.staging.read_marker(marker)
            if existing is None:  # torn and removed: this commit takes its place
                created = self.destination.create_exclusive(marker, json.dumps(manifest).encode())
                existing = manifest if created else self.staging.read_marker(marker)
            if existing is None or existing.get("query_id", "") != query_id:
                raise LedgerFenceError(
                    sink_id=sink_id,
                    owner_query_id=str((existing or {}).get("query_id", "")),
                    query_id=query_id,
                )
            manifest = existing
            if not created:
                log_already_committed(sink_id, batch_id)
        moves = [(src, dst) for src, dst in manifest["files"]]
        overwrite = manifest.get("replace_prefix") is not None  # as the winning commit said
        if overwrite:
            newer = _newer_batch_pattern(name_prefix or sink_id)
            self._delete_published(
                str(manifest["replace_prefix"]), {dst for _, dst in moves}, batch_id, newer
            )
        missing = self.destination.move_many(moves)
        if missing:
            if overwrite and self._newer_committed(sink_id, batch_id):
                return self._superseded(sink_id, batch_id)
            src, dst = missing[0]
            raise CommitError(
                f"sink {sink_id} batch {batch_id}: staged file {src} is gone and {dst} was "
                "never published; the staging folder was deleted by hand?"
            )
        if overwrite and self._newer_committed(sink_id, batch_id):
            # a newer batch landed while we moved: ours is out of date, its files go
            self.destination.delete([dst for _, dst in moves])
            return self._superseded(sink_id, batch_id)
        self.staging.discard(sink_id, batch_id)
        if not keep_ledger:
            self.staging.forget(sink_id, batch_id)
        elif batch_id % HOUSEKEEPING_EVERY == 0:
            self.staging.prune(sink_id, batch_id)
            self.staging.sweep()
        return PublishResult(
            files=len(moves),
            already_committed=not created,
            published=tuple(dst for _, dst in moves),
        )

    def _newer_committed(self, sink_id: str, batch_id: int) -> bool:
        """Whether a later batch of this sink id has a marker (complete mode: ours is stale)."""
        return self.store.newest_batch(sink_id) > batch_id

    def _superseded(self, sink_id: str, batch_id: int) -> PublishResult:
        logger.warning(
            "sink %s batch %d: a newer batch has been committed (complete mode); this one is "
            "out of date and is not published",
            sink_id,
            batch_id,
        )
        self.staging.discard(sink_id, batch_id)
        return PublishResult(files=0, already_committed=False, superseded=True)

    def _delete_published(
        self, prefix: str, keep: set[str], batch_id: int, ours: re.Pattern[str]
    ) -> None:
        """Overwrite: delete what is published under ``prefix``, except the batch's own
        files and files of newer batches (a lagging committer never removes those)."""
        state = self.staging.state_prefix + "/"
        doomed = []
        for key in self.destination.list(prefix):
            if key.startswith(state) or key in keep:
                continue
            if any(part.startswith((".", "_")) for part in key.split("/")):
                continue
            match = ours.match(key.rsplit("/", 1)[-1])
            if match and int(match.group(1)) > batch_id:
                continue
            doomed.append(key)
        self.destination.delete(doomed)

    def abort(
        self, sink_id: str, batch_id: int, files: Sequence[StagedFile], *, ledgered: bool = True
    ) -> None:
        """Clean up after a failed batch.

        Ledgered (streaming, or a keyed batch write): delete this attempt's staged files,
        unless the batch was committed (its replay or rerun finishes it). A batch write
        without the key is never seen again: roll it back whole (published files of its
        manifest, marker, every attempt's staging), and the final keys of ``files``: its
        publish may have ended (and dropped its marker) before a later step of the commit
        failed, e.g. the sink's own commit after the dead letters were published. Its sink
        id is its own, so those names are no other write's.
        """
        marker = self.staging.marker_key(sink_id, batch_id)
        if ledgered:
            if self.is_committed(sink_id, batch_id):
                logger.warning(
                    "sink %s batch %d: abort after a commit that landed; keeping it",
                    sink_id,
                    batch_id,
                )
                return
            self.destination.delete([f.staging_key for f in files])
            return
        try:
            manifest = self.staging.read_marker(marker)
        except CommitError:
            manifest = None
        if manifest is not None:
            logger.warning(
                "write %s failed after its publish began: removing its %d file(s)",
                sink_id,
                len(manifest["files"]),
            )
            self.destination.delete([dst for _, dst in manifest["files"]])
        if files:  # deleting a key that is not there is no error
            self.destination.delete([f.final_key for f in files])
        self.staging.discard(sink_id, batch_id)
        self.staging.forget(sink_id, batch_id)


def _newer_batch_pattern(name_prefix: str) -> re.Pattern[str]:
    """Matches this writer's published names, capturing the batch id."""
    return re.compile(re.escape(name_prefix) + r"-(\d{10})-")


class AppendPublisher:
    """Appends staged pieces to one local file, exactly once per (sink id, batch id).

    The ledger is a log of JSON lines beside the file, serialised by a lock file; it is
    compacted (rewritten atomically) once it holds more than twice ``keep_batches``
    entries of finished batches per sink id.
    """

    def __init__(
        self,
        staging: StagingArea,
        target_key: str,
        ledger_key: str,
        takeover_query_id: str | None = None,
    ) -> None:
        if not isinstance(staging.destination, LocalDestination):
            raise DestinationError(
                "appending to one file needs a local (or mounted) directory, not "
                f"{staging.destination.url}; use the file sink without append=true",
                location=staging.destination.url,
            )
        self.staging = staging
        self.destination: LocalDestination = staging.destination
        self.target = self.destination.path(target_key)
        self.ledger = self.destination.path(ledger_key)
        self.lock = self.ledger + ".lock"
        self.takeover_query_id = takeover_query_id

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
        with open(os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644), "r+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(os.open(self.ledger, os.O_RDWR | os.O_CREAT, 0o644), "r+b") as handle:
                    text = handle.read()
                    complete = text[: text.rfind(b"\n") + 1]
                    if len(complete) != len(text):
                        handle.truncate(len(complete))
                    handle.seek(len(complete))
                    entries = [json.loads(line) for line in complete.splitlines() if line.strip()]

                    def log(entry: dict[str, Any]) -> None:
                        # by path, not through ``handle``: a takeover rewrites the ledger
                        # (a new file renamed into place), and a line written through the
                        # old handle would go to a file nobody reads
                        with open(self.ledger, "ab") as out:
                            out.write(json.dumps(entry).encode() + b"\n")
                            out.flush()
                            os.fsync(out.fileno())
                        entries.append(entry)

                    yield entries, log
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _entries(self) -> list[dict[str, Any]]:
        """The ledger's complete lines, read without the lock (a torn last line is no entry)."""
        if not os.path.exists(self.ledger):
            return []
        with open(self.ledger, "rb") as handle:
            text = handle.read()
        complete = text[: text.rfind(b"\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def fenced_ledger(self, store: AppendLogStore | None = None) -> Ledger:
        return Ledger(
            store or AppendLogStore(self._entries()),
            takeover_query_id=self.takeover_query_id,
            keep_batches=self.staging.keep_batches,
        )

    def is_committed(self, sink_id: str, batch_id: int) -> bool:
        return any(_is_done(e, sink_id, batch_id) for e in self._entries())

    def publish(
        self,
        sink_id: str,
        batch_id: int,
        files: Sequence[StagedFile],
        header: bytes = b"",
        *,
        query_id: str = "",
        record: Callable[[], CommitRecord] | None = None,
    ) -> PublishResult:
        """Append a batch (driver side); ``record`` makes the batch's commit record, kept
        in its ``done`` ledger line (see :meth:`commit_records`)."""
        with self._locked_ledger() as (entries, log):
            store = AppendLogStore(entries)
            self.fenced_ledger(store).fence(sink_id, query_id)
            if store.dropped:
                self._rewrite([e for e in entries if e not in store.dropped])
                entries[:] = [e for e in entries if e not in store.dropped]
            done = store.get(sink_id, batch_id)
            if done is not None:
                log_already_committed(sink_id, batch_id)
                self.staging.discard(sink_id, batch_id)
                return PublishResult(files=0, already_committed=True)
            size = os.path.getsize(self.target) if os.path.exists(self.target) else 0
            # a half-finished append is undone; its file may not exist (a crash before the
            # first append made it): then there is nothing to undo
            if entries and entries[-1]["state"] == "begin" and os.path.exists(self.target):
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
                    os.fsync(f.fileno())
                size = offset
            entry = {"sink_id": sink_id, "batch_id": batch_id, "query_id": query_id, "offset": size}
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
            finished: dict[str, Any] = {**entry, "state": "done", "end": end}
            if record is not None:
                finished["record"] = record().to_dict()
            log(finished)
            self._compact(entries)
        self.staging.discard(sink_id, batch_id)
        if batch_id % HOUSEKEEPING_EVERY == 0:
            self.staging.prune(sink_id, batch_id)
            self.staging.sweep()
        return PublishResult(files=len(files), already_committed=False)

    def _compact(self, entries: list[dict[str, Any]]) -> None:
        """Keep the newest ``keep_batches`` finished entries per sink id (lock held)."""
        keep = self.staging.keep_batches
        per_sink: dict[str, list[dict[str, Any]]] = {}
        for e in entries:
            if e.get("state") == "done":
                per_sink.setdefault(str(e.get("sink_id")), []).append(e)
        if all(len(done) <= 2 * keep for done in per_sink.values()):
            return
        kept = [e for done in per_sink.values() for e in done[-keep:]]
        self._rewrite(sorted(kept, key=entries.index))

    def _rewrite(self, entries: list[dict[str, Any]]) -> None:
        """Replace the ledger atomically (temp file, fsync, rename) with ``entries``."""
        temp = f"{self.ledger}.{uuid.uuid4().hex}.tmp"
        with open(temp, "wb") as f:
            f.write(b"".join(json.dumps(e).encode() + b"\n" for e in entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, self.ledger)

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The commit records of the ledger's ``done`` lines (of ``sink_id``, or of every
        sink id), oldest first; lines without one (written before records were kept) give
        none, as do entries compacted away beyond ``keep_batches``."""
        return [
            CommitRecord.from_dict(e["record"])
            for e in self._entries()
            if e.get("state") == "done"
            and isinstance(e.get("record"), dict)
            and (sink_id is None or e.get("sink_id") == sink_id)
        ]

    def abort(self, sink_id: str, batch_id: int, files: Sequence[StagedFile]) -> None:
        if self.is_committed(sink_id, batch_id):
            return
        self.destination.delete([f.staging_key for f in files])


class AppendLogStore(LedgerStore):
    """The append ledger's entries (read under its lock) as a LedgerStore."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        self.dropped: list[dict[str, Any]] = []

    def owners(self, sink_id: str) -> set[str]:
        return {
            str(e.get("query_id", ""))
            for e in self.entries
            if e.get("sink_id") == sink_id and e.get("state") == "done"
        }

    def get(self, sink_id: str, batch_id: int) -> LedgerEntry | None:
        for e in self.entries:
            if _is_done(e, sink_id, batch_id):
                return LedgerEntry(sink_id, batch_id, str(e.get("query_id", "")))
        return None

    def drop_query(self, sink_id: str, query_id: str) -> None:
        last = self.entries[-1] if self.entries else None
        self.dropped = [
            e
            for e in self.entries
            if e.get("sink_id") == sink_id
            and str(e.get("query_id", "")) == query_id
            and not (e is last and e.get("state") == "begin")  # its truncate-back is needed
        ]


def _append_file(out: BinaryIO, source: str) -> None:
    """Append the file ``source`` to ``out`` in bounded memory (in-kernel where possible)."""
    with _translate_missing(source), open(source, "rb") as src:
        out.flush()
        start = out.tell()
        try:
            while os.sendfile(out.fileno(), src.fileno(), None, 1 << 30):
                pass
        except OSError:  # no sendfile between these files: copy through user space
            out.seek(start)
            out.truncate()  # what a sendfile that failed part-way wrote
            src.seek(0)
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
