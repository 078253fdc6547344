"""The release as users get it: the sdist, the wheel built from it, installed beside a Spark.

The sdist carries the tests, docs and changelog and builds the wheel; both pass
``twine check --strict`` (the README is the PyPI page). The wheel's only requirement is
pyarrow: in a fresh virtualenv without pyspark, ``import quixsinks`` works and the Spark
part says how to get pyspark. Then, as on a platform that brings its own Spark, pyspark
4.1.0 is installed first and ``quixsinks[postgresql]`` next to it: pip leaves that pyspark
untouched, and a new Spark session writes through the sinks' ``qs_<name>`` aliases (and
the short names) with no register call, into files and a real PostgreSQL server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from quixsinks.catalogue import discovery_modules, format_names
from quixsinks.spark.registry import BUILTIN_SINKS

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

ROOT = Path(__file__).resolve().parents[2]
#: the pyspark a platform would bring: the oldest one quixsinks supports
PLATFORM_PYSPARK = "4.1.0"


def run(*args: str | Path, cwd: Path | None = None, timeout: int = 900) -> str:
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
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, the wheel built from it, and a virtualenv holding only the wheel."""
    tmp = tmp_path_factory.mktemp("wheel")
    # the sdist first, then the wheel from the sdist: what PyPI users would build
    run(sys.executable, "-m", "build", "--outdir", tmp / "dist", ROOT)
    wheel = next((tmp / "dist").glob("quixsinks-*.whl"))
    sdist = next((tmp / "dist").glob("quixsinks-*.tar.gz"))
    run(sys.executable, "-m", "venv", tmp / "venv")
    python = tmp / "venv" / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", wheel)
    return {"wheel": wheel, "sdist": sdist, "python": python}


def test_the_wheel_ships_the_package_one_discovery_module_per_name_and_py_typed(
    dist: dict[str, Path],
) -> None:
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    for module in discovery_modules():
        assert f"{module}.py" in names
    assert {n for n in names if n.startswith("pyspark_")} == {
        f"{m}.py" for m in discovery_modules()
    }
    assert "quixsinks/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/", "docs/")) for n in names)
    metadata = zipfile.ZipFile(dist["wheel"]).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))
    )
    requires = [
        line for line in metadata.decode().splitlines() if line.startswith("Requires-Dist:")
    ]
    runtime = [line for line in requires if "extra ==" not in line]
    assert runtime == ["Requires-Dist: pyarrow>=15"], requires


def test_the_sdist_carries_tests_docs_and_changelog(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for path in (
        "CHANGELOG.md",
        "README.md",
        "setup.py",
        "quixsinks/catalogue.py",
        "tests/integration/test_wheel.py",
        "docs/index.md",
        "mkdocs.yml",
    ):
        assert path in names, path
    assert not any("__pycache__" in name for name in names)


def test_twine_check_strict_passes(dist: dict[str, Path]) -> None:
    out = run(sys.executable, "-m", "twine", "check", "--strict", dist["wheel"], dist["sdist"])
    assert out.count("PASSED") == 2, out


def test_without_pyspark_the_core_imports_and_spark_says_what_to_install(
    dist: dict[str, Path], tmp_path: Path
) -> None:
    script = textwrap.dedent(
        """
        import importlib.util, json, quixsinks
        assert importlib.util.find_spec("pyspark") is None
        try:
            quixsinks.register(None)
            error = ""
        except quixsinks.MissingDependencyError as exc:
            error = str(exc)
        print(json.dumps({"version": quixsinks.__version__, "error": error}))
        """
    )
    report = json.loads(run(dist["python"], "-c", script, cwd=tmp_path))
    assert report["version"] == dist["wheel"].name.split("-")[1]
    assert "pip install 'quixsinks[spark]'" in report["error"], report
    version = run(dist["python"], "-m", "quixsinks", "--version", cwd=tmp_path)
    assert version.strip() == f"quixsinks {report['version']}"


@pytest.fixture(scope="module")
def beside_pyspark(dist: dict[str, Path]) -> dict[str, Any]:
    """pyspark 4.1.0 installed first, as a platform would have it, then quixsinks[postgresql]."""
    python = dist["python"]
    run(python, "-m", "pip", "install", "--quiet", f"pyspark=={PLATFORM_PYSPARK}")
    before = run(python, "-m", "pip", "freeze")
    out = run(python, "-m", "pip", "install", f"{dist['wheel']}[postgresql]")
    after = run(python, "-m", "pip", "freeze")
    return {"python": python, "install_log": out, "before": before, "after": after}


def test_installing_a_sink_extra_leaves_the_platforms_pyspark_untouched(
    beside_pyspark: dict[str, Any],
) -> None:
    pyspark = [line for line in beside_pyspark["after"].splitlines() if line.startswith("pyspark")]
    assert pyspark == [f"pyspark=={PLATFORM_PYSPARK}"]
    assert "Uninstalling pyspark" not in beside_pyspark["install_log"]
    assert "psycopg2" in beside_pyspark["after"]
    run(beside_pyspark["python"], "-m", "pip", "check")


def test_a_new_session_writes_through_the_aliases_by_name(
    beside_pyspark: dict[str, Any], pg: dict[str, Any], tmp_path: Path
) -> None:
    options = json.dumps(pg["options"])
    job = textwrap.dedent(
        f"""
        import json, os, sys
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        spark = (
            SparkSession.builder.master("local[1]")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        import pyspark
        df = spark.range(5).selectExpr("id", "concat('row-', id) AS name")
        out = {str(tmp_path)!r}
        df.write.format("qs_file").mode("append").save(out + "/alias")
        df.write.format("file").mode("append").save(out + "/short")
        df.write.format("qs_csvfile").mode("append").save(out + "/rows.csv")
        (df.write.format("qs_postgresql").options(**json.loads({options!r}))
            .option("table_name", "via_alias").mode("append").save())
        print(json.dumps({{
            "pyspark": pyspark.__version__,
            "alias": spark.read.json(out + "/alias").count(),
            "short": spark.read.json(out + "/short").count(),
            "csv": spark.read.option("header", True).csv(out + "/rows.csv").count(),
        }}))
        """
    )
    report = json.loads(run(beside_pyspark["python"], "-c", job, cwd=tmp_path).splitlines()[-1])
    assert report == {"pyspark": PLATFORM_PYSPARK, "alias": 5, "short": 5, "csv": 5}
    conn = pg["server"].connect(pg["dbname"])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM via_alias")
            assert cur.fetchone() == (5,)
    finally:
        conn.close()


def test_every_extra_resolves(dist: dict[str, Path]) -> None:
    out = run(dist["python"], "-m", "pip", "install", "--dry-run", f"{dist['wheel']}[all,spark]")
    assert "Would install" in out


def test_the_catalogue_names_every_sink_twice() -> None:
    assert set(BUILTIN_SINKS) == {n for n in format_names() if not n.startswith("qs_")}
    assert set(format_names()) == set(BUILTIN_SINKS) | {f"qs_{n}" for n in BUILTIN_SINKS}
