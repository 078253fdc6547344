"""A driver whose Spark workers would start an interpreter without quixsinks.

From a virtualenv without ``PYSPARK_PYTHON``, Spark's workers start ``python3`` from the
PATH, which cannot import quixsinks; ``register`` says so, and how to fix it, before any
data moves. Each scenario runs in a fresh process (its own JVM) from an empty directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"

JOB = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    import quixsinks
    from quixsinks.spark import WorkerPythonError

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.pyspark.python", sys.argv[1])
        .getOrCreate()
    )
    try:
        quixsinks.register(spark)
    except WorkerPythonError as exc:
        print("ERROR", exc)
    else:
        print("REGISTERED")
    print("UNCHECKED", quixsinks.register(spark, check_workers=False))
    spark.stop()
    """
)


def run(tmp_path: Path, worker_python: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH")}
    result = subprocess.run(
        [sys.executable, "-c", JOB, worker_python],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_workers_on_an_interpreter_without_quixsinks_fail_registration_clearly(
    tmp_path: Path,
) -> None:
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip(f"{SYSTEM_PYTHON} (an interpreter without quixsinks) is not installed")
    out = run(tmp_path, SYSTEM_PYTHON)
    error = next(line for line in out.splitlines() if line.startswith("ERROR"))
    assert f"start '{SYSTEM_PYTHON}' (spark.pyspark.python)" in error
    assert "cannot import quixsinks: ModuleNotFoundError" in error
    assert f"PYSPARK_PYTHON={sys.executable}" in error
    assert "check_workers=False" in error
    # the escape hatch registers without the check
    assert "UNCHECKED ['bigquery', 'csvfile', 'file'" in out


def test_this_interpreter_passes_and_a_virtualenvs_base_interpreter_is_checked() -> None:
    """No Spark needed: the check itself, on the two interpreters a venv user has."""
    from quixsinks.spark.workers import _problem

    assert _problem(sys.executable) is None
    base = os.path.realpath(sys.executable)  # the venv's python is a symlink to it
    if base == os.path.abspath(sys.executable) or sys.prefix == sys.base_prefix:
        pytest.skip("the tests do not run in a virtualenv: no base interpreter to try")
    problem = _problem(base)
    assert problem is not None
    assert "cannot import quixsinks" in problem
    assert (
        _problem("no-such-python-here") == "'no-such-python-here' is not an executable on the PATH"
    )
