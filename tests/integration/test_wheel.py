"""The wheel as users get it: built from the sdist, installed with no extras.

A fresh virtualenv gets only the wheel and its two dependencies (pyspark, pyarrow): no
destination client, no checkout on the path. In it: ``import quixsinks`` works, every
sink whose client is missing names its extra, the auto-discovery modules and
``py.typed`` are shipped, and a Spark session writes with the ``file`` sink by name
without calling ``register``. The ``all`` extra resolves (pip's dry run).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from quixsinks.spark.registry import BUILTIN_SINKS

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str | Path, cwd: Path | None = None, timeout: int = 600) -> str:
    result = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}{result.stderr[-4000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, a virtualenv with it installed and nothing else but its dependencies)."""
    tmp = tmp_path_factory.mktemp("wheel")
    # the sdist first, then the wheel from the sdist: what PyPI users would build
    run(sys.executable, "-m", "build", "--outdir", tmp / "dist", ROOT)
    wheel = next((tmp / "dist").glob("quixsinks-*.whl"))
    run(sys.executable, "-m", "venv", tmp / "venv")
    python = tmp / "venv" / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", wheel)
    return wheel, python


def test_the_wheel_ships_the_package_the_discovery_modules_and_py_typed(
    built: tuple[Path, Path],
) -> None:
    names = set(zipfile.ZipFile(built[0]).namelist())
    for sink in BUILTIN_SINKS.values():
        assert f"{sink}.py" in names
    assert "_quixsinks_spark_lookup.py" in names
    assert "quixsinks/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/", "docs/")) for n in names)


def test_without_extras_the_core_imports_and_each_sink_names_its_extra(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    _, python = built
    script = "import json, quixsinks; print(json.dumps(quixsinks.available_sinks()))"
    status = json.loads(run(python, "-c", script, cwd=tmp_path))
    assert set(status) == set(BUILTIN_SINKS)
    assert status["file"] is None
    assert status["csvfile"] is None
    for name, problem in status.items():
        if problem is not None:
            assert f"pip install 'quixsinks[{name}]'" in problem, problem
    assert status["postgresql"] is not None  # psycopg2 is not in the bare install


def test_a_new_session_writes_with_the_file_sink_by_name(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    _, python = built
    job = textwrap.dedent(
        f"""
        import os, sys
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        spark = (
            SparkSession.builder.master("local[1]")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        spark.range(5).write.format("file").mode("append").save({str(tmp_path / "out")!r})
        print("rows", spark.read.json({str(tmp_path / "out")!r}).count())
        """
    )
    assert run(python, "-c", job, cwd=tmp_path).strip().endswith("rows 5")


def test_every_extra_resolves(built: tuple[Path, Path]) -> None:
    wheel, python = built
    out = run(python, "-m", "pip", "install", "--dry-run", f"{wheel}[all]")
    assert "Would install" in out
