"""Row-level refusals and commit records of the file-like sinks, without Spark.

Column type records named safely for any field name, the rows a type change or a long
partition value refuses, and commit records kept in FilePublisher markers and
AppendPublisher ledger lines.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

from quixsinks.core.batch import WriteContext
from quixsinks.core.column_types import (
    MAX_HEX_PATH_BYTES,
    ColumnTypes,
    TypeChangeError,
    rows_holding,
)
from quixsinks.core.commits import CommitRecord
from quixsinks.core.destinations import LocalDestination
from quixsinks.core.publish import AppendPublisher, FilePublisher, StagedFile, StagingArea
from quixsinks.sinks.tsdatalake.wire import Layout, unfit_rows

QUERY = "11111111-aaaa-bbbb-cccc-000000000001"


@pytest.fixture
def types(tmp_path: Path) -> ColumnTypes:
    return ColumnTypes(LocalDestination(str(tmp_path)), "_quixsinks/columns")


# ------------------------------------------------------------------------- column types


@pytest.mark.parametrize("length", [MAX_HEX_PATH_BYTES, MAX_HEX_PATH_BYTES + 1, 107, 5000])
def test_a_field_name_of_any_length_keeps_its_type(
    types: ColumnTypes, tmp_path: Path, length: int
) -> None:
    name = "é" * (length // 2) + "x" * (length % 2)
    types.conform(pa.table({name: [1]}), "out")
    with pytest.raises(TypeChangeError, match="is string in this batch"):
        types.conform(pa.table({name: ["x"]}), "out")
    [record] = (tmp_path / "_quixsinks" / "columns").iterdir()
    assert len(record.name.encode()) <= 255 - 37  # room for a local temporary suffix
    hexed = name.encode().hex() + ".type"
    assert (record.name == hexed) == (len(name.encode()) <= MAX_HEX_PATH_BYTES)


def test_a_record_written_by_the_hex_rule_is_still_read(types: ColumnTypes, tmp_path: Path) -> None:
    """Names up to MAX_HEX_PATH_BYTES keep the record name earlier releases wrote."""
    folder = tmp_path / "_quixsinks" / "columns"
    folder.mkdir(parents=True)
    schema = pa.schema([pa.field("t", pa.string())]).serialize().to_pybytes()
    (folder / ("a" * MAX_HEX_PATH_BYTES).encode().hex()).with_suffix(".type").write_bytes(schema)
    with pytest.raises(TypeChangeError, match="earlier Parquet files of out have it as string"):
        types.conform(pa.table({"a" * MAX_HEX_PATH_BYTES: [1]}), "out")


def test_refusals_name_the_rows_holding_a_changed_type(types: ColumnTypes) -> None:
    types.conform(pa.table({"v": [1], "s": [{"b": 1, "c": "x"}], "l": [[1]]}), "out")
    table = pa.table(
        {
            "v": [None, "x", None, "y"],
            "s": [{"b": "no", "c": "x"}, None, {"b": None, "c": "y"}, {"b": None, "c": "z"}],
            "l": [[], None, ["a", None], [None]],
        }
    )
    refused = types.refusals(table, "out")
    assert [row for row, _ in refused] == [0, 1, 2, 3]
    assert {row: e.path for row, e in refused} == {0: "s.b", 1: "v", 2: "l[]", 3: "v"}
    assert types.refusals(table, "out", exclude=("v", "s", "l")) == []


def test_rows_holding_follows_structs_and_lists() -> None:
    column = pa.array([{"a": [1, None]}, {"a": [None]}, None, {"a": None}, {"a": [2]}])
    assert rows_holding(column, "c", "c.a[]").to_pylist() == [0, 4]
    assert rows_holding(column, "c", "c.a").to_pylist() == [0, 1, 4]
    assert rows_holding(column, "c", "c").to_pylist() == [0, 1, 3, 4]


def test_a_type_change_error_survives_pickling() -> None:
    error = pickle.loads(pickle.dumps(TypeChangeError("m", column="a", path="a.b")))
    assert (str(error), error.column, error.path, error.row) == ("m", "a", "a.b", None)


# ---------------------------------------------------------------------- partition values


def test_every_row_with_a_too_long_partition_value_is_named() -> None:
    long = "é" * 200
    table = pa.table({"c": ["ok", long, None, long], "d": ["x", "y", "z", "w" * 300], "v": [1] * 4})
    refused = unfit_rows(table, ("c", "year", "d", "missing"))
    assert [row for row, _ in refused] == [1, 3]
    assert refused[0][1].column == "c"
    kept = table.filter(pa.array([True, False, True, False]))
    assert len(dict(Layout(("c", "d"), None).split(kept))) == 2


# ------------------------------------------------------------------------ commit records


def record(batch_id: int, skipped: int) -> CommitRecord:
    return CommitRecord(
        sink="file", sink_id="orders", batch_id=batch_id, query_id=QUERY, rows=3,
        rows_written=3 - skipped, nbytes=10, partitions=1, dead_lettered=0, skipped=skipped,
        retries=0, write_seconds=0.1, commit_seconds=0.2,
        committed_at=f"2026-01-01T00:00:0{batch_id}.000+00:00",
    )  # fmt: skip


def stage(area: StagingArea, batch: int) -> StagedFile:
    ctx = WriteContext("orders", batch, 0, f"a{batch}", True, QUERY)
    return area.stage(ctx, f"f{batch}.jsonl", b"{}\n", final_key=f"f{batch}.jsonl", rows=1)


def test_file_publisher_keeps_the_record_in_the_marker(tmp_path: Path) -> None:
    area = StagingArea(LocalDestination(str(tmp_path)), "_quixsinks")
    publisher = FilePublisher(area)
    publisher.publish("orders", 0, [stage(area, 0)], query_id=QUERY)  # an older release's
    for batch in (1, 2):
        publisher.publish(
            "orders", batch, [stage(area, batch)], query_id=QUERY, record=record(batch, batch)
        )
    marker = json.loads((tmp_path / area.marker_key("orders", 2)).read_text())
    assert marker["record"]["skipped"] == 2
    assert area.commit_records("orders") == [record(1, 1), record(2, 2)]
    assert area.commit_records() == [record(1, 1), record(2, 2)]
    assert area.commit_records("other") == []


def test_append_publisher_keeps_the_record_in_its_done_line(tmp_path: Path) -> None:
    area = StagingArea(LocalDestination(str(tmp_path)), "_quixsinks")
    appender = AppendPublisher(area, "out.jsonl", "_quixsinks/ledger.jsonl")
    appender.publish("orders", 0, [stage(area, 0)], query_id=QUERY)
    appender.publish("orders", 1, [stage(area, 1)], query_id=QUERY, record=lambda: record(1, 1))
    lines = [json.loads(line) for line in (tmp_path / "_quixsinks" / "ledger.jsonl").open()]
    assert [("record" in e, e["state"]) for e in lines] == [
        (False, "begin"), (False, "done"), (False, "begin"), (True, "done"),
    ]  # fmt: skip
    assert appender.commit_records() == [record(1, 1)]
    assert appender.commit_records("other") == []
