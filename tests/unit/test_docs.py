"""The docs' option tables are generated from the code and must be current."""

from __future__ import annotations

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


def test_the_type_fidelity_matrix_is_in_the_docs_and_linked() -> None:
    page = (ROOT / "docs" / "type-fidelity.md").read_text()
    assert "<!-- fidelity-matrix -->\n| Spark type |" in page
    assert "(type-fidelity.md)" in (ROOT / "docs" / "index.md").read_text()


def test_every_matrix_row_has_a_cell_for_every_sink() -> None:
    from tests.fidelity_matrix import CASES, SINKS

    for case in CASES:
        assert set(case.cells) == set(SINKS), case.label
