"""The quick cells of the fault matrix (tests/chaos): each sink family under each kind of
fault, every row counted against the guarantee its docs claim. ``make chaos`` runs the
whole matrix and writes docs/reliability.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chaos.faults import FAULTS, run_cell
from tests.chaos.matrix import QUICK, build
from tests.services.bigquery_emulator import BQEmulator
from tests.services.postgres import PostgresServer
from tests.services.redis_server import RedisServer

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)


@pytest.mark.parametrize(("target_name", "fault_name"), sorted(QUICK))
def test_a_quick_cell_keeps_the_claimed_guarantee(
    spark: Any,
    postgres: PostgresServer,
    redis_server: RedisServer,
    influx_server: Any,
    kinesalite: Any,
    s3_server: Any,
    pubsub_emulator: Any,
    azurite: Any,
    gcs_server: Any,
    bqemulator: BQEmulator,
    mosquitto: Any,
    tmp_path: Path,
    target_name: str,
    fault_name: str,
) -> None:
    targets = build(
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
    target = next(t for t in targets if t.name == target_name)
    result = run_cell(spark, target, FAULTS[fault_name], tmp_path / "cell")
    assert result.verdict == "ok", result
    assert result.rows > 0
