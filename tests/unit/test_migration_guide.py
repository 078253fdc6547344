"""docs/migrating-from-quix.md maps every constructor parameter of Quix Streams' sinks to
an option, or says what becomes of it; the parameter lists are Quix Streams 3.28.1's own."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs"))

from quix_parameters import SINKS, QuixSink  # noqa: E402

from quixsinks.spark.sources import data_source  # noqa: E402
from tests.quix_streams import import_quix  # noqa: E402

GUIDE = ROOT / "docs" / "migrating-from-quix.md"


def option_names(fmt: str) -> set[str]:
    specs = data_source(fmt).sink_class.options_class.specs()
    return {spec.name for spec in specs} | {alias for spec in specs for alias in spec.aliases}


@pytest.mark.parametrize("sink", SINKS, ids=lambda s: s.name)
def test_every_quix_parameter_is_an_option_or_explained(sink: QuixSink) -> None:
    options = option_names(sink.format)
    unexplained = [p for p in sink.parameters if p not in options and p not in sink.notes]
    assert unexplained == []
    # a note on a parameter that maps by itself would hide the mapping
    assert [p for p in sink.notes if p in options] == []
    assert set(sink.notes) <= set(sink.parameters)


def test_the_guide_has_a_table_for_every_quix_sink_format() -> None:
    text = GUIDE.read_text()
    for fmt in {sink.format for sink in SINKS}:
        assert f"<!-- quix-parameters:{fmt} -->" in text, fmt


def _signature(sink: QuixSink) -> list[str]:
    """The pinned Quix Streams' parameters of ``sink``: imported, or read from the source
    where importing needs an extra the dev environment does not install (S3FileSink needs
    mypy_boto3_s3, QuixTSDataLakeSink quixportal)."""
    try:
        cls = getattr(import_quix(sink.module), sink.name)
    except ImportError:
        cls = None
    if cls is not None:
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    spec = importlib.util.find_spec(sink.module)
    assert spec is not None, sink.module
    assert spec.origin is not None, sink.module
    tree = ast.parse(Path(spec.origin).read_text())
    [init] = [
        node
        for cls_node in tree.body
        if isinstance(cls_node, ast.ClassDef) and cls_node.name == sink.name
        for node in cls_node.body
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    ]
    names = [a.arg for a in init.args.args[1:] + init.args.kwonlyargs]
    return names + ([init.args.kwarg.arg] if init.args.kwarg else [])


@pytest.mark.parametrize("sink", SINKS, ids=lambda s: s.name)
def test_the_parameters_are_the_pinned_quix_streams_ones(sink: QuixSink) -> None:
    pytest.importorskip(
        "quixstreams",
        reason="Quix Streams is a dev dependency, not in the compat venv; make test checks it",
    )
    public = [p for p in _signature(sink) if not p.startswith("_")]  # `_check_interval_ms`
    assert tuple(public) == sink.parameters
