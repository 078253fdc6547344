"""Check, once per interpreter, that Spark's Python workers can import quixsinks.

Spark starts its Python workers with ``spark.pyspark.python``, else ``PYSPARK_PYTHON``,
else ``python3`` from the PATH: not the interpreter the driver runs in. From a virtualenv
without ``PYSPARK_PYTHON`` the workers start the system Python, which cannot import
quixsinks, and the first write fails deep in a task with a Java-wrapped
``ModuleNotFoundError``. :func:`check_workers` (called by ``quixsinks.register``) finds
that out before any data moves and says how to fix it.

It can only look at this machine: with a ``local`` master the workers run here; on a
cluster (or under Spark Connect) the executors' interpreters are out of reach and
nothing is checked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from quixsinks.core.errors import QuixSinksError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["WorkerPythonError", "check_workers", "worker_python"]

#: interpreter path -> the problem found (None: it imports quixsinks)
_checked: dict[str, str | None] = {}


class WorkerPythonError(QuixSinksError):
    """Spark's Python workers would start an interpreter that cannot import quixsinks."""


def worker_python(spark: SparkSession) -> tuple[str, str] | None:
    """The interpreter Spark's local workers start and where that choice comes from.

    None when the workers do not run on this machine (a cluster master) or the session
    cannot be inspected (Spark Connect).
    """
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext on the client
        return None
    if not (context.master or "").startswith("local"):
        return None
    configured = context.getConf().get("spark.pyspark.python")
    if configured:
        return configured, "spark.pyspark.python"
    jvm = getattr(context, "_jvm", None)
    from_env = jvm.System.getenv("PYSPARK_PYTHON") if jvm is not None else None
    from_env = from_env or os.environ.get("PYSPARK_PYTHON")
    if from_env:
        return from_env, "PYSPARK_PYTHON"
    return "python3", "Spark's default: python3 on the PATH"


def _problem(python: str) -> str | None:
    """Why ``python`` cannot import quixsinks, or None if it can."""
    executable = shutil.which(python)
    if executable is None:
        return f"{python!r} is not an executable on the PATH"
    # Not realpath: a virtualenv's python is a symlink to the base interpreter, which
    # does not see the virtualenv's packages.
    if os.path.abspath(executable) == os.path.abspath(sys.executable):
        return None  # this very interpreter: it has imported quixsinks already
    try:
        result = subprocess.run(
            [executable, "-c", "import quixsinks"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{executable} could not be run: {exc}"
    if result.returncode == 0:
        return None
    last = (result.stderr.strip().splitlines() or ["(no error output)"])[-1]
    return f"{executable} cannot import quixsinks: {last}"


def check_workers(spark: SparkSession) -> None:
    """Raise WorkerPythonError if the local workers' interpreter cannot import quixsinks."""
    found = worker_python(spark)
    if found is None:
        return
    python, source = found
    if python not in _checked:
        _checked[python] = _problem(python)
    problem = _checked[python]
    if problem is None:
        return
    raise WorkerPythonError(
        f"Spark's Python workers start {python!r} ({source}), but {problem}. Point the "
        f"workers at this interpreter before the session starts: PYSPARK_PYTHON="
        f"{sys.executable} in the environment, or "
        f'.config("spark.pyspark.python", "{sys.executable}") on the builder; or install '
        "quixsinks (with its extras) into that interpreter. To skip this check: "
        "quixsinks.register(spark, check_workers=False)."
    )
