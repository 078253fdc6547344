"""Zero-call registration: in a new Spark session the built-in sinks work by name.

Spark 4 registers the ``DefaultSource`` of every top-level ``pyspark_*`` module it finds
(pyspark/sql/worker/lookup_data_sources.py); quixsinks ships one per built-in sink. The
session under test is a separate process (discovery_job.py) started from an empty
directory, so only the installed package can provide the modules; this test process has
its own session, which already called ``quixsinks.register``.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quixsinks.catalogue import discovery_modules, format_names
from quixsinks.spark.registry import BUILTIN_SINKS

from .streams import read_jsonl_ids, write_input_files

JOB = Path(__file__).with_name("discovery_job.py")
BLOCKER = Path(__file__).with_name("blocked_imports")


def start_job(scenario: str, tmp: Path, block: str = "") -> subprocess.Popen[str]:
    """Start one discovery_job.py scenario from an empty directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    if block:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BLOCKER), env.get("PYTHONPATH")]))
        env["QUIXSINKS_BLOCK_IMPORTS"] = block
    (tmp / "out").mkdir()
    (tmp / "cwd").mkdir()
    return subprocess.Popen(
        [sys.executable, str(JOB), scenario, str(tmp / "in"), str(tmp / "out")],
        cwd=tmp / "cwd",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def job_results(job: subprocess.Popen[str]) -> dict[str, str]:
    """A finished job's results by check (it must exit 0), and what its register call
    logged (its stderr between two markers) as ``register_log``."""
    try:
        stdout, stderr = job.communicate(timeout=240)
    finally:
        job.kill()
    assert job.returncode == 0, stderr[-4000:]
    results: dict[str, str] = json.loads(stdout.strip().splitlines()[-1])
    _, _, after = stderr.partition("--- register ---")
    results["register_log"] = after.partition("--- registered ---")[0]
    return results


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Both scenarios, run side by side (each is mostly a JVM starting)."""
    auto, missing = tmp_path_factory.mktemp("auto"), tmp_path_factory.mktemp("missing")
    auto_ids = write_input_files(auto / "in", files=2, rows_per_file=20)
    missing_ids = write_input_files(missing / "in", files=1, rows_per_file=10)
    started = {
        "auto": start_job("auto", auto),
        # a session where the postgresql and influxdb3 extras are not installed
        "missing": start_job("missing", missing, block="psycopg2,influxdb_client_3"),
    }
    try:
        results = {name: job_results(job) for name, job in started.items()}
    finally:
        for job in started.values():
            job.kill()
    return {
        "auto": {"results": results["auto"], "out": auto / "out", "ids": auto_ids},
        "missing": {"results": results["missing"], "out": missing / "out", "ids": missing_ids},
    }


@pytest.fixture(scope="module")
def auto(jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return jobs["auto"]


@pytest.fixture(scope="module")
def missing_extras(jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return jobs["missing"]


def test_the_installed_package_exposes_one_pyspark_module_per_format_name(
    tmp_path: Path,
) -> None:
    """What Spark's lookup sees (pkgutil.iter_modules) from outside the checkout."""
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pkgutil; print(' '.join(sorted(m.name for m in pkgutil.iter_modules()"
            " if m.name.startswith('pyspark_quixsinks_'))))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert found == sorted(discovery_modules()), (
        "Spark cannot see the pyspark_quixsinks_* modules: a default editable install hides "
        "top-level modules from pkgutil; reinstall with `make install` (editable_mode=compat) "
        "or a regular `pip install`"
    )


def test_a_new_session_batch_writes_file_by_name(auto: dict[str, Any]) -> None:
    assert auto["results"]["batch_file"] == "ok"
    assert sorted(read_jsonl_ids(auto["out"] / "batch")) == auto["ids"]


def test_a_new_session_batch_writes_csvfile_by_name(auto: dict[str, Any]) -> None:
    assert auto["results"]["batch_csvfile"] == "ok"
    with open(auto["out"] / "batch.csv", newline="", encoding="utf-8") as f:
        ids = sorted(json.loads(row["value"])["id"] for row in csv.DictReader(f))
    assert ids == auto["ids"]


def test_a_new_session_streams_into_file_by_name(auto: dict[str, Any]) -> None:
    assert auto["results"]["stream_file"] == "ok"
    assert sorted(read_jsonl_ids(auto["out"] / "stream")) == auto["ids"]


def test_a_new_session_writes_through_the_alias_by_name(auto: dict[str, Any]) -> None:
    assert auto["results"]["batch_qs_file"] == "ok"
    assert sorted(read_jsonl_ids(auto["out"] / "alias")) == auto["ids"]


def test_register_after_auto_registration_is_silent(auto: dict[str, Any]) -> None:
    """Every name answers after register, which re-registers nothing (Spark would log a
    'replaced a statically registered data source' warning per name)."""
    assert auto["results"]["register"] == "ok"
    assert auto["results"]["registered"] == ",".join(sorted(format_names()))
    assert "statically registered" not in auto["results"]["register_log"]
    assert "WARN" not in auto["results"]["register_log"], auto["results"]["register_log"]
    assert auto["results"]["file_after_register"] == "ok"
    assert sorted(read_jsonl_ids(auto["out"] / "after")) == auto["ids"]


def test_a_users_own_data_source_registers_next_to_the_auto_registered_ones(
    auto: dict[str, Any],
) -> None:
    assert auto["results"]["user_register"] == "ok"
    assert auto["results"]["user_write"] == "ok"
    counts = [int(p.read_text()) for p in (auto["out"] / "marker").glob("*.count")]
    assert sum(counts) == len(auto["ids"])


def test_a_missing_extra_does_not_break_the_other_sinks(missing_extras: dict[str, Any]) -> None:
    assert missing_extras["results"]["file"] == "ok"
    assert sorted(read_jsonl_ids(missing_extras["out"] / "batch")) == missing_extras["ids"]


@pytest.mark.parametrize("sink", ["postgresql", "influxdb3"])
def test_a_sink_whose_extra_is_missing_fails_naming_the_extra(
    missing_extras: dict[str, Any], sink: str
) -> None:
    error = missing_extras["results"][sink]
    assert "MissingDependencyError" in error, error
    assert f"pip install 'quixsinks[{sink}]'" in error, error


LOOKUP_LIKE_SPARK = """
import json, pkgutil
from importlib import import_module
from pyspark.sql.datasource import DataSource

found = {}
for info in pkgutil.iter_modules():  # what pyspark/sql/worker/lookup_data_sources.py does
    if info.name.startswith("pyspark_"):
        source = import_module(info.name).DefaultSource
        assert issubclass(source, DataSource), info.name
        found[source.name()] = source
try:
    found["file"]({}).writer(None, False)
    error = ""
except ImportError as exc:
    error = str(exc)
print(json.dumps({"names": sorted(found), "error": error}))
"""


def test_a_broken_quixsinks_install_does_not_hide_other_data_sources(tmp_path: Path) -> None:
    """Spark imports every pyspark_* module in one loop: one that raises makes Spark find
    no Python data source at all. A quixsinks that cannot be imported must still yield its
    names, failing only when used and saying why."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(BLOCKER), os.environ.get("PYTHONPATH")])),
        "QUIXSINKS_BLOCK_IMPORTS": "quixsinks.sinks.influxdb3",
    }
    result = subprocess.run(
        [sys.executable, "-c", LOOKUP_LIKE_SPARK],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(BUILTIN_SINKS) <= set(report["names"])
    assert "the quixsinks sink 'file' cannot be loaded" in report["error"]
    assert "quixsinks.sinks.influxdb3" in report["error"]
