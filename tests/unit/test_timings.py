"""QUIXSINKS_TIMINGS_FILE: one line per Spark call into quixsinks, and nothing without it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from quixsinks.core.sink import Receipt
from quixsinks.spark.datasource import ReceiptMessage
from quixsinks.spark.sources import FileDataSource
from quixsinks.spark.timings import TIMINGS_ENV, timed


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_without_the_variable_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TIMINGS_ENV, raising=False)
    with timed("file", "write"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_failed_call_is_timed_and_its_error_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "timings.jsonl"
    monkeypatch.setenv(TIMINGS_ENV, str(out))
    with pytest.raises(ValueError, match="boom"), timed("redis", "commit"):
        raise ValueError("boom")
    (line,) = lines(out)
    assert line["sink"] == "redis"
    assert line["call"] == "commit"
    assert isinstance(line["wall_ms"], float)
    assert line["wall_ms"] >= 0
    assert set(line) == {"sink", "call", "wall_ms", "cpu_ms", "pid", "at"}


def test_an_unwritable_file_never_fails_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TIMINGS_ENV, str(tmp_path / "missing" / "timings.jsonl"))
    with timed("file", "write"):
        result = 42
    assert result == 42


def test_plan_write_and_commit_each_leave_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calls Spark makes per write, through the data source as Spark calls them; the
    lines carry the sink's name and no option value."""
    out = tmp_path / "timings.jsonl"
    monkeypatch.setenv(TIMINGS_ENV, str(out))
    source = FileDataSource({"path": str(tmp_path / "out-secret-folder")})
    writer = source.writer(StructType([StructField("id", LongType())]), False)
    batch = pa.record_batch([pa.array([1, 2, 3], pa.int64())], names=["id"])
    message = writer.write(iter([batch]))
    writer.commit([message])
    found = lines(out)
    assert [(line["sink"], line["call"]) for line in found] == [
        ("file", "plan"),
        ("file", "write"),
        ("file", "commit"),
    ]
    assert "secret" not in out.read_text()
    assert len(list((tmp_path / "out-secret-folder").rglob("*.jsonl"))) == 1


def test_a_stream_commit_leaves_a_commit_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "timings.jsonl"
    monkeypatch.setenv(TIMINGS_ENV, str(out))
    source = FileDataSource({"path": str(tmp_path / "out"), "sink_id": "orders"})
    writer = source.streamWriter(StructType([StructField("id", LongType())]), False)
    receipt: Receipt[object] = Receipt("orders", 0, 0, "a0", query_id="q-1")
    writer.commit([ReceiptMessage(receipt)], 0)
    assert [line["call"] for line in lines(out)] == ["plan", "commit"]
