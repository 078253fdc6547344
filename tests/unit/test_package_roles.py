"""Every sink package has the same file roles (docs/architecture.md, "A sink package").

Knowing one sink means knowing them all: options.py, client.py (with the one error boundary,
``translate``), wire.py where the sink encodes, ledger.py where the destination keeps the
ledger, sink.py. Vendor glue lives once in quixsinks.core.vendors.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "quixsinks"
SINKS = PACKAGE / "sinks"
SINK_PACKAGES = sorted(p.name for p in SINKS.iterdir() if (p / "__init__.py").exists())
SOURCES = sorted(p for p in PACKAGE.rglob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _defined_classes(path: Path) -> dict[str, list[str]]:
    """class name -> the names of its bases, for every class in a module."""
    return {
        node.name: [ast.unparse(base).split(".")[-1] for base in node.bases]
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.ClassDef)
    }


def test_the_sink_packages_are_the_catalogue_minus_the_single_modules() -> None:
    from quixsinks.catalogue import SINKS as CATALOGUE

    single = {p.stem for p in SINKS.glob("*.py") if p.name != "__init__.py"}
    assert single == {"file", "csvfile"}
    assert set(SINK_PACKAGES) | single == set(CATALOGUE)


@pytest.mark.parametrize("name", SINK_PACKAGES)
def test_every_sink_package_has_options_client_and_sink(name: str) -> None:
    files = {p.name for p in (SINKS / name).glob("*.py")}
    assert {"__init__.py", "options.py", "client.py", "sink.py"} <= files


@pytest.mark.parametrize("name", SINK_PACKAGES)
def test_the_client_module_holds_the_one_error_boundary(name: str) -> None:
    functions = {
        node.name
        for node in _tree(SINKS / name / "client.py").body
        if isinstance(node, ast.FunctionDef)
    }
    assert "translate" in functions, f"{name}/client.py: no translate(exc, ...) error boundary"


@pytest.mark.parametrize("name", SINK_PACKAGES)
def test_a_ledger_store_lives_in_ledger_py(name: str) -> None:
    for path in (SINKS / name).glob("*.py"):
        for cls, bases in _defined_classes(path).items():
            if {"LedgerStore", "RecordingLedgerStore"} & set(bases):
                assert path.name == "ledger.py", f"{name}: {cls} is in {path.name}"


@pytest.mark.parametrize("name", SINK_PACKAGES)
def test_init_only_reexports(name: str) -> None:
    for node in _tree(SINKS / name / "__init__.py").body:
        is_doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        is_all = isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"
        assert is_doc or is_all or isinstance(node, (ast.Import, ast.ImportFrom)), (
            f"{name}/__init__.py holds code: {ast.unparse(node)[:80]}"
        )


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_optional_clients_are_imported_through_the_vendor_layer(path: Path) -> None:
    """No hand-written ``try: import x / except ImportError: raise MissingDependencyError``
    outside core.vendors and the Spark glue (which imports pyspark itself). Optional
    speed-ups (numpy, pgpq) that fall back quietly are not client imports."""
    relative = path.relative_to(PACKAGE).as_posix()
    if relative.startswith(("core/vendors/", "spark/")):
        return
    for node in ast.walk(_tree(path)):
        if not isinstance(node, ast.Try):
            continue
        imports = any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body)
        for handler in node.handlers:
            caught = ast.unparse(handler.type) if handler.type is not None else ""
            raises_missing = "MissingDependencyError" in ast.unparse(handler)
            assert not (imports and "ImportError" in caught and raises_missing), (
                f"{relative}:{node.lineno}: import an optional client with "
                "quixsinks.core.vendors.http.import_client"
            )


def test_one_retry_after_parser_and_one_fence_rule() -> None:
    parsers, fences = [], []
    for path in SOURCES:
        relative = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef) and "retry_after" in node.name:
                parsers.append(f"{relative}:{node.name}")
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("fence_owners"):
                fences.append(relative)
    assert parsers == ["core/vendors/http.py:retry_after_seconds"]
    assert set(fences) <= {"core/ledger.py"}
