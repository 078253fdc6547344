"""Specification of the package's shape: what imports what, what is exported, what pickles."""

from __future__ import annotations

import ast
import importlib
import inspect
import pickle
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest

import quixsinks
import quixsinks.core
import quixsinks.sinks
from quixsinks.core.publish import StagedFile
from quixsinks.core.sink import CommonOptions, Receipt, Sink

CORE_MODULES = sorted(m.name for m in pkgutil.iter_modules(quixsinks.core.__path__))
SINK_MODULES = sorted(m.name for m in pkgutil.iter_modules(quixsinks.sinks.__path__))


def core_module(name: str) -> ModuleType:
    return importlib.import_module(f"quixsinks.core.{name}")


def builtin_sinks() -> dict[str, str]:
    from quixsinks.spark.registry import BUILTIN_SINKS

    return BUILTIN_SINKS


def sink_class(name: str) -> type[Sink[Any, Any]]:
    return importlib.import_module(builtin_sinks()[name]).DefaultSource.sink_class  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- imports


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_importing_quixsinks_does_not_import_pyspark() -> None:
    result = run_python(
        "import sys, quixsinks, quixsinks.core\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "assert not loaded, loaded\n"
    )
    assert result.returncode == 0, result.stderr


def test_no_core_module_imports_pyspark() -> None:
    modules = ", ".join(f"quixsinks.core.{name}" for name in CORE_MODULES)
    result = run_python(f"import sys, {modules}\nassert 'pyspark' not in sys.modules\n")
    assert result.returncode == 0, result.stderr


def test_sink_modules_import_no_pyspark() -> None:
    """A sink module holds options, the executor write and the driver commit: no Spark."""
    modules = ", ".join(f"quixsinks.sinks.{name}" for name in SINK_MODULES)
    result = run_python(
        f"import sys, quixsinks.testing, {modules}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "assert not loaded, loaded\n"
    )
    assert result.returncode == 0, result.stderr


def test_core_never_imports_the_spark_glue() -> None:
    """No import cycle: quixsinks.spark builds on quixsinks.core, never the other way."""
    glue = re.compile(r"^\s*(from|import)\s+(quixsinks\.spark|\.\.spark)", re.MULTILINE)
    offenders = [
        str(path)
        for path in Path(quixsinks.core.__file__).parent.glob("*.py")
        if glue.search(path.read_text())
    ]
    assert offenders == []


def test_one_client_cache_mechanism() -> None:
    """Sinks cache clients with core's ClientCache, not with module-level dicts of their own."""
    offenders = []
    for path in Path(quixsinks.sinks.__file__).parent.rglob("*.py"):
        text = path.read_text()
        if "_CLIENTS: dict" in text or "atexit" in text or "fcntl" in text:
            offenders.append(str(path))
    assert offenders == []


# ----------------------------------------------------------------------------- caches

#: module-level state a process fills at run time, found by the AST walk below, that is not a
#: client cache: "path:name" -> why it may stay. Anything else goes through ClientCache.
NOT_A_CACHE = {
    "spark/registry.py:_REGISTERED": "the sinks register() was called with (bounded by them)",
    "spark/registry.py:_CLASH_TOLD": "names already warned about (bounded by the sinks)",
    "spark/datasource.py:_utc_timestamps": "one value per process (a pyspark signature)",
    "spark/workers.py:_checked": "interpreters checked in this driver (one or two)",
    "core/secrets.py:is_secret_name": "bounded (maxsize) and keyed by option names only",
}
_CONTAINERS = {"dict", "set", "list", "OrderedDict", "defaultdict", "WeakValueDictionary"}
_CACHE_DECORATORS = {"cache", "lru_cache"}


def _called_name(node: ast.expr) -> str | None:
    """``f`` of ``f(...)``, ``module.f(...)`` or a bare ``f``/``module.f``."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    return None


def _module_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """The statements that run at import (nested in ``if``/``try`` blocks too)."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            pending.extend([*node.body, *node.orelse, *getattr(node, "finalbody", [])])
            for handler in getattr(node, "handlers", []):
                pending.extend(handler.body)


def module_level_caches(path: Path) -> list[str]:
    """Names of ``path`` that hold per-process state filled at run time: module-level
    empty dicts, sets and lists (``{}``, ``set()``, ``dict[str, X] = {}``...) and functions
    under ``functools.cache``/``lru_cache``."""
    found = []
    for node in _module_level(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_called_name(d) in _CACHE_DECORATORS for d in node.decorator_list):
                found.append(node.name)
            continue
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        empty = (
            (isinstance(value, ast.Dict) and not value.keys)
            or (isinstance(value, ast.List) and not value.elts)
            or (
                isinstance(value, ast.Call)
                and _called_name(value) in _CONTAINERS
                and not value.args[(_called_name(value) == "defaultdict") :]
                and not value.keywords
            )
        )
        if empty:
            names = [t.id for t in targets if isinstance(t, ast.Name) and t.id != "__all__"]
            found.extend(names)
    return found


def test_module_level_caches_are_client_caches() -> None:
    """Per-process caches are core's ClientCache (bounded, keyed without secrets, closed at
    exit): no module-level dict, set or list filled at run time, no functools cache,
    outside core/clients.py (the allowed exceptions say why)."""
    root = Path(quixsinks.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where == "core/clients.py":
            continue
        offenders += [
            f"{where}:{name}"
            for name in module_level_caches(path)
            if f"{where}:{name}" not in NOT_A_CACHE
        ]
    assert offenders == []


def test_the_cache_finder_sees_every_kind_of_module_level_cache(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import functools\nfrom collections import OrderedDict\n"
        "_A: dict[str, int] = {}\n_B = set()\n_C = OrderedDict()\n_D = []\n__all__ = []\n"
        "TABLE = {'a': 1}\nPAIR = dict(a=1)\n"
        "if True:\n    _E = {}\n"
        "@functools.lru_cache(maxsize=None)\ndef f(x): return x\n"
        "@functools.cache\ndef g(x): return x\n"
        "def h():\n    local = {}\n    return local\n"
    )
    assert sorted(module_level_caches(source)) == ["_A", "_B", "_C", "_D", "_E", "f", "g"]


def test_every_builtin_sink_has_an_auto_discovery_module() -> None:
    import pyspark_quixsinks_file
    from quixsinks.spark.datasource import QuixDataSource

    for name, module_name in builtin_sinks().items():
        source = importlib.import_module(module_name).DefaultSource
        assert issubclass(source, QuixDataSource)
        assert source.name() == name
        # pickled by reference: Spark ships it to workers and Connect servers by name
        assert pickle.loads(pickle.dumps(source)) is source
    assert pyspark_quixsinks_file.DefaultSource.sink_class.name == "file"


# ----------------------------------------------------------------------------- exports


@pytest.mark.parametrize(
    "module",
    [quixsinks, quixsinks.core, *(core_module(name) for name in CORE_MODULES)],
    ids=lambda m: m.__name__,
)
def test_all_names_real_attributes(module: ModuleType) -> None:
    missing = [name for name in getattr(module, "__all__", ()) if not hasattr(module, name)]
    assert missing == []


def test_all_has_no_duplicates() -> None:
    assert len(set(quixsinks.__all__)) == len(quixsinks.__all__)


def test_quixsinks_exports_everything_core_does() -> None:
    assert set(quixsinks.core.__all__) <= set(quixsinks.__all__)


@pytest.mark.parametrize(
    "name",
    CORE_MODULES,
)
def test_every_public_class_of_a_core_module_is_exported(name: str) -> None:
    module = core_module(name)
    classes = {n for n in getattr(module, "__all__", ()) if inspect.isclass(getattr(module, n))}
    assert sorted(classes - set(quixsinks.core.__all__)) == []


# ----------------------------------------------------------------------------- sinks


def test_every_sink_module_is_a_builtin_sink() -> None:
    registered = {
        importlib.import_module(module).DefaultSource.sink_class.__module__.split(".")[2]
        for module in builtin_sinks().values()
    }
    assert set(SINK_MODULES) == registered


@pytest.mark.parametrize("name", sorted(builtin_sinks()))
def test_builtin_sink_is_registered_under_its_name(name: str) -> None:
    assert sink_class(name).name == name


@pytest.mark.parametrize("name", sorted(builtin_sinks()))
def test_builtin_sink_options_derive_from_common_options(name: str) -> None:
    assert issubclass(sink_class(name).options_class, CommonOptions)


def minimal_options(name: str, tmp_path: Path) -> dict[str, str]:
    """The fewest options each built-in sink accepts; a new sink adds its entry here."""
    return {
        "file": {"path": str(tmp_path / "out")},
        "csvfile": {"path": str(tmp_path / "out.csv")},
        "postgresql": {"dbname": "db", "table_name": "t", "password": "secret"},
        "influxdb3": {"host": "http://127.0.0.1:1", "database": "db", "measurement": "m"},
        "influxdb1": {"host": "127.0.0.1", "database": "db", "measurement": "m"},
        "redis": {"host": "127.0.0.1", "password": "secret"},
        "tsdatalake": {"path": str(tmp_path / "lake"), "table_name": "t"},
        "kinesis": {"stream_name": "s", "aws_secret_access_key": "secret"},
        "pubsub": {"project_id": "p", "topic_id": "events", "service_account_json": "secret"},
        "iceberg": {"warehouse": str(tmp_path / "warehouse"), "table_name": "db.t"},
        "bigquery": {"project_id": "p", "dataset_id": "d", "table_name": "t"},
        "mqtt": {
            "client_id": "c",
            "server": "127.0.0.1",
            "port": "1883",
            "topic_root": "t",
            "username": "u",
            "password": "secret",
        },
    }[name]


def built_sink(name: str, tmp_path: Path) -> Sink[Any, Any]:
    cls = sink_class(name)
    options = {**minimal_options(name, tmp_path), "sink_id": "s1"}
    return cls(cls.options_class.from_options(options))


@pytest.mark.parametrize("name", sorted(builtin_sinks()))
def test_sink_options_pickle(name: str, tmp_path: Path) -> None:
    options = built_sink(name, tmp_path).options
    assert pickle.loads(pickle.dumps(options)) == options


@pytest.mark.parametrize("name", sorted(builtin_sinks()))
def test_sink_pickles_after_prepare(name: str, tmp_path: Path) -> None:
    sink = built_sink(name, tmp_path)
    sink.prepare(
        pa.schema(
            [("key", pa.string()), ("timestamp", pa.timestamp("us", "UTC")), ("v", pa.int64())]
        )
    )
    copy = pickle.loads(pickle.dumps(sink))
    assert type(copy) is type(sink)
    assert (copy.options, copy.records, copy.overwrite) == (sink.options, sink.records, False)


def test_receipt_pickles() -> None:
    receipt: Receipt[StagedFile] = Receipt(
        sink_id="s1",
        batch_id=3,
        partition_id=1,
        attempt_id="a",
        rows=10,
        nbytes=100,
        seconds=0.5,
        retries=2,
        staged=[StagedFile("_q/staging/x", "x.jsonl", 10, 100)],
        counters={"files": 1},
    )
    assert pickle.loads(pickle.dumps(receipt)) == receipt
