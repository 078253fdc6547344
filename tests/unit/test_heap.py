"""Reused Spark workers freeze the imported libraries' objects out of Python's collector
(quixsinks/spark/heap.py), and nothing else does."""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from quixsinks.spark import heap
from quixsinks.spark.sources import FileDataSource

#: the modules the freezing sees: this test's own, so that an import made meanwhile by
#: another thread of the test process (the suite runs Spark) cannot change its count
MODULES: dict[str, types.ModuleType] = {}


@pytest.fixture(autouse=True)
def unfrozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts and ends with nothing frozen and no freeze recorded."""
    gc.unfreeze()
    monkeypatch.setattr(heap, "_frozen_modules", 0)
    MODULES.clear()
    MODULES["sys"] = sys
    monkeypatch.setattr(heap, "sys", types.SimpleNamespace(modules=MODULES))
    yield
    gc.unfreeze()


def import_a_module(name: str) -> None:
    MODULES[name] = types.ModuleType(name)


def test_a_reused_worker_freezes_once_per_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    monkeypatch.delenv(heap.FREEZE_ENV, raising=False)
    # the freeze count moves as other threads free frozen objects: the calls' answers
    assert heap.freeze_new_imports() is True  # the first call: every module so far
    assert gc.get_freeze_count() > 0
    assert heap.freeze_new_imports() is False  # nothing imported since: no collection
    import_a_module("quixsinks_heap_probe")
    assert heap.freeze_new_imports() is True  # a call that imported: frozen again
    assert heap.freeze_new_imports() is False


def test_a_failing_call_freezes_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    monkeypatch.delenv(heap.FREEZE_ENV, raising=False)
    with pytest.raises(ValueError, match="boom"), heap.frozen_imports():
        raise ValueError("boom")
    assert gc.get_freeze_count() > 0


@pytest.mark.parametrize(
    ("reuse", "switch"),
    [(None, None), ("", None), ("1", "false"), ("1", "0"), ("1", " OFF ")],
    ids=["plain-process", "reuse-empty", "off-false", "off-0", "off-spaced"],
)
def test_nothing_is_frozen_outside_reused_workers_or_when_turned_off(
    monkeypatch: pytest.MonkeyPatch, reuse: str | None, switch: str | None
) -> None:
    for name, value in (("SPARK_REUSE_WORKER", reuse), (heap.FREEZE_ENV, switch)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with heap.frozen_imports():
        pass
    assert gc.get_freeze_count() == 0


def test_garbage_is_collected_before_the_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle the call left behind is collected, never frozen for good."""
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")

    class Node:
        pass

    with heap.frozen_imports():
        node = Node()
        node.me = node  # type: ignore[attr-defined]
        del node
    gc.unfreeze()  # what was frozen is tracked again: the cycle must not be among it
    assert not any(type(o) is Node for o in gc.get_objects())


def test_every_call_of_the_data_source_ends_frozen_in_a_reused_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planning, a task and the commit each end with a freeze when they imported."""
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    calls = []
    real = heap.freeze_new_imports

    def counted() -> bool:
        calls.append(real())
        return calls[-1]

    monkeypatch.setattr(heap, "freeze_new_imports", counted)
    source = FileDataSource({"path": str(tmp_path / "out")})
    writer = source.writer(StructType([StructField("id", LongType())]), False)
    batch = pa.record_batch([pa.array([1, 2, 3], pa.int64())], names=["id"])
    message = writer.write(iter([batch]))
    writer.commit([message])
    assert len(calls) == 3  # plan, write, commit
    assert calls[0] is True  # the first one froze the modules imported so far
    assert gc.get_freeze_count() > 0
