"""The shared session's settings end with the test that changed them (conftest.py's
``_spark_settings_restored``; tests such as ``worker_logs`` rely on it). The two tests run in
this order, in one worker (``make test`` hands whole files to its xdist workers)."""

from __future__ import annotations

from typing import Any

ADDED = "spark.sql.execution.arrow.maxRecordsPerBatch"
CHANGED = "spark.sql.session.timeZone"
MARK: dict[str, str | None] = {}


def test_a_test_changes_the_settings(spark: Any) -> None:
    MARK["added"] = spark.conf.getAll.get(ADDED)
    MARK["changed"] = spark.conf.get(CHANGED)
    spark.conf.set(ADDED, "7")
    spark.conf.set(CHANGED, "Pacific/Chatham" if MARK["changed"] != "Pacific/Chatham" else "UTC")


def test_the_next_test_sees_them_as_they_were(spark: Any) -> None:
    assert MARK, "the test before this one did not run"
    assert spark.conf.getAll.get(ADDED) == MARK["added"]
    assert spark.conf.get(CHANGED) == MARK["changed"]
