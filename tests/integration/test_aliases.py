"""Every built-in sink writes through its alias ``qs_<name>``, the name no JVM connector owns.

Where a platform ships a JVM connector under a sink's short name (Databricks: postgresql,
bigquery, kinesis, pubsub, iceberg), the alias is the only way to quixsinks. Each sink gets
a fresh destination from the fault matrix's targets (tests/chaos/targets.py, one per
format), a stream writes the test rows through the alias, and the destination is read back
independently: every row, once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quixsinks.catalogue import SINKS, alias
from tests.chaos.matrix import build
from tests.chaos.targets import Cell, Target
from tests.chaos.workload import stream

from .streams import write_input_files


@pytest.fixture(scope="module")
def targets(
    postgres: Any,
    redis_server: Any,
    influx_server: Any,
    kinesalite: Any,
    s3_server: Any,
    pubsub_emulator: Any,
    azurite: Any,
    gcs_server: Any,
    bqemulator: Any,
    mosquitto: Any,
) -> dict[str, Target]:
    """One matrix target per format: the first row of each sink."""
    rows = build(
        postgres,
        redis_server,
        influx_server,
        kinesalite,
        s3_server,
        pubsub_emulator,
        azurite,
        gcs_server,
        bqemulator,
        mosquitto,
    )
    first: dict[str, Target] = {}
    for target in rows:
        first.setdefault(target.fmt, target)
    return first


def test_every_sink_has_a_target(targets: dict[str, Target]) -> None:
    assert set(targets) == set(SINKS)


@pytest.mark.parametrize("name", sorted(SINKS))
def test_the_alias_writes_every_row_once(
    spark: Any, targets: dict[str, Target], tmp_path: Path, name: str
) -> None:
    target = targets[name]
    cell = Cell(tmp_path)
    cell.out.mkdir()
    ids = write_input_files(tmp_path / "in", files=1, rows_per_file=12)
    config = {
        "format": alias(name),
        "options": target.options(cell),
        "input": str(tmp_path / "in"),
        "checkpoint": str(tmp_path / "ck"),
    }
    query = stream(spark, config)
    try:
        query.awaitTermination(240)
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, str(query.exception())
    assert sorted(target.read_ids(cell)) == ids
