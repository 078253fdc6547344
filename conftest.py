"""Shared pytest fixtures: a session-scoped local[2] SparkSession bound to 127.0.0.1."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Every JVM the suite starts (this session's Spark, the Spark jobs tests run as processes, the
# standalone cluster, the Connect server) is short-lived or handles little data: the C1
# compiler alone and the serial collector start one with about a third less CPU. A value
# set by the caller wins.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# session-scoped test servers of the object stores (s3_server, azurite, gcs_server)
pytest_plugins = [
    "tests.services.fixtures_s3",
    "tests.services.fixtures_azure",
    "tests.services.fixtures_gcs",
    "tests.services.fixtures_redis",
    "tests.services.fixtures_bigquery",
    "tests.services.fixtures_kinesis",
    "tests.services.fixtures_pubsub",
    "tests.services.fixtures_mqtt",
    "tests.services.fixtures_iceberg",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-file",
        metavar="PATH",
        default=None,
        help="write the duration of every test phase (setup, call, teardown) to PATH, "
        "slowest first (CI keeps it: .ci/run)",
    )


class DurationsFile:
    """Every test phase's duration, written slowest first to one file at the end."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: list[tuple[float, str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # under pytest-xdist the controller receives every worker's reports here too
        self.rows.append((report.duration, report.when, report.nodeid))

    def pytest_sessionfinish(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as out:
            for seconds, when, nodeid in sorted(self.rows, reverse=True):
                out.write(f"{seconds:8.2f}s {when:<8} {nodeid}\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("durations_file")
    if path and not hasattr(config, "workerinput"):  # not in an xdist worker: its controller
        config.pluginmanager.register(DurationsFile(path), "quixsinks-durations-file")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    import quixsinks
    from quixsinks.spark.session import local_session

    session = local_session("quixsinks-tests")
    quixsinks.register(session)
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _spark_settings_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """What a test changes in the shared session's settings ends with it. A setting left
    on slows or breaks the tests after it in the same worker: docs/errors.md's example
    turned Python worker logging on, and every later test there started new Python
    workers for each task (about 4 s per micro-batch, 10 minutes of CI)."""
    if "spark" not in request.fixturenames:
        yield
        return
    spark: Any = request.getfixturevalue("spark")
    before = dict(spark.conf.getAll)
    yield
    if spark.sparkContext._jsc is None:  # the test stopped the session: nothing to restore
        return
    after = dict(spark.conf.getAll)
    for key in set(before) | set(after):
        # keys Spark reads only at start (a builder's spark.pyspark.python) cannot change
        if before.get(key) == after.get(key) or not spark.conf.isModifiable(key):
            continue
        if key in before:
            spark.conf.set(key, before[key])
        else:
            spark.conf.unset(key)


# `make test-compat` runs the oldest supported pyspark and pyarrow (15). The iceberg extra is not
# installed there: pyiceberg's writer needs pyarrow>=17, which the extra declares.
COMPAT_SKIPPED_SINKS = {
    "iceberg": "compat venv (pyarrow 15): the iceberg extra needs pyarrow>=17; make test covers it"
}


def _compat_skip_reason(item: pytest.Item) -> str | None:
    if os.environ.get("QUIXSINKS_COMPAT") != "1":
        return None
    callspec = getattr(item, "callspec", None)
    params = list(callspec.params.values()) if callspec is not None else []
    for sink, reason in COMPAT_SKIPPED_SINKS.items():
        if any(isinstance(p, str) and p == sink for p in params) or f"test_{sink}_" in item.nodeid:
            return reason
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/integration is marked `integration`; compat skips are named.
    Files marked `long` run first (in their order; the others keep theirs): `make test`
    hands whole files to its xdist workers in this order, so the longest start early and
    no worker is left running one alone at the end."""
    for item in items:
        if "tests/integration/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.integration)
        reason = _compat_skip_reason(item)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
