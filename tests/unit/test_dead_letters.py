"""on_error and dead letters in core, without Spark: the refusal rules, the isolation of bad
rows, the dead-letter objects, and the publish that happens exactly once per batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.commits import CommitRecord, records_table
from quixsinks.core.deadletters import Refusals, row_object, write_isolating
from quixsinks.core.errors import CommitError, OptionError, RecordError
from quixsinks.core.records import RecordSchema
from quixsinks.core.sink import CommitContext, Receipt, Task
from quixsinks.sinks.file import FileOptions, FileSink
from quixsinks.spark.datasource import ReceiptMessage, SinkArrowWriter

KAFKA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)


def kafka_table(values: list[bytes | None]) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "key": [f"k{i}".encode() for i in range(n)],
            "value": values,
            "topic": ["orders"] * n,
            "partition": pa.array([3] * n, pa.int32()),
            "offset": pa.array(range(100, 100 + n), pa.int64()),
            "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
        },
        schema=KAFKA,
    )


def batch_of(table: pa.Table, on_error: str = "fail") -> SinkBatch:
    records = RecordSchema.resolve(table.schema)
    context = WriteContext("s", 4, 2, "a-1")
    task = Task(context, refusals=Refusals("file", on_error))  # type: ignore[arg-type]
    return SinkBatch(table, records, context, task.counters, task=task)


# ------------------------------------------------------------------------------ options


def test_dead_letter_without_a_path_is_refused() -> None:
    with pytest.raises(OptionError, match="dead_letter_path") as info:
        FileOptions.from_options({"path": "/tmp/x", "on_error": "dead_letter"})
    assert info.value.option == "dead_letter_path"


def test_a_dead_letter_path_without_dead_letter_is_refused() -> None:
    with pytest.raises(OptionError, match="only with on_error=dead_letter"):
        FileOptions.from_options({"path": "/tmp/x", "deadLetterPath": "/tmp/dl"})


def test_an_unknown_on_error_is_refused_listing_the_three() -> None:
    with pytest.raises(OptionError, match="dead_letter"):
        FileOptions.from_options({"path": "/tmp/x", "on_error": "ignore"})


# ------------------------------------------------------------------------------ refusals


def test_fail_names_the_kafka_coordinates_of_the_row() -> None:
    batch = batch_of(kafka_table([b"{}", b"{}", b"nope"]))
    with pytest.raises(RecordError, match="topic 'orders' partition 3 offset 102") as info:
        batch.refuse(2, ValueError("not JSON"))
    assert "on_error=skip" in str(info.value)
    assert info.value.row == 2


def test_fail_names_the_key_without_kafka_columns() -> None:
    table = pa.table({"key": ["sensor-9"], "v": [1]})
    batch = batch_of(table)
    with pytest.raises(RecordError, match="key 'sensor-9'"):
        batch.refuse(0, ValueError("too big"))


def test_skip_counts_the_row_and_keeps_no_dead_letter() -> None:
    batch = batch_of(kafka_table([b"x"]), "skip")
    batch.refuse(0, ValueError("bad"))
    assert batch.counters == {"skipped": 1}


def test_a_dead_letter_carries_sink_batch_error_and_row(tmp_path: Path) -> None:
    from quixsinks.core.destinations import LocalDestination
    from quixsinks.core.publish import StagingArea

    batch = batch_of(kafka_table([b"\xff\xfe", b"plain"]), "dead_letter")
    assert batch.task is not None
    batch.refuse(0, RecordError("not UTF-8"))
    batch.refuse(1, RecordError("not JSON"))
    staging = StagingArea(LocalDestination(str(tmp_path)))
    [staged] = batch.task.refusals.stage(staging, batch.context)
    lines = (tmp_path / staged.staging_key).read_text().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert (first["sink"], first["sink_id"], first["batch_id"]) == ("file", "s", 4)
    assert first["error"] == {"type": "RecordError", "message": "not UTF-8"}
    assert first["row"]["value"] == {"base64": "//4="}
    assert first["row"]["offset"] == 100
    assert first["row"]["timestamp"] == "1970-01-01T00:00:00+00:00"
    assert second["row"]["value"] == "plain"
    assert staged.final_key == "s-0000000004-00002.jsonl"
    assert batch.counters == {"dead_lettered": 2}


def test_a_dead_letters_error_message_keeps_no_secret(tmp_path: Path) -> None:
    from quixsinks.core.destinations import LocalDestination
    from quixsinks.core.publish import StagingArea

    table = pa.table({"v": [1]})
    context = WriteContext("s", 0)
    task = Task(context, refusals=Refusals("pg", "dead_letter", secrets=["hunter2"]))
    batch = SinkBatch(table, RecordSchema.resolve(table.schema), context, task.counters, task=task)
    batch.refuse(0, RecordError("refused by postgresql://app:hunter2@db/app"))
    [staged] = task.refusals.stage(StagingArea(LocalDestination(str(tmp_path))), context)
    text = (tmp_path / staged.staging_key).read_text()
    assert "hunter2" not in text
    assert "refused by" in text


def test_row_objects_keep_every_type_readable() -> None:
    table = pa.table(
        {
            "f": [float("nan")],
            "d": pa.array([__import__("decimal").Decimal("1.50")], pa.decimal128(5, 2)),
            "m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64())),
            "s": pa.array([{"x": b"y"}], pa.struct([("x", pa.binary())])),
        }
    )
    assert row_object(table, 0) == {"f": "nan", "d": "1.50", "m": [["a", 1]], "s": {"x": "y"}}


# ------------------------------------------------------------------------------ isolation


def test_isolation_finds_the_bad_rows_at_logarithmic_cost() -> None:
    table = pa.table({"v": list(range(1024))})
    batch = batch_of(table, "skip")
    bad = {17, 900}
    calls = []

    def write(piece: SinkBatch) -> list[int]:
        calls.append(piece.num_rows)
        values = piece.table.column("v").to_pylist()
        if bad & set(values):
            raise RecordError("refused")
        return values

    assert batch.task is not None
    written = write_isolating(batch, write, batch.task.refusals)
    assert batch.counters == {"skipped": 2}
    assert [v for piece in written for v in piece] == [v for v in range(1024) if v not in bad]
    assert len(calls) <= 1 + 2 * 2 * 10  # two bad rows, depth log2(1024)


def test_rows_refused_by_a_write_that_then_fails_are_refused_once(tmp_path: Path) -> None:
    """A write refuses row 1 itself, then fails as a whole for row 6: its halves are written
    again and refuse row 1 again; the first refusal must not count twice."""
    from quixsinks.core.destinations import LocalDestination
    from quixsinks.core.publish import StagingArea

    batch = batch_of(pa.table({"v": list(range(8))}), "dead_letter")
    assert batch.task is not None

    def write(piece: SinkBatch) -> None:
        values = piece.table.column("v").to_pylist()
        for i, value in enumerate(values):
            if value == 1:
                piece.refuse(i, ValueError("one"))
        if 6 in values:
            raise RecordError("six")

    write_isolating(batch, write, batch.task.refusals)
    assert batch.counters == {"dead_lettered": 2}
    staging = StagingArea(LocalDestination(str(tmp_path)))
    [staged] = batch.task.refusals.stage(staging, batch.context)
    lines = (tmp_path / staged.staging_key).read_text().splitlines()
    assert sorted(json.loads(line)["row"]["v"] for line in lines) == [1, 6]


def test_refusals_all_rolled_back_stage_no_dead_letter_file(tmp_path: Path) -> None:
    """A write refused a row, then failed and was retried whole without refusing it: no
    empty dead-letter file is staged (and published)."""
    from quixsinks.core.destinations import LocalDestination
    from quixsinks.core.publish import StagingArea

    batch = batch_of(pa.table({"v": [1, 2]}), "dead_letter")
    assert batch.task is not None
    refusals = batch.task.refusals
    mark = refusals.mark()
    batch.refuse(0, ValueError("one"))
    refusals.rollback(mark)
    staging = StagingArea(LocalDestination(str(tmp_path)))
    assert refusals.stage(staging, batch.context) == []
    assert not list(tmp_path.rglob("*.jsonl"))


def test_isolated_pieces_type_their_json_values_from_their_own_rows() -> None:
    """Parsed as one batch, `v` is a float (one row holds 2.5); a half without that row must
    see integers again, or every good row would be refused with the bad one."""
    batch = batch_of(kafka_table([b'{"v": 1}', b'{"v": 2.5}', b'{"v": 3}', b'{"v": 4}']), "skip")
    assert batch.values().schema.field("v").type == pa.float64()

    def write(piece: SinkBatch) -> None:
        if not pa.types.is_integer(piece.values().schema.field("v").type):
            raise RecordError("v must be an integer")

    assert batch.task is not None
    write_isolating(batch, write, batch.task.refusals)
    assert batch.counters == {"skipped": 1}


def test_isolation_leaves_other_errors_alone() -> None:
    batch = batch_of(pa.table({"v": [1, 2]}), "skip")

    def write(piece: SinkBatch) -> None:
        raise ConnectionError("server down")

    assert batch.task is not None
    with pytest.raises(ConnectionError):
        write_isolating(batch, write, batch.task.refusals)


# ------------------------------------------------------------------------------ the glue


def writer(out: Path, dead: Path, **options: str) -> SinkArrowWriter:
    sink = FileSink(
        FileOptions.from_options(
            {
                "path": str(out),
                "format": "json",
                "on_error": "dead_letter",
                "dead_letter_path": str(dead),
                **options,
            }
        )
    )
    sink.prepare(KAFKA)
    sink.preflight()
    return SinkArrowWriter(sink)


def published_lines(folder: Path, pattern: str) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in sorted(folder.glob(pattern))
        for line in path.read_text().splitlines()
    ]


def test_a_batch_write_dead_letters_bad_rows_and_writes_the_good_ones(tmp_path: Path) -> None:
    out, dead = tmp_path / "out", tmp_path / "dead"
    w = writer(out, dead)
    values: list[bytes | None] = [b'{"a": 1}', b"{broken", b'{"a": 3}', b"[1, 2]"]
    message = w.write(iter(kafka_table(values).to_batches()))
    assert message.receipt.counters["dead_lettered"] == 2
    w.commit([message])
    rows = published_lines(out, "*.jsonl")
    assert [r["_value"]["a"] for r in rows] == [1, 3]
    assert len(list(out.glob("*.jsonl"))) == 1  # the unparseable rows were taken out first
    letters = published_lines(dead, "*.jsonl")
    assert [letter["row"]["offset"] for letter in letters] == [101, 103]
    assert all(letter["sink"] == "file" for letter in letters)
    assert not list((dead / "_quixsinks" / "staging").rglob("*.jsonl"))


def test_a_retried_keyed_write_publishes_its_dead_letters_once(tmp_path: Path) -> None:
    """Two task attempts of the same keyed batch write (a retry after a lost commit): the
    second commit finds the batch's marker and publishes nothing again."""
    out, dead = tmp_path / "out", tmp_path / "dead"
    values: list[bytes | None] = [b'{"a": 1}', b"{broken"]
    first = writer(out, dead, sink_id="orders", batch_id="5")
    first.commit([first.write(iter(kafka_table(values).to_batches()))])
    again = writer(out, dead, sink_id="orders", batch_id="5")
    again.commit([again.write(iter(kafka_table(values).to_batches()))])
    assert len(published_lines(dead, "*.jsonl")) == 1
    assert len(published_lines(out, "*.jsonl")) == 1


class StateDependentRefusal(FileSink):
    """Refuses the row at ``refused`` (an offset), as a destination whose state decides
    (a key whose type changed); its commit fails while ``commit_fails``."""

    refused = -1
    commit_fails = False

    def write(self, batch: SinkBatch) -> Any:
        offsets = batch.table.column("offset").to_pylist()
        bad = [i for i, offset in enumerate(offsets) if offset == self.refused]
        for row in bad:
            batch.refuse(row, RecordError("refused for the destination's state"))
        return super().write(batch.without(bad))

    def commit(self, context: CommitContext, receipts: list[Receipt[Any]]) -> None:
        if self.commit_fails:
            raise CommitError("the destination went away")
        super().commit(context, receipts)


def test_a_replay_that_refuses_other_rows_loses_none(tmp_path: Path) -> None:
    """The first commit publishes its dead letters (row 101), then fails; the replay
    refuses row 102 instead and commits its data: 102 is published as a supplement, once
    (a second replay refusing the same rows adds nothing)."""
    out, dead = tmp_path / "out", tmp_path / "dead"
    options = {
        "path": str(out),
        "format": "json",
        "on_error": "dead_letter",
        "dead_letter_path": str(dead),
        "sink_id": "orders",
        "batch_id": "7",
    }
    values: list[bytes | None] = [b'{"a": 0}', b'{"a": 1}', b'{"a": 2}']  # offsets 100-102

    def attempt(refused: int, commit_fails: bool) -> None:
        sink = StateDependentRefusal(FileOptions.from_options(options))
        sink.refused, sink.commit_fails = refused, commit_fails
        sink.prepare(KAFKA)
        sink.preflight()
        w = SinkArrowWriter(sink)
        message = w.write(iter(kafka_table(values).to_batches()))
        try:
            w.commit([message])
        except CommitError:
            w.abort([message])

    attempt(101, commit_fails=True)
    attempt(102, commit_fails=False)
    attempt(102, commit_fails=False)  # run again: the ledger holds it, nothing more
    letters = published_lines(dead, "*.jsonl")
    assert sorted(letter["row"]["offset"] for letter in letters) == [101, 102]
    assert sorted(r["_value"]["a"] for r in published_lines(out, "*.jsonl")) == [0, 1]


def test_an_aborted_batch_leaves_no_dead_letters(tmp_path: Path) -> None:
    out, dead = tmp_path / "out", tmp_path / "dead"
    w = writer(out, dead)
    message = w.write(iter(kafka_table([b"{broken"]).to_batches()))
    w.abort([message])
    assert not [p for p in dead.rglob("*.jsonl")]


def test_a_batch_write_whose_commit_fails_after_its_dead_letters_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dead letters are published before the sink's commit; the commit fails and Spark
    aborts: the write's dead letters go with it, so running the job again (a new write)
    publishes each once."""
    out, dead = tmp_path / "out", tmp_path / "dead"
    values: list[bytes | None] = [b'{"a": 1}', b"{broken"]
    w = writer(out, dead)
    message = w.write(iter(kafka_table(values).to_batches()))

    def outage(*args: object) -> None:
        raise CommitError("the destination went away")

    monkeypatch.setattr(w.sink, "commit", outage)
    with pytest.raises(CommitError):
        w.commit([message])
    assert published_lines(dead, "*.jsonl")  # published before the sink's commit failed
    w.abort([message])
    assert published_lines(dead, "*.jsonl") == []
    again = writer(out, dead)
    again.commit([again.write(iter(kafka_table(values).to_batches()))])
    assert [letter["row"]["offset"] for letter in published_lines(dead, "*.jsonl")] == [101]


def test_the_commit_logs_one_json_record(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out, dead = tmp_path / "out", tmp_path / "dead"
    w = writer(out, dead)
    message = w.write(iter(kafka_table([b'{"a": 1}', b"{broken"]).to_batches()))
    with caplog.at_level("INFO", logger="quixsinks.commits"):
        w.commit([message])
    [line] = [r.getMessage() for r in caplog.records if r.name == "quixsinks.commits"]
    record = CommitRecord.from_json(line)
    assert (record.sink, record.rows, record.rows_written, record.dead_lettered) == (
        "file",
        2,
        1,
        1,
    )


def test_records_table_has_one_row_per_record() -> None:
    receipt: Receipt[object] = Receipt("s", 1, 0, "a", rows=5, counters={"skipped": 2})
    context = CommitContext("s", 1, True, "q", "file")
    table = records_table([context.commit_record([receipt])])
    assert table.num_rows == 1
    assert table.column("rows_written").to_pylist() == [3]
    assert table.column("counters").to_pylist() == [[("skipped", 2)]]


def test_rows_a_sink_skips_by_its_own_rule_are_not_counted_as_written() -> None:
    counters = {"skipped": 1, "skipped_null_keys": 2, "dead_lettered": 1, "files": 3}
    receipt: Receipt[object] = Receipt("s", 1, 0, "a", rows=10, counters=counters)
    record = CommitContext("s", 1, True, "q", "redis").commit_record([receipt])
    assert (record.rows_written, record.skipped, record.dead_lettered) == (6, 3, 1)
    assert record.counters == dict(sorted(counters.items()))


def test_receipts_carry_dead_letters_through_pickle(tmp_path: Path) -> None:
    import pickle

    from quixsinks.core.publish import StagedFile

    receipt: Receipt[object] = Receipt("s", 1, 0, "a")
    receipt.dead_letters.append(StagedFile("k", "f", 1, 2))
    again = pickle.loads(pickle.dumps(ReceiptMessage(receipt)))
    assert again.receipt.dead_letters == [StagedFile("k", "f", 1, 2)]


def test_a_batch_without_refused_rows_keeps_its_task_and_parsed_values() -> None:
    batch = batch_of(kafka_table([b'{"v": 1}', b'{"v": 2}', b'{"v": 3}']), "skip")
    assert batch.values().num_rows == 3
    rest = batch.without([1])
    assert rest.table.column("offset").to_pylist() == [100, 102]
    assert rest.values().column("v").to_pylist() == [1, 3]
    assert rest.task is batch.task
    rest.count("x")
    assert batch.counters == {"x": 1}


def test_a_supplements_sink_id_stays_a_valid_sink_id() -> None:
    from quixsinks.core.deadletters import _supplement_id
    from quixsinks.core.ledger import check_sink_id

    assert _supplement_id("orders", 1) == "orders.r1"
    long_ids = {_supplement_id("a" * 200, 100), _supplement_id("a" * 199 + "b", 100)}
    assert len(long_ids) == 2
    assert all(check_sink_id(s) for s in long_ids)
