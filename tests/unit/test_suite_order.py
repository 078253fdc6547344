"""The suite's own order: files marked ``long`` first, so that ``make test``'s xdist workers
(whole files each, in collection order) start them early and none runs one alone at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import conftest

ROOT = Path(__file__).resolve().parents[2]


class Item:
    """What the collection hook reads of a pytest item."""

    def __init__(self, nodeid: str, long: bool) -> None:
        self.nodeid = nodeid
        self.markers: list[Any] = [pytest.mark.long.mark] if long else []

    def add_marker(self, marker: Any) -> None:
        self.markers.append(getattr(marker, "mark", marker))

    def get_closest_marker(self, name: str) -> Any:
        return next((m for m in self.markers if m.name == name), None)


def test_long_files_come_first_and_every_other_item_keeps_its_place() -> None:
    names = ["a.py::t1", "b.py::t1", "c.py::t1", "c.py::t2", "d.py::t1", "e.py::t1"]
    long = {"c.py", "e.py"}
    items: list[Any] = [Item(f"tests/integration/{n}", n.split("::")[0] in long) for n in names]
    conftest.pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    order = [item.nodeid.removeprefix("tests/integration/") for item in items]
    assert order == ["c.py::t1", "c.py::t2", "e.py::t1", "a.py::t1", "b.py::t1", "d.py::t1"]
    assert all(item.get_closest_marker("integration") for item in items)


def test_the_long_marker_is_registered_and_used() -> None:
    assert "long:" in (ROOT / "pyproject.toml").read_text()
    marked = [
        p.name
        for p in (ROOT / "tests" / "integration").glob("test_*.py")
        if "pytestmark = pytest.mark.long" in p.read_text()
    ]
    assert "test_driver_kill.py" in marked
    assert "test_docs_examples.py" in marked
