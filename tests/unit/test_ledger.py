"""The fenced ledger: a sink id's entries are only ever read by the query that wrote them.

Each hole found in review has its test here (on local disk, no Spark): a new checkpoint
reusing a sink id, a lagging complete-mode committer, torn markers, unbounded growth, a
failed batch write, abandoned staging.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path

import pytest

from quixsinks.core.batch import WriteContext
from quixsinks.core.destinations import LocalDestination
from quixsinks.core.errors import CommitError, LedgerFenceError
from quixsinks.core.ledger import (
    BATCH_WRITE_QUERY_ID,
    Ledger,
    LedgerEntry,
    RecordingLedgerStore,
    beyond_kept,
    fence_owners,
)
from quixsinks.core.publish import AppendPublisher, FilePublisher, StagedFile, StagingArea

SINK = "orders"
OLD, NEW = "11111111-aaaa-bbbb-cccc-000000000001", "22222222-aaaa-bbbb-cccc-000000000002"


class DictStore(RecordingLedgerStore):
    """The smallest LedgerStore: what a custom sink's store has to provide."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, int], LedgerEntry] = {}

    def owners(self, sink_id: str) -> set[str]:
        return {e.query_id for (s, _), e in self.entries.items() if s == sink_id}

    def get(self, sink_id: str, batch_id: int) -> LedgerEntry | None:
        return self.entries.get((sink_id, batch_id))

    def record(self, entry: LedgerEntry) -> bool:
        return self.entries.setdefault((entry.sink_id, entry.batch_id), entry) is entry

    def drop_query(self, sink_id: str, query_id: str) -> None:
        self.entries = {
            k: e
            for k, e in self.entries.items()
            if not (k[0] == sink_id and e.query_id == query_id)
        }

    def prune(self, sink_id: str, keep: int, recorded: int) -> None:
        gone = beyond_kept((b for s, b in self.entries if s == sink_id), keep, recorded)
        self.entries = {
            k: e for k, e in self.entries.items() if not (k[0] == sink_id and k[1] in gone)
        }


# ----------------------------------------------------------------------------- the rule


def test_an_entry_of_another_query_is_never_read_as_committed() -> None:
    store = DictStore()
    Ledger(store).record(SINK, 0, OLD)
    with pytest.raises(LedgerFenceError) as raised:
        Ledger(store).committed(SINK, 0, NEW)
    error = raised.value
    assert (error.sink_id, error.owner_query_id, error.query_id) == (SINK, OLD, NEW)
    for text in (OLD, NEW, "sink_id", f"takeover_query_id={OLD!r}"):
        assert text in error.message


def test_the_owning_query_sees_its_own_entries() -> None:
    store = DictStore()
    ledger = Ledger(store)
    assert ledger.record(SINK, 4, OLD) is True
    assert ledger.record(SINK, 4, OLD) is False
    assert ledger.committed(SINK, 4, OLD) is True
    assert ledger.committed(SINK, 5, OLD) is False


def test_takeover_drops_only_the_named_query_and_hands_the_sink_id_over() -> None:
    store = DictStore()
    Ledger(store).record(SINK, 0, OLD)
    Ledger(store).record("other-sink", 0, OLD)
    ledger = Ledger(store, takeover_query_id=OLD)
    assert ledger.committed(SINK, 0, NEW) is False
    assert ledger.record(SINK, 0, NEW) is True
    assert store.owners(SINK) == {NEW}
    assert store.owners("other-sink") == {OLD}
    with pytest.raises(LedgerFenceError):  # and the old query is fenced out now
        Ledger(store).committed(SINK, 1, OLD)


def test_takeover_of_a_query_that_is_not_the_owner_is_refused() -> None:
    with pytest.raises(LedgerFenceError):
        fence_owners(SINK, NEW, {OLD}, takeover_query_id="someone-else")


def test_check_is_read_only() -> None:
    store = DictStore()
    Ledger(store).record(SINK, 0, OLD)
    Ledger(store, takeover_query_id=OLD).check(SINK, NEW)  # allowed, but nothing dropped
    assert store.owners(SINK) == {OLD}


def test_record_keeps_the_newest_entries() -> None:
    store = DictStore()
    ledger = Ledger(store, keep_batches=3)
    for batch in range(10):
        ledger.record(SINK, batch, OLD)
    assert sorted(b for _, b in store.entries) == [7, 8, 9]


def test_record_prunes_sparse_batch_ids_by_count() -> None:
    """Keyed batch writes keyed by date: a month's jump prunes nothing while fewer than
    keep_batches entries exist, so a rerun of last month's key is still recognised."""
    store = DictStore()
    ledger = Ledger(store, keep_batches=3)
    for day in (20240509, 20240610, 20250101):
        ledger.record(SINK, day, BATCH_WRITE_QUERY_ID)
    assert ledger.record(SINK, 20240509, BATCH_WRITE_QUERY_ID) is False  # a rerun: skipped
    ledger.record(SINK, 20250102, BATCH_WRITE_QUERY_ID)
    assert sorted(b for _, b in store.entries) == [20240610, 20250101, 20250102]


def test_beyond_kept_is_all_but_the_highest_ids_and_the_one_recorded() -> None:
    assert beyond_kept([5, 1, 9, 3], 2) == {1, 3}
    assert beyond_kept([5, 1, 9, 3], 2, recorded=1) == {3}
    assert beyond_kept([5, 1], 2) == set()
    assert beyond_kept([], 1) == set()


def test_a_keyed_backfill_of_an_old_id_keeps_its_own_entry() -> None:
    """An id below the newest keep_batches (a backfill of an old date): recording it must
    not prune it in the same step, or a retry after a lost answer writes it again."""
    store = DictStore()
    ledger = Ledger(store, keep_batches=2)
    for day in (20240601, 20240602, 20240603):
        ledger.record(SINK, day, BATCH_WRITE_QUERY_ID)
    assert ledger.record(SINK, 20240501, BATCH_WRITE_QUERY_ID) is True
    assert ledger.record(SINK, 20240501, BATCH_WRITE_QUERY_ID) is False  # the retry
    assert sorted(b for _, b in store.entries) == [20240501, 20240602, 20240603]


def test_fence_error_pickles_with_its_attributes() -> None:
    error = pickle.loads(
        pickle.dumps(LedgerFenceError(sink_id=SINK, owner_query_id=OLD, query_id=NEW))
    )
    assert (error.sink_id, error.owner_query_id, error.query_id) == (SINK, OLD, NEW)


# ----------------------------------------------------------------------------- files


def stage(area: StagingArea, batch: int, query: str, rows: int = 1, piece: int = 0) -> StagedFile:
    ctx = WriteContext(SINK, batch, 0, f"a{batch}-{piece}-{query[:4]}", True, query)
    name = f"{ctx.name_prefix}-{batch:010d}-00000-{piece:04d}.jsonl"
    return area.stage(ctx, name, b'{"x": 1}\n' * rows, final_key=name, rows=rows)


def published(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_file())


@pytest.fixture
def area(tmp_path: Path) -> StagingArea:
    return StagingArea(LocalDestination(str(tmp_path)), "_quixsinks")


def test_new_checkpoint_with_the_same_sink_id_publishes_nothing(
    area: StagingArea, tmp_path: Path
) -> None:
    FilePublisher(area).publish(SINK, 0, [stage(area, 0, OLD)], query_id=OLD)
    before = published(tmp_path)
    staged = stage(area, 0, NEW)
    with pytest.raises(LedgerFenceError):
        FilePublisher(area).publish(SINK, 0, [staged], query_id=NEW)
    assert published(tmp_path) == before
    with pytest.raises(LedgerFenceError):  # and the executors' check says so first
        area.ledger().check(SINK, NEW)


def test_takeover_publishes_under_new_names_and_keeps_the_old_files(
    area: StagingArea, tmp_path: Path
) -> None:
    FilePublisher(area).publish(SINK, 0, [stage(area, 0, OLD)], query_id=OLD)
    old = published(tmp_path)
    FilePublisher(area, takeover_query_id=OLD).publish(SINK, 0, [stage(area, 0, NEW)], query_id=NEW)
    files = published(tmp_path)
    assert len(files) == 2
    assert set(old) < set(files)
    assert area.ledger().committed(SINK, 0, NEW)


def test_a_lagging_complete_mode_committer_is_superseded(area: StagingArea, tmp_path: Path) -> None:
    newer = stage(area, 6, OLD)
    FilePublisher(area).publish(SINK, 6, [newer], query_id=OLD, replace_prefix="")
    result = FilePublisher(area).publish(
        SINK, 5, [stage(area, 5, OLD)], query_id=OLD, replace_prefix=""
    )
    assert result.superseded
    assert published(tmp_path) == [newer.final_key]


def test_a_newer_batch_does_not_wedge_the_replay_of_an_older_one(
    area: StagingArea, tmp_path: Path
) -> None:
    """Batch 5's commit crashed half-way (marker written, nothing moved); batch 6 landed
    (deleting batch 5's staging); the replay of batch 5 must finish cleanly."""
    older = [stage(area, 5, OLD, piece=i) for i in range(2)]
    marker = area.marker_key(SINK, 5)
    manifest = {
        "sink_id": SINK,
        "batch_id": 5,
        "query_id": OLD,
        "replace_prefix": "",
        "files": [[f.staging_key, f.final_key] for f in older],
    }
    area.destination.create_exclusive(marker, json.dumps(manifest).encode())
    area.destination.create_exclusive(area.owner_key(SINK), json.dumps({"query_id": OLD}).encode())
    area.destination.move(older[0].staging_key, older[0].final_key)  # one moved, then crash
    newer = stage(area, 6, OLD)
    FilePublisher(area).publish(SINK, 6, [newer], query_id=OLD, replace_prefix="")
    result = FilePublisher(area).publish(SINK, 5, older, query_id=OLD, replace_prefix="")
    assert result.superseded
    assert published(tmp_path) == [newer.final_key]


def test_files_of_other_writers_are_replaced_by_overwrite(
    area: StagingArea, tmp_path: Path
) -> None:
    (tmp_path / "someone-else.csv").write_text("x\n")
    (tmp_path / f"{SINK}-9999999999-00000-0000.jsonl").write_text("{}\n")  # another prefix
    mine = stage(area, 1, OLD)
    FilePublisher(area).publish(
        SINK, 1, [mine], query_id=OLD, replace_prefix="", name_prefix=f"{SINK}-{OLD[:8]}"
    )
    assert published(tmp_path) == [mine.final_key]


def test_an_empty_marker_left_by_a_crash_is_repaired(area: StagingArea, tmp_path: Path) -> None:
    marker = Path(area.destination.path(area.marker_key(SINK, 3)))
    marker.parent.mkdir(parents=True)
    marker.write_bytes(b"")
    os.utime(marker, (time.time() - 3600, time.time() - 3600))
    staged = stage(area, 3, OLD)
    result = FilePublisher(area).publish(SINK, 3, [staged], query_id=OLD)
    assert (result.files, result.already_committed) == (1, False)
    assert json.loads(marker.read_bytes())["query_id"] == OLD


def test_a_fresh_empty_marker_is_not_taken_over(area: StagingArea) -> None:
    marker = Path(area.destination.path(area.marker_key(SINK, 3)))
    marker.parent.mkdir(parents=True)
    marker.write_bytes(b"")
    with pytest.raises(CommitError, match="being written"):
        FilePublisher(area).publish(SINK, 3, [stage(area, 3, OLD)], query_id=OLD)


def test_a_failed_batch_write_is_rolled_back_whole(area: StagingArea, tmp_path: Path) -> None:
    sink = "write-abc"
    ctx = WriteContext(sink, 0, 0, "a1", False)
    files = [
        area.stage(ctx, f"{sink}-{i}.jsonl", b"{}\n", final_key=f"{sink}-{i}.jsonl", rows=1)
        for i in range(2)
    ]
    failed_attempt = area.stage(
        WriteContext(sink, 0, 1, "a2", False), "x.jsonl", b"{}\n", final_key="x.jsonl", rows=1
    )
    publisher = FilePublisher(area)
    marker = area.marker_key(sink, 0)
    manifest = {"sink_id": sink, "batch_id": 0, "query_id": "", "replace_prefix": None}
    manifest["files"] = [[f.staging_key, f.final_key] for f in files]
    area.destination.create_exclusive(marker, json.dumps(manifest).encode())
    area.destination.move(files[0].staging_key, files[0].final_key)  # the commit died here
    publisher.abort(sink, 0, files, ledgered=False)
    assert published(tmp_path) == []
    assert area.destination.list("_quixsinks") == []
    assert not area.destination.exists(failed_attempt.staging_key)


def test_abandoned_staging_is_swept_once_old_and_unnamed(area: StagingArea) -> None:
    gone = stage(area, 7, "deadbeef-0000")
    kept_young = stage(area, 8, "deadbeef-0000")
    old = time.time() - 48 * 3600
    os.utime(area.destination.path(gone.staging_key), (old, old))
    committed = stage(area, 9, OLD)  # old too, but its marker exists: a replay needs it
    os.utime(area.destination.path(committed.staging_key), (old, old))
    area.destination.create_exclusive(area.marker_key(SINK, 9), b'{"files": []}')
    swept = area.sweep()
    assert swept == [gone.staging_key]
    assert area.destination.exists(kept_young.staging_key)
    assert area.destination.exists(committed.staging_key)


def test_the_marker_ledger_is_pruned_to_the_kept_batches(tmp_path: Path) -> None:
    area = StagingArea(LocalDestination(str(tmp_path)), "_quixsinks", keep_batches=5)
    from quixsinks.core.publish import HOUSEKEEPING_EVERY

    for batch in range(41):
        FilePublisher(area).publish(SINK, batch, [], query_id=OLD)
    markers = [k for k in area.destination.list(area.ledger_prefix(SINK)) if "owner" not in k]
    assert len(markers) <= 5 + HOUSEKEEPING_EVERY  # keep_batches, pruned every 10th commit


# ----------------------------------------------------------------------------- append


@pytest.fixture
def appender(tmp_path: Path) -> AppendPublisher:
    area = StagingArea(LocalDestination(str(tmp_path)), ".out.quixsinks", keep_batches=3)
    return AppendPublisher(area, "out.jsonl", ".out.quixsinks/ledger.jsonl")


def append_stage(appender: AppendPublisher, batch: int, query: str) -> StagedFile:
    ctx = WriteContext(SINK, batch, 0, f"a{batch}{query[:4]}", True, query)
    return appender.staging.stage(
        ctx, "p.jsonl", f'{{"b": {batch}}}\n'.encode(), final_key="out.jsonl", rows=1
    )


def test_append_ledger_is_fenced(appender: AppendPublisher, tmp_path: Path) -> None:
    appender.publish(SINK, 0, [append_stage(appender, 0, OLD)], query_id=OLD)
    with pytest.raises(LedgerFenceError):
        appender.publish(SINK, 0, [append_stage(appender, 0, NEW)], query_id=NEW)
    with pytest.raises(LedgerFenceError):
        appender.fenced_ledger().check(SINK, NEW)
    assert (tmp_path / "out.jsonl").read_text() == '{"b": 0}\n'


def test_append_takeover_appends_the_new_query_after_the_old(tmp_path: Path) -> None:
    area = StagingArea(LocalDestination(str(tmp_path)), ".out.quixsinks")
    appender = AppendPublisher(area, "out.jsonl", ".out.quixsinks/ledger.jsonl")
    appender.publish(SINK, 0, [append_stage(appender, 0, OLD)], query_id=OLD)
    taker = AppendPublisher(area, "out.jsonl", ".out.quixsinks/ledger.jsonl", OLD)
    taker.publish(SINK, 0, [append_stage(taker, 0, NEW)], query_id=NEW)
    assert (tmp_path / "out.jsonl").read_text() == '{"b": 0}\n{"b": 0}\n'


def test_the_first_append_after_a_takeover_is_recorded(tmp_path: Path) -> None:
    """The takeover rewrites the ledger (a new file renamed into place): the batch's own
    begin and done lines must land in that file, or its replay appends it again and the
    old query is not fenced."""
    area = StagingArea(LocalDestination(str(tmp_path)), ".out.quixsinks")
    appender = AppendPublisher(area, "out.jsonl", ".out.quixsinks/ledger.jsonl")
    appender.publish(SINK, 0, [append_stage(appender, 0, OLD)], query_id=OLD)
    taker = AppendPublisher(area, "out.jsonl", ".out.quixsinks/ledger.jsonl", OLD)
    taker.publish(SINK, 0, [append_stage(taker, 0, NEW)], query_id=NEW)
    assert taker.publish(SINK, 0, [append_stage(taker, 0, NEW)], query_id=NEW).already_committed
    assert (tmp_path / "out.jsonl").read_text() == '{"b": 0}\n{"b": 0}\n'
    with pytest.raises(LedgerFenceError):
        appender.publish(SINK, 1, [append_stage(appender, 1, OLD)], query_id=OLD)


def test_an_append_whose_file_never_came_to_be_starts_it(tmp_path: Path) -> None:
    """A crash between the first batch's begin line and the file's creation: the next
    commit starts the file, instead of failing on it for ever."""
    area = StagingArea(LocalDestination(str(tmp_path)), ".out.quixsinks")
    appender = AppendPublisher(area, "out.jsonl", ".out.quixsinks/ledger.jsonl")
    ledger = tmp_path / ".out.quixsinks" / "ledger.jsonl"
    ledger.parent.mkdir(parents=True, exist_ok=True)
    begin = {"sink_id": SINK, "batch_id": 0, "query_id": OLD, "offset": 0, "state": "begin"}
    ledger.write_text(json.dumps(begin) + "\n")
    appender.publish(SINK, 0, [append_stage(appender, 0, OLD)], query_id=OLD)
    assert (tmp_path / "out.jsonl").read_text() == '{"b": 0}\n'


def test_append_ledger_is_compacted(appender: AppendPublisher, tmp_path: Path) -> None:
    for batch in range(30):
        appender.publish(SINK, batch, [append_stage(appender, batch, OLD)], query_id=OLD)
    lines = (tmp_path / ".out.quixsinks" / "ledger.jsonl").read_text().splitlines()
    assert len(lines) <= 2 * (2 * 3) + 2
    assert appender.is_committed(SINK, 29)
    assert (tmp_path / "out.jsonl").read_text().count("\n") == 30
