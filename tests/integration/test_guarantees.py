"""Exactly-once across failures: fail a micro-batch, restart from the checkpoint, count rows.

Every case streams the same 4 input files (one micro-batch each) into a sink, makes
micro-batch 1 fail once at a chosen point (through the test-only ``faulty_*`` twin of
the sink), restarts the query from its checkpoint, and checks every id arrived
exactly once and nothing is left in staging.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.sinks.csvfile import CSVFileSink
from quixsinks.sinks.file import FileSink
from quixsinks.testing import faulty

from .streams import read_jsonl_ids, run_available_now, write_input_files

PHASES = ["write", "commit-before", "commit-after"]


@pytest.fixture(scope="module")
def faulty_sinks(spark: Any) -> None:
    for sink in (FileSink, CSVFileSink):
        quixsinks.register(spark, faulty(sink))


def run_with_one_failure(
    spark: Any, tmp_path: Path, fmt: str, options: dict[str, str], phase: str
) -> list[int]:
    ids = write_input_files(tmp_path / "in", files=4, rows_per_file=25)
    marker = tmp_path / "fault-fired"
    options = {**options, "fail_batch": "1", "fail_phase": phase, "fail_marker": str(marker)}
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", fmt, tmp_path / "ckpt", options)
    assert marker.exists()
    run_available_now(spark, tmp_path / "in", fmt, tmp_path / "ckpt", options)
    return ids


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("file_format", ["json", "parquet"])
def test_file_sink_exactly_once_after_failure(
    spark: Any, faulty_sinks: None, tmp_path: Path, phase: str, file_format: str
) -> None:
    out = tmp_path / "out"
    ids = run_with_one_failure(
        spark, tmp_path, "faulty_file", {"path": str(out), "format": file_format}, phase
    )
    if file_format == "json":
        written = read_jsonl_ids(out)
    else:
        import pyarrow.parquet as pq

        files = sorted(p for p in out.iterdir() if p.suffix == ".parquet")
        written = [i for p in files for i in pq.read_table(p).column("id").to_pylist()]
    assert sorted(written) == ids
    assert not (out / "_quixsinks" / "staging").exists() or not any(
        (out / "_quixsinks" / "staging").rglob("*.*")
    )


@pytest.mark.parametrize("phase", PHASES)
def test_file_sink_append_mode_exactly_once_after_failure(
    spark: Any, faulty_sinks: None, tmp_path: Path, phase: str
) -> None:
    out = tmp_path / "out"
    ids = run_with_one_failure(
        spark, tmp_path, "faulty_file", {"path": str(out), "append": "true"}, phase
    )
    assert sorted(read_jsonl_ids(out)) == ids
    assert len([p for p in out.iterdir() if p.suffix == ".jsonl"]) == 1


@pytest.mark.parametrize("phase", PHASES)
def test_csvfile_exactly_once_after_failure(
    spark: Any, faulty_sinks: None, tmp_path: Path, phase: str
) -> None:
    target = tmp_path / "out.csv"
    ids = run_with_one_failure(spark, tmp_path, "faulty_csvfile", {"path": str(target)}, phase)
    import json

    with open(target, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert sorted(json.loads(r["value"])["id"] for r in rows) == ids
    with open(target, encoding="utf-8") as f:
        assert f.read().count("key,value,timestamp") == 1
    staging = tmp_path / ".out.csv.quixsinks" / "staging"
    assert not staging.exists() or not any(p.is_file() for p in staging.rglob("*"))
