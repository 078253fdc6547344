"""The docs' option tables are generated from the code and must be current."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_option_tables_match_the_code() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"run `make docs`: {result.stdout}{result.stderr}"


def test_every_builtin_sink_has_a_docs_page() -> None:
    from quixsinks.spark.registry import BUILTIN_SINKS

    for name in BUILTIN_SINKS:
        page = ROOT / "docs" / "sinks" / f"{name}.md"
        assert page.exists(), f"docs/sinks/{name}.md is missing"
        assert f"<!-- options:{name} -->" in page.read_text()


def test_every_sink_is_listed_with_its_alias_on_its_page_and_in_the_index() -> None:
    from quixsinks.catalogue import SINKS, alias

    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for name in SINKS:
        page = (ROOT / "docs" / "sinks" / f"{name}.md").read_text(encoding="utf-8")
        assert f"`{alias(name)}`" in page.split("\n## ")[0], f"{name}.md: no alias up top"
        assert f"| [`{name}`](sinks/{name}.md) | `{alias(name)}` |" in index, name


def test_the_type_fidelity_matrix_is_in_the_docs_and_linked() -> None:
    page = (ROOT / "docs" / "type-fidelity.md").read_text()
    assert "<!-- fidelity-matrix -->\n| Spark type |" in page
    assert "(type-fidelity.md)" in (ROOT / "docs" / "index.md").read_text()


def test_every_matrix_row_has_a_cell_for_every_sink() -> None:
    from tests.fidelity_matrix import CASES, SINKS

    for case in CASES:
        assert set(case.cells) == set(SINKS), case.label


def test_every_relative_link_and_image_in_the_docs_resolves() -> None:
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#", 1)[0]
            if not path or re.match(r"[a-z]+:", path):  # an anchor or a URL
                continue
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"links to missing files: {broken}"


def test_the_benchmark_plot_draws_every_result(tmp_path: Path) -> None:
    import json

    sys.path.insert(0, str(ROOT / "benchmarks" / "harness"))
    try:
        import plot  # the harness's plot module, standalone (matplotlib and the results)
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "harness"))

    case = {"name": "noop-arrow", "rows_per_s": 1000.0}
    document = {
        "benchmark": "demo",
        "floor": "noop-arrow",
        "machine": {"rows": 10, "date": "2026-11-23"},
        "cases": {
            "noop-arrow": case,
            "sink-x": {**case, "name": "sink-x", "rows_per_s": 500.0},
            "quix-x": {**case, "name": "quix-x", "rows_per_s": 50.0},
        },
    }
    (tmp_path / "demo.json").write_text(json.dumps(document))
    (tmp_path / "other.json").write_text("[1, 2]")  # not a result: ignored
    measured = {  # a measure page's cases, named by their keys (bench_json_values.py)
        "benchmark": "measured",
        "floor": "rebuilt",
        "cases": {"rebuilt": {"rows_per_s": 10.0}, "passthrough": {"rows_per_s": 12.0}},
    }
    (tmp_path / "measured.json").write_text(json.dumps(measured))
    written = plot.plot_all(tmp_path, tmp_path / "img")
    assert written == [tmp_path / "img" / "demo.png", tmp_path / "img" / "measured.png"]
    assert written[0].read_bytes().startswith(b"\x89PNG")
    assert [plot.kind(n, "noop-arrow") for n in document["cases"]] == ["floor", "ours", "peer"]


def test_the_docs_site_builds_strictly_with_every_sink_page_in_its_nav(tmp_path: Path) -> None:
    from quixsinks.spark.registry import BUILTIN_SINKS

    config = (ROOT / "mkdocs.yml").read_text()
    for name in BUILTIN_SINKS:
        assert f"sinks/{name}.md" in config, f"mkdocs.yml nav lacks docs/sinks/{name}.md"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    api = (tmp_path / "api" / "index.html").read_text()
    import re

    roles = re.findall(r".{40}:(?:func|class|meth|attr|mod|exc|data|obj):.{40}", api)
    assert not roles, f"raw Sphinx roles on the API page (docs/hooks.py): {roles}"


def test_every_docs_page_is_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")]
    missing = [page for page in pages if f": {page}\n" not in config]
    assert not missing, f"docs pages missing from the mkdocs.yml nav: {missing}"


def test_every_options_table_lists_required_options_first() -> None:
    import re

    for page in sorted((ROOT / "docs").rglob("*.md")):
        tables = re.findall(
            r"<!-- options:[\w-]+ -->\n(.*?)<!-- /options -->", page.read_text(), re.S
        )
        for block in tables:
            defaults = [row.split(" | ")[2] for row in block.splitlines()[2:]]
            required = [d == "`required`" for d in defaults]
            assert required == sorted(required, reverse=True), f"{page.name}: {defaults}"


def markdown_table(page: str, header: str) -> list[list[str]]:
    """The rows (cells stripped of backticks) of the table whose header starts ``header``."""
    lines = (ROOT / "docs" / page).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows


def test_the_compatibility_page_matches_the_pins() -> None:
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs: dict[str, str] = {}
    for requirement in project["dependencies"] + [
        r for extra in project["optional-dependencies"].values() for r in extra
    ]:
        match = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*([<>=!~][^;#]*)", requirement)
        if match:
            specs.setdefault(match.group(1).lower(), match.group(2).strip())

    core = {row[0]: row for row in markdown_table("compatibility.md", "| component |")}
    makefile = (ROOT / "Makefile").read_text()
    for package in ("pyspark", "pyarrow"):
        assert core[package][1] == specs[package], (package, core[package], specs[package])
        pin = re.search(rf"{package}==([\d.]+)", makefile)
        assert pin, f"no {package}== pin in the Makefile"
        assert core[package][2].startswith(pin.group(1)), (package, core[package])

    for extra, package, supported, _newest in markdown_table("compatibility.md", "| extra |"):
        assert supported == specs[package.lower()], (package, supported, specs[package.lower()])
        assert any(r.startswith(package) for r in project["optional-dependencies"][extra]), (
            f"{package} is not in the {extra} extra"
        )

    # every client library of every destination extra has its row
    listed = {(row[0], row[1]) for row in markdown_table("compatibility.md", "| extra |")}
    meta = {"all", "dev", "dev-compat", "spark"}
    for extra, requirements in project["optional-dependencies"].items():
        for requirement in requirements:
            package = re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0]
            if extra not in meta and package != "quixsinks":
                assert (extra, package) in listed, (
                    f"docs/compatibility.md: no row {extra} {package}"
                )

    servers = {row[0]: row for row in markdown_table("compatibility.md", "| destination |")}
    for destination, script, variable in (
        ("Azure Blob", "install_azure.sh", "AZURITE_VERSION"),
        ("Kinesis", "install_kinesis.sh", "KINESALITE_VERSION"),
        ("BigQuery", "install_bigquery.sh", "BQEMULATOR_VERSION"),
    ):
        text = (ROOT / "tests" / "services" / script).read_text()
        pinned = re.search(rf"{variable}:-([\d.]+)", text)
        assert pinned, f"no {variable} default in tests/services/{script}"
        assert servers[destination][2] == pinned.group(1), (destination, servers[destination])
