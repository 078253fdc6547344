"""Specification of the commit protocols of file-like sinks (quixsinks.core.publish).

FilePublisher and AppendPublisher are exercised on a real directory, with replays,
crashes half-way and concurrent commits simulated by wrapping the destination.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from quixsinks.core.batch import WriteContext
from quixsinks.core.destinations import Destination, LocalDestination
from quixsinks.core.errors import CommitError, DestinationError
from quixsinks.core.ledger import BATCH_WRITE_QUERY_ID
from quixsinks.core.ledger import DEFAULT_KEEP_BATCHES as KEEP_BATCHES
from quixsinks.core.publish import (
    AppendPublisher,
    FilePublisher,
    PublishResult,
    StagedFile,
    StagingArea,
)

SINK = "sink-1"
STATE = "_quixsinks"


class Crash(Exception):
    """A driver dying in the middle of a commit."""


class HookedDestination(LocalDestination):
    """A LocalDestination that runs ``before_move(n)`` before its n-th rename (0-based)."""

    def __init__(self, root: str, before_move: Callable[[int], None]) -> None:
        super().__init__(root)
        self.before_move = before_move
        self.moves = 0

    def _rename(self, src: str, dst: str) -> str:
        n, self.moves = self.moves, self.moves + 1
        self.before_move(n)
        return super()._rename(src, dst)


@pytest.fixture
def dest(tmp_path: Path) -> LocalDestination:
    return LocalDestination(str(tmp_path))


@pytest.fixture
def staging(dest: LocalDestination) -> StagingArea:
    return StagingArea(dest, STATE)


def stage(
    staging: StagingArea, batch_id: int, attempt: str, pieces: dict[str, bytes], sink_id: str = SINK
) -> list[StagedFile]:
    """Stage ``final key -> content`` pieces as one task attempt would."""
    return [
        staging.stage(
            WriteContext(sink_id, batch_id, n, attempt),
            f"piece-{n}",
            data,
            final_key=final_key,
            rows=1,
        )
        for n, (final_key, data) in enumerate(pieces.items())
    ]


def published(dest: Destination) -> dict[str, bytes]:
    return {key: dest.read_bytes(key) for key in dest.list() if not key.startswith(STATE + "/")}


def staged_keys(dest: Destination) -> list[str]:
    return dest.list(f"{STATE}/staging")


FIRST = {"out-0": b"first 0", "out-1": b"first 1", "out-2": b"first 2"}
REPLAY = {"out-a": b"replay a", "out-b": b"replay b"}


# ============================================================================= FilePublisher


def test_publish_moves_staged_files_to_their_final_keys(
    dest: LocalDestination, staging: StagingArea
) -> None:
    result = FilePublisher(staging).publish(SINK, 0, stage(staging, 0, "A", FIRST))
    assert published(dest) == FIRST
    assert (result.files, result.already_committed) == (3, False)


def test_publish_records_the_batch_in_the_ledger(staging: StagingArea) -> None:
    files = stage(staging, 4, "A", FIRST)
    publisher = FilePublisher(staging)
    publisher.publish(SINK, 4, files)
    manifest = json.loads(staging.destination.read_bytes(staging.marker_key(SINK, 4)))
    assert publisher.is_committed(SINK, 4)
    assert manifest["files"] == [[f.staging_key, f.final_key] for f in files]


def test_publish_empties_the_staging_area(dest: LocalDestination, staging: StagingArea) -> None:
    FilePublisher(staging).publish(SINK, 0, stage(staging, 0, "A", FIRST))
    assert staged_keys(dest) == []


def test_uncommitted_batch_is_not_committed(staging: StagingArea) -> None:
    assert not FilePublisher(staging).is_committed(SINK, 0)


def test_replay_of_a_committed_batch_publishes_nothing_new(
    dest: LocalDestination, staging: StagingArea
) -> None:
    FilePublisher(staging).publish(SINK, 7, stage(staging, 7, "A", FIRST))
    result = FilePublisher(staging).publish(SINK, 7, stage(staging, 7, "B", REPLAY))
    assert published(dest) == FIRST
    assert result.already_committed


def test_replay_of_a_committed_batch_deletes_its_staged_files(
    dest: LocalDestination, staging: StagingArea
) -> None:
    FilePublisher(staging).publish(SINK, 7, stage(staging, 7, "A", FIRST))
    FilePublisher(staging).publish(SINK, 7, stage(staging, 7, "B", REPLAY))
    assert staged_keys(dest) == []


def test_replay_with_the_same_final_names_keeps_the_first_contents(
    dest: LocalDestination, staging: StagingArea
) -> None:
    FilePublisher(staging).publish(SINK, 7, stage(staging, 7, "A", FIRST))
    FilePublisher(staging).publish(SINK, 7, stage(staging, 7, "B", {k: b"changed" for k in FIRST}))
    assert published(dest) == FIRST


def test_replay_after_a_crash_half_way_finishes_the_first_commit(
    tmp_path: Path, dest: LocalDestination, staging: StagingArea
) -> None:
    def crash_after_first_move(n: int) -> None:
        if n == 1:
            raise Crash

    crashing = StagingArea(HookedDestination(str(tmp_path), crash_after_first_move), STATE)
    with pytest.raises(Crash):
        FilePublisher(crashing).publish(SINK, 3, stage(staging, 3, "A", FIRST))
    assert 1 <= len(published(dest)) < len(FIRST)  # moves run side by side: some landed

    result = FilePublisher(staging).publish(SINK, 3, stage(staging, 3, "B", REPLAY))
    assert published(dest) == FIRST
    assert staged_keys(dest) == []
    assert result.already_committed


def test_crash_before_the_marker_lets_the_replay_publish_its_own_files(
    tmp_path: Path, dest: LocalDestination, staging: StagingArea
) -> None:
    class NoMarker(LocalDestination):
        def create_exclusive(self, key: str, data: bytes) -> bool:
            raise Crash

    with pytest.raises(Crash):
        FilePublisher(StagingArea(NoMarker(str(tmp_path)), STATE)).publish(
            SINK, 3, stage(staging, 3, "A", FIRST)
        )
    FilePublisher(staging).publish(SINK, 3, stage(staging, 3, "B", REPLAY))
    assert published(dest) == REPLAY
    assert staged_keys(dest) == []


def test_two_publishers_of_one_batch_publish_one_manifest(
    dest: LocalDestination, staging: StagingArea
) -> None:
    files_a = stage(staging, 5, "A", FIRST)
    files_b = stage(staging, 5, "B", REPLAY)
    first = FilePublisher(StagingArea(LocalDestination(dest.root), STATE))
    second = FilePublisher(StagingArea(LocalDestination(dest.root), STATE))
    results = [first.publish(SINK, 5, files_a), second.publish(SINK, 5, files_b)]
    assert published(dest) == FIRST
    assert [r.already_committed for r in results] == [False, True]
    assert staged_keys(dest) == []


def test_publisher_racing_a_concurrent_finisher_succeeds(
    tmp_path: Path, dest: LocalDestination, staging: StagingArea
) -> None:
    files_a = stage(staging, 5, "A", FIRST)
    files_b = stage(staging, 5, "B", REPLAY)

    def other_driver_finishes_first(n: int) -> None:
        if n == 0:  # A holds the marker; B reads it and publishes A's manifest
            FilePublisher(staging).publish(SINK, 5, files_b)

    racing = StagingArea(HookedDestination(str(tmp_path), other_driver_finishes_first), STATE)
    FilePublisher(racing).publish(SINK, 5, files_a)
    assert published(dest) == FIRST


def test_vanished_unpublished_file_is_a_commit_error(
    dest: LocalDestination, staging: StagingArea
) -> None:
    files = stage(staging, 2, "A", FIRST)
    dest.create_exclusive(
        staging.marker_key(SINK, 2),
        json.dumps({"files": [[f.staging_key, f.final_key] for f in files]}).encode(),
    )
    staging.discard(SINK, 2)
    with pytest.raises(CommitError):
        FilePublisher(staging).publish(SINK, 2, [])


def test_abort_deletes_the_staged_files_of_an_uncommitted_batch(
    dest: LocalDestination, staging: StagingArea
) -> None:
    files = stage(staging, 1, "A", FIRST)
    FilePublisher(staging).abort(SINK, 1, files)
    assert staged_keys(dest) == []
    assert published(dest) == {}


def test_abort_keeps_the_staged_files_once_the_marker_exists(
    dest: LocalDestination, staging: StagingArea
) -> None:
    files = stage(staging, 1, "A", FIRST)
    dest.create_exclusive(staging.marker_key(SINK, 1), b"{}")
    FilePublisher(staging).abort(SINK, 1, files)
    assert staged_keys(dest) == sorted(f.staging_key for f in files)


def test_abort_after_a_landed_commit_changes_nothing(
    dest: LocalDestination, staging: StagingArea
) -> None:
    files = stage(staging, 1, "A", FIRST)
    FilePublisher(staging).publish(SINK, 1, files)
    FilePublisher(staging).abort(SINK, 1, files)
    assert published(dest) == FIRST
    assert FilePublisher(staging).is_committed(SINK, 1)


def write_existing(dest: Destination) -> None:
    for key in ["old-1.jsonl", "sub/old-2.jsonl", ".hidden", "_SUCCESS", "_meta/x", "sub/.crc"]:
        dest.write_bytes(key, b"old")


def test_replace_prefix_deletes_earlier_files_but_not_hidden_ones(
    dest: LocalDestination, staging: StagingArea
) -> None:
    write_existing(dest)
    FilePublisher(staging).publish(SINK, 0, stage(staging, 0, "A", FIRST), replace_prefix="")
    assert sorted(published(dest)) == [".hidden", "_SUCCESS", "_meta/x", *FIRST, "sub/.crc"]


def test_replace_prefix_keeps_the_new_files_of_the_same_name(
    dest: LocalDestination, staging: StagingArea
) -> None:
    dest.write_bytes("out-0", b"old")
    FilePublisher(staging).publish(SINK, 0, stage(staging, 0, "A", FIRST), replace_prefix="")
    assert published(dest) == FIRST


def test_replace_prefix_only_deletes_below_the_prefix(
    dest: LocalDestination, staging: StagingArea
) -> None:
    write_existing(dest)
    FilePublisher(staging).publish(
        SINK, 0, stage(staging, 0, "A", {"sub/new": b"n"}), replace_prefix="sub"
    )
    assert "old-1.jsonl" in published(dest)
    assert "sub/old-2.jsonl" not in published(dest)


def test_replay_of_an_overwrite_keeps_what_it_published(
    dest: LocalDestination, staging: StagingArea
) -> None:
    FilePublisher(staging).publish(SINK, 0, stage(staging, 0, "A", FIRST), replace_prefix="")
    FilePublisher(staging).publish(SINK, 0, stage(staging, 0, "B", REPLAY), replace_prefix="")
    assert published(dest) == FIRST


def test_without_keep_ledger_the_marker_is_removed(
    dest: LocalDestination, staging: StagingArea
) -> None:
    publisher = FilePublisher(staging)
    publisher.publish(SINK, 0, stage(staging, 0, "A", FIRST), keep_ledger=False)
    assert not publisher.is_committed(SINK, 0)
    assert dest.list(STATE) == []
    assert published(dest) == FIRST


def test_ledger_keeps_the_newest_keep_batches_markers(
    dest: LocalDestination, staging: StagingArea
) -> None:
    for batch_id in range(KEEP_BATCHES + 9):
        dest.create_exclusive(staging.marker_key(SINK, batch_id), b"{}")
    latest = 10 * KEEP_BATCHES  # housekeeping runs in every HOUSEKEEPING_EVERY-th commit
    FilePublisher(staging).publish(SINK, latest, [])
    kept = [b for b in range(KEEP_BATCHES + 9) if dest.exists(staging.marker_key(SINK, b))]
    assert kept == list(range(10, KEEP_BATCHES + 9))  # with `latest`: KEEP_BATCHES markers
    assert dest.exists(staging.marker_key(SINK, latest))


def keyed_write(
    staging: StagingArea, batch_id: int, attempt: str, pieces: dict[str, bytes]
) -> PublishResult:
    files = [
        staging.stage(
            WriteContext(SINK, batch_id, n, attempt, False, BATCH_WRITE_QUERY_ID),
            f"piece-{n}",
            data,
            final_key=key,
            rows=1,
        )
        for n, (key, data) in enumerate(pieces.items())
    ]
    return FilePublisher(staging).publish(SINK, batch_id, files, query_id=BATCH_WRITE_QUERY_ID)


def test_a_keyed_write_is_remembered_across_a_jump_in_batch_ids(
    dest: LocalDestination, staging: StagingArea
) -> None:
    """Date keys: a month later (a batch id KEEP_BATCHES+ higher, ending in 0, so the
    commit prunes), last month's key is still in the ledger and its rerun writes nothing,
    even with other partitioning (other final names)."""
    keyed_write(staging, 20240509, "a", {"may-0": b"r0", "may-1": b"r1", "may-2": b"r2"})
    keyed_write(staging, 20240610, "b", {"june-0": b"x"})
    rerun = keyed_write(staging, 20240509, "c", {"may-a": b"r0 r1", "may-b": b"r2"})
    assert rerun.already_committed
    assert sorted(published(dest)) == ["june-0", "may-0", "may-1", "may-2"]


def test_pruning_keeps_what_an_interrupted_lower_batch_still_has_to_move(
    tmp_path: Path,
) -> None:
    """A keyed write dies half-way through its moves; a later key commits (and prunes)
    before it runs again: the rerun still finds the staged files its manifest names."""

    def crash_at_second_move(n: int) -> None:
        if crash["on"] and n == 1:
            raise Crash

    crash = {"on": True}
    dest = HookedDestination(str(tmp_path), crash_at_second_move)
    staging = StagingArea(dest, STATE)
    with pytest.raises(Crash):
        keyed_write(staging, 20240509, "a", FIRST)
    crash["on"] = False
    keyed_write(staging, 20240510, "b", {"next": b"next"})
    rerun = keyed_write(staging, 20240509, "c", REPLAY)
    assert rerun.already_committed
    assert published(dest) == {**FIRST, "next": b"next"}
    assert staged_keys(dest) == []


def test_pruning_keeps_the_staging_of_a_lower_batch_not_committed_yet(
    dest: LocalDestination, staging: StagingArea
) -> None:
    """Another keyed write of the sink id, still running (staged, no marker yet)."""
    running = stage(staging, 3, "running", {"x": b"x"})
    FilePublisher(staging).publish(SINK, 10, stage(staging, 10, "A", FIRST))
    assert staged_keys(dest) == [f.staging_key for f in running]


def test_ledger_of_another_sink_is_not_pruned(dest: LocalDestination, staging: StagingArea) -> None:
    dest.create_exclusive(staging.marker_key("other", 0), b"{}")
    FilePublisher(staging).publish(SINK, 10 * KEEP_BATCHES, [])
    assert dest.exists(staging.marker_key("other", 0))


def test_publish_removes_leftover_staging_of_earlier_committed_batches_only(
    dest: LocalDestination, staging: StagingArea
) -> None:
    FilePublisher(staging).publish(SINK, 3, stage(staging, 3, "winner", {"w": b"w"}))
    old = stage(staging, 3, "zombie-attempt", {"x": b"x"})  # written after the commit
    later = stage(staging, 19, "running", {"y": b"y"})
    FilePublisher(staging).publish(SINK, 10, stage(staging, 10, "A", FIRST))
    assert staged_keys(dest) == [f.staging_key for f in later]
    assert not dest.exists(old[0].staging_key)


def test_ledger_keeps_the_latest_marker_of_a_numeric_sink_id(staging: StagingArea) -> None:
    sink_id = "0" * 20
    publisher = FilePublisher(staging)
    publisher.publish(sink_id, KEEP_BATCHES + 50, [])
    assert publisher.is_committed(sink_id, KEEP_BATCHES + 50)


@pytest.mark.parametrize("sink_id", ["../x", "a/b", "..", ""])
def test_hostile_sink_id_cannot_name_a_staging_folder(staging: StagingArea, sink_id: str) -> None:
    with pytest.raises(ValueError, match="sink id"):
        staging.batch_prefix(sink_id, 0)


def test_staged_file_lives_under_the_batchs_attempt_folder(staging: StagingArea) -> None:
    [piece] = stage(staging, 12, "att-1", {"final.jsonl": b"abc"})
    assert piece.staging_key.startswith(staging.batch_prefix(SINK, 12) + "/att-1/")
    assert (piece.final_key, piece.rows, piece.nbytes) == ("final.jsonl", 1, 3)


# ============================================================================= AppendPublisher

HEADER = b"key,value\r\n"
TARGET = "out.csv"


@pytest.fixture
def appender(staging: StagingArea) -> AppendPublisher:
    return AppendPublisher(staging, TARGET, f"{STATE}/append-ledger.jsonl")


def append(
    appender: AppendPublisher,
    staging: StagingArea,
    batch_id: int,
    *pieces: bytes,
    sink_id: str = SINK,
    attempt: str = "A",
) -> bool:
    files = stage(
        staging, batch_id, attempt, {f"p{n}": p for n, p in enumerate(pieces)}, sink_id=sink_id
    )
    return appender.publish(sink_id, batch_id, files, header=HEADER).already_committed


def target(dest: LocalDestination) -> bytes:
    return dest.read_bytes(TARGET)


def test_append_writes_the_header_then_the_pieces_in_order(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    append(appender, staging, 0, b"a\r\n", b"b\r\n")
    append(appender, staging, 1, b"c\r\n")
    assert target(dest) == HEADER + b"a\r\nb\r\nc\r\n"


def test_append_to_an_existing_file_adds_no_header(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    dest.write_bytes(TARGET, b"existing\r\n")
    append(appender, staging, 0, b"a\r\n")
    assert target(dest) == b"existing\r\na\r\n"


def test_append_empties_the_staging_area(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    append(appender, staging, 0, b"a\r\n")
    assert staged_keys(dest) == []


def test_append_of_a_committed_batch_is_skipped(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    append(appender, staging, 0, b"a\r\n")
    assert append(appender, staging, 0, b"replayed\r\n", attempt="B") is True
    assert target(dest) == HEADER + b"a\r\n"
    assert staged_keys(dest) == []


def test_append_records_the_batch_as_committed(
    staging: StagingArea, appender: AppendPublisher
) -> None:
    assert not appender.is_committed(SINK, 0)
    append(appender, staging, 0, b"a\r\n")
    assert appender.is_committed(SINK, 0)


def crash_mid_append(dest: LocalDestination, appender: AppendPublisher, batch_id: int) -> None:
    """What a driver dying in the middle of appending ``batch_id`` leaves behind."""
    offset = os.path.getsize(appender.target) if os.path.exists(appender.target) else 0
    os.makedirs(os.path.dirname(appender.ledger), exist_ok=True)
    with open(appender.ledger, "a", encoding="utf-8") as ledger:
        entry = {"sink_id": SINK, "batch_id": batch_id, "offset": offset, "state": "begin"}
        ledger.write(json.dumps(entry) + "\n")
    with open(appender.target, "ab") as out:
        out.write(b"garbage from a half-finished append \x00\xff")


def test_half_finished_append_is_truncated_before_the_next_append(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    append(appender, staging, 0, b"a\r\n")
    crash_mid_append(dest, appender, 1)
    append(appender, staging, 1, b"b\r\n")
    assert target(dest) == HEADER + b"a\r\nb\r\n"


def test_half_finished_first_append_is_redone_with_its_header(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    crash_mid_append(dest, appender, 0)
    append(appender, staging, 0, b"a\r\n")
    assert target(dest) == HEADER + b"a\r\n"


def test_half_finished_append_is_not_committed(
    dest: LocalDestination, appender: AppendPublisher
) -> None:
    crash_mid_append(dest, appender, 0)
    assert not appender.is_committed(SINK, 0)


def test_sink_ids_interleave_in_one_file(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    append(appender, staging, 0, b"a0\r\n", sink_id="a")
    append(appender, staging, 0, b"b0\r\n", sink_id="b")
    append(appender, staging, 1, b"a1\r\n", sink_id="a")
    assert append(appender, staging, 0, b"b0 again\r\n", sink_id="b", attempt="B") is True
    assert target(dest) == HEADER + b"a0\r\nb0\r\na1\r\n"


def test_abort_keeps_a_committed_batch(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    append(appender, staging, 0, b"a\r\n")
    late = stage(staging, 0, "B", {"p": b"late\r\n"})
    appender.abort(SINK, 0, late)
    assert target(dest) == HEADER + b"a\r\n"
    assert staged_keys(dest) == [late[0].staging_key]


def test_abort_deletes_the_staged_pieces_of_an_uncommitted_batch(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    appender.abort(SINK, 0, stage(staging, 0, "A", {"p": b"a\r\n"}))
    assert staged_keys(dest) == []
    assert not dest.exists(TARGET)


class InMemory(Destination):
    """A destination that is not a local directory."""

    url = "mem://"

    def check(self) -> None: ...
    def write_bytes(self, key: str, data: bytes) -> None: ...
    def read_bytes(self, key: str) -> bytes:
        return b""

    def exists(self, key: str) -> bool:
        return False

    def list(self, prefix: str = "") -> list[str]:
        return []

    def delete(self, keys: Iterable[str]) -> None: ...
    def move(self, src: str, dst: str) -> None: ...
    def create_exclusive(self, key: str, data: bytes) -> bool:
        return True

    def modified(self, key: str) -> float | None: ...


def test_appending_needs_a_local_destination() -> None:
    with pytest.raises(DestinationError, match="local"):
        AppendPublisher(StagingArea(InMemory()), TARGET, "ledger")


def test_a_ledger_line_torn_by_a_crash_is_ignored_and_cut_off(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    append(appender, staging, 0, b"a\r\n")
    with open(appender.ledger, "ab") as ledger:
        ledger.write(b'{"sink_id": "sink", "batch_id": 1, "off')  # the crash hit here
    assert not appender.is_committed(SINK, 1)
    append(appender, staging, 1, b"b\r\n")
    assert target(dest) == HEADER + b"a\r\nb\r\n"
    assert appender.is_committed(SINK, 1)
    with open(appender.ledger, encoding="utf-8") as ledger:
        assert all(json.loads(line) for line in ledger)


def test_a_torn_done_line_redoes_the_append_once(
    dest: LocalDestination, staging: StagingArea, appender: AppendPublisher
) -> None:
    append(appender, staging, 0, b"a\r\n")
    with open(appender.ledger, "rb") as ledger:
        lines = ledger.read().splitlines(keepends=True)
    with open(appender.ledger, "wb") as ledger:  # "done" of batch 0 only half written
        ledger.write(b"".join(lines[:-1]) + lines[-1][:10])
    assert not appender.is_committed(SINK, 0)
    append(appender, staging, 0, b"a\r\n", attempt="B")
    assert target(dest) == HEADER + b"a\r\n"


def test_an_append_whose_sendfile_fails_part_way_is_copied_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sendfile sends a first part, then fails: the fallback copy starts again from what
    was there before the piece, not after the part already sent."""
    from quixsinks.core import publish

    piece = tmp_path / "piece"
    piece.write_bytes(b"row1\nrow2\nrow3\n")
    real = os.sendfile
    calls: list[int] = []

    def fails_after_a_part(out_fd: int, in_fd: int, offset: Any, count: int) -> int:
        calls.append(count)
        if len(calls) == 1:
            return real(out_fd, in_fd, offset, 5)
        raise OSError(errno.EIO, "a later call fails")

    monkeypatch.setattr(os, "sendfile", fails_after_a_part)
    with open(tmp_path / "out", "w+b") as out:
        out.write(b"head\n")
        publish._append_file(out, str(piece))
    assert (tmp_path / "out").read_bytes() == b"head\nrow1\nrow2\nrow3\n"
