"""A custom sink built on core's fenced Ledger (examples/sqlite_sink.py) is exactly-once too,
proven the way the built-in sinks are: a failed micro-batch and a restart, and a new
checkpoint reusing the sink id."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pyspark import cloudpickle

import quixsinks
from quixsinks.testing import faulty

from .streams import run_available_now, write_input_files

EXAMPLE = Path(__file__).parents[2] / "examples" / "sqlite_sink.py"


@pytest.fixture(scope="module")
def example(spark: Any) -> ModuleType:
    spec = importlib.util.spec_from_file_location("sqlite_sink_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)  # Spark's workers cannot import examples/
    quixsinks.register(spark, module.SQLiteSink, faulty(module.SQLiteSink))
    return module


def ids_in(database: Path) -> list[int]:
    import json

    with sqlite3.connect(database) as conn:
        return sorted(json.loads(v)["id"] for (v,) in conn.execute("SELECT value FROM rows"))


@pytest.mark.parametrize("phase", ["write", "commit-before", "commit-after"])
def test_custom_ledger_sink_is_exactly_once_after_a_failure(
    spark: Any, example: ModuleType, tmp_path: Path, phase: str
) -> None:
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    options = {
        "database": str(tmp_path / "rows.db"),
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_sqlite_example", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_sqlite_example", tmp_path / "ck", options)
    assert ids_in(tmp_path / "rows.db") == ids


def test_custom_ledger_sink_is_fenced(spark: Any, example: ModuleType, tmp_path: Path) -> None:
    ids = write_input_files(tmp_path / "in", files=2, rows_per_file=5)
    options = {"database": str(tmp_path / "rows.db"), "sink_id": "rows"}
    run_available_now(spark, tmp_path / "in", "sqlite_example", tmp_path / "ck-a", options)
    with pytest.raises(Exception, match="belongs to streaming query"):
        run_available_now(spark, tmp_path / "in", "sqlite_example", tmp_path / "ck-b", options)
    assert ids_in(tmp_path / "rows.db") == ids
