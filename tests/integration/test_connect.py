"""Under Spark Connect the sinks work from a thin client: with ``quixsinks.register`` for
batch and streaming writes, and by name alone (the server auto-registers them).

The server is a real Spark Connect server (tests/services/spark_cluster.py) started from
an empty directory with quixsinks installed; each client is a separate process
(connect_client.py), because this test process already runs a classic SparkSession and
PySpark allows only one kind per process.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services.spark_cluster import SparkConnectServer

from .streams import read_jsonl_ids, write_input_files

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

CLIENT = Path(__file__).with_name("connect_client.py")
BLOCKER = Path(__file__).with_name("blocked_imports")


def run_client(server: SparkConnectServer, scenario: str, tmp: Path, block: str = "") -> list[str]:
    """Run one connect_client.py scenario over tmp/in into tmp/out; its stdout lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    if block:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BLOCKER), env.get("PYTHONPATH")]))
        env["QUIXSINKS_BLOCK_IMPORTS"] = block
    (tmp / "out").mkdir()
    result = subprocess.run(
        [sys.executable, str(CLIENT), server.url, scenario, str(tmp / "in"), str(tmp / "out")],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:] + server.log()[-3000:]
    return result.stdout.splitlines()


def csv_ids(path: Path) -> list[int]:
    with open(path, newline="", encoding="utf-8") as f:
        return sorted(json.loads(row["value"])["id"] for row in csv.DictReader(f))


@pytest.fixture(scope="module")
def by_name(spark_connect: SparkConnectServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A client session that never calls register and cannot import quixsinks; it runs
    before any client registers anything (registrations are per session anyway)."""
    tmp = tmp_path_factory.mktemp("by-name")
    write_input_files(tmp / "in", files=2, rows_per_file=20)
    run_client(spark_connect, "by-name", tmp, block="quixsinks,pyspark_quixsinks_file")
    return tmp


@pytest.fixture(scope="module")
def registered(
    by_name: Path, spark_connect: SparkConnectServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[str]]:
    """A client session that calls quixsinks.register, then writes batch and stream."""
    tmp = tmp_path_factory.mktemp("registered")
    write_input_files(tmp / "in", files=3, rows_per_file=20)
    lines = run_client(spark_connect, "register", tmp)
    return tmp, json.loads(lines[-1])


def ids_of(tmp: Path) -> list[int]:
    return sorted(json.loads(line)["id"] for p in (tmp / "in").iterdir() for line in p.open())


def test_a_client_without_quixsinks_batch_writes_by_name(by_name: Path) -> None:
    """No register call, no quixsinks on the client: the server found the sinks itself
    (its pyspark_quixsinks_* modules)."""
    assert sorted(read_jsonl_ids(by_name / "out" / "batch")) == ids_of(by_name)
    assert csv_ids(by_name / "out" / "batch.csv") == ids_of(by_name)


def test_a_client_without_quixsinks_streams_by_name(by_name: Path) -> None:
    assert sorted(read_jsonl_ids(by_name / "out" / "stream")) == ids_of(by_name)


def test_register_over_spark_connect_registers_every_installed_sink(
    registered: tuple[Path, list[str]],
) -> None:
    from quixsinks import available_sinks
    from quixsinks.catalogue import alias

    installed = sorted(name for name, problem in available_sinks().items() if problem is None)
    assert "postgresql" in installed  # the dev install has every extra this suite needs
    # each under its short name and its alias
    assert sorted(registered[1]) == sorted([*installed, *(alias(name) for name in installed)])


def test_batch_writes_after_register_over_spark_connect(
    registered: tuple[Path, list[str]],
) -> None:
    tmp = registered[0]
    assert sorted(read_jsonl_ids(tmp / "out" / "batch")) == ids_of(tmp)
    assert csv_ids(tmp / "out" / "batch.csv") == ids_of(tmp)


def test_streams_after_register_over_spark_connect_exactly_once(
    registered: tuple[Path, list[str]],
) -> None:
    tmp = registered[0]
    assert sorted(read_jsonl_ids(tmp / "out" / "stream")) == ids_of(tmp)
    assert csv_ids(tmp / "out" / "stream.csv") == ids_of(tmp)
