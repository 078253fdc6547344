"""``python -m quixsinks check``: options, columns and the destination, without Spark."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

from quixsinks.cli import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def options(pg: dict[str, Any], **extra: str) -> list[str]:
    pairs = {**pg["options"], "table_name": "readings", **extra}
    return [arg for key, value in pairs.items() for arg in ("-o", f"{key}={value}")]


def test_a_reachable_postgresql_passes_every_step(pg: dict[str, Any]) -> None:
    code, out = run(
        "check",
        "--format",
        "postgresql",
        *options(pg),
        "--column",
        "id:int64",
        "--column",
        "v:double",
    )
    assert code == 0, out
    assert "  destination (preflight): ok" in out
    assert "result: ok (exactly-once)" in out
    assert pg["options"]["password"] not in out
    assert "'password': '***'" in out
    # the preflight really reached the server: it created the sink's ledger table
    with pg["server"].connect(pg["dbname"]) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass('public._quixsinks_ledger') IS NOT NULL")
        assert cur.fetchone()[0]


def test_a_wrong_password_fails_the_preflight_and_is_never_printed(pg: dict[str, Any]) -> None:
    code, out = run("check", "--format", "postgresql", *options(pg, password="not-the-password"))
    assert code == 1
    assert "  destination (preflight): FAILED" in out
    assert "authentication failed; check 'user' and 'password'" in out
    assert "not-the-password" not in out
    assert "result: ok" not in out


def test_options_are_checked_against_the_columns(pg: dict[str, Any]) -> None:
    code, out = run(
        "check",
        "--format",
        "postgresql",
        *options(pg, primary_key_columns="missing", upsert_on_primary_key="true"),
        "--column",
        "id:int64",
    )
    assert code == 1
    assert "  columns (1): FAILED" in out
    assert "missing" in out
    assert "preflight" not in out  # stops at the first failure: nothing reached the server


def test_an_unknown_option_and_a_bad_column_type_are_named(tmp_path: Path) -> None:
    code, out = run("check", "--format", "file", "-o", f"path={tmp_path}", "-o", "pth=x")
    assert code == 1
    assert "unknown option 'pth'" in out
    result = subprocess.run(
        [sys.executable, "-m", "quixsinks", "check", "--format", "file", "--column", "a:nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "--column 'a:nope'" in result.stderr
    code, out = run("check", "--format", "nosuchsink")
    assert code == 1
    assert "no built-in sink 'nosuchsink'" in out


def test_a_file_destination_that_is_writable_passes(tmp_path: Path) -> None:
    code, out = run("check", "--format", "file", "-o", f"path={tmp_path / 'out'}")
    assert code == 0, out
    assert "'path': " in out


def test_sinks_lists_every_builtin_sink() -> None:
    from quixsinks.spark.registry import BUILTIN_SINKS

    code, out = run("sinks")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == sorted(BUILTIN_SINKS)


def test_iceberg_options_are_shown_with_catalog_properties_redacted(tmp_path: Path) -> None:
    """iceberg's options show its catalog.* pass-through properties, which are no declared
    option: the summary line lists them (credentials as ***) instead of failing."""
    code, out = run(
        "check",
        "--format",
        "iceberg",
        "-o",
        f"warehouse={tmp_path / 'warehouse'}",
        "-o",
        "table_name=db.t",
        "-o",
        "catalog.s3.secret-access-key=not-printed",
    )
    assert code == 0, out
    assert "'catalog_properties': {'s3.secret-access-key': '***'}" in out
    assert "not-printed" not in out
    assert "result: ok (exactly-once)" in out
