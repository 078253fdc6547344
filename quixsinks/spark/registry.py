"""Register quixsinks' data sources with a SparkSession.

``quixsinks.register(spark)`` registers every built-in sink whose optional extra is
installed and returns their names; :func:`available_sinks` says which sinks can be
used here and, for the others, which extra to install.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from quixsinks.catalogue import SINKS, alias, discovery_modules, format_names
from quixsinks.core.errors import MissingDependencyError, QuixSinksError
from quixsinks.core.sink import Sink

from . import workers
from .datasource import QuixDataSource, data_source_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BUILTIN_SINKS",
    "available_sinks",
    "jvm_owner",
    "load_data_source",
    "register",
    "registered_sink",
]

logger = logging.getLogger("quixsinks.registry")

#: format name -> the sink class ``register`` registered under it in this process
_REGISTERED: dict[str, type[Sink[Any, Any]]] = {}

#: short names whose JVM owner ``register`` already named (once per process)
_CLASH_TOLD: set[str] = set()

#: built-in sink name -> the module Spark auto-registers it from (its ``DefaultSource``);
#: the alias ``qs_<name>`` has its own (``pyspark_quixsinks_qs_<name>``)
BUILTIN_SINKS: dict[str, str] = {
    name: module for module, name in discovery_modules().items() if name in SINKS
}

_PYTHON_SOURCE_CLASS = "org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2"


def load_data_source(name: str) -> type[QuixDataSource]:
    """The DataSource class of a built-in format name (``postgresql`` or its alias
    ``qs_postgresql``); MissingDependencyError if the sink's extra is absent."""
    if name not in format_names():
        raise QuixSinksError(
            f"no built-in sink {name!r}; built-in sinks: {', '.join(sorted(SINKS))} "
            f"(each also as {alias('<name>')})"
        )
    data_source: type[QuixDataSource] = importlib.import_module(
        f"{__package__}.sources"
    ).data_source(name)
    data_source.sink_class.check_dependencies()
    return data_source


def jvm_owner(spark: SparkSession, name: str) -> str | None:
    """The class of the JVM data source that ``format(name)`` reaches in this session, or
    None when it reaches a Python data source or nothing (or the session has no JVM here:
    Spark Connect). Spark looks JVM data sources up before Python ones."""
    session: Any = spark  # py4j attributes: untyped
    try:
        lookup = session._jvm.org.apache.spark.sql.execution.datasources.DataSource
        conf = session._jsparkSession.sessionState().conf()
        found = lookup.lookupDataSource(name, conf).getName()
    except Exception:  # no JVM on this side (Connect), or no data source by that name
        return None
    return None if found == _PYTHON_SOURCE_CLASS else str(found)


def _registered_in_jvm(spark: SparkSession, name: str) -> bool | None:
    """Whether the session already has a Python data source ``name`` (auto-discovery
    registers the built-in sinks in every new session); None when it cannot be asked."""
    session: Any = spark  # py4j attributes: untyped
    try:
        manager = session._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists(name))
    except Exception:  # Spark Connect: the client has no JVM
        return None


def _tell_clash(spark: SparkSession, name: str, way_out: str) -> None:
    """Log, once per process and name, that a JVM data source owns ``format(name)``."""
    if name in _CLASH_TOLD:
        return
    owner = jvm_owner(spark, name)
    if owner is None:
        return
    _CLASH_TOLD.add(name)
    logger.warning(
        "format(%r) reaches the JVM data source %s in this session (Spark looks JVM data "
        "sources up first), not quixsinks: %s",
        name,
        owner,
        way_out,
    )


def registered_sink(name: str) -> type[Sink[Any, Any]] | None:
    """The sink class :func:`register` registered under format ``name`` in this process
    (e.g. for ``track`` to find a subclass's ``on_stream_timeout``), or None."""
    return _REGISTERED.get(name)


def available_sinks() -> dict[str, str | None]:
    """Every built-in sink's name -> None if usable, else why not (the extra to install)."""
    status: dict[str, str | None] = {}
    for name in sorted(SINKS):
        try:
            load_data_source(name)
            status[name] = None
        except MissingDependencyError as exc:
            status[name] = exc.message
    return status


def register(spark: SparkSession, *custom: Any, check_workers: bool = True) -> list[str]:
    """Register the built-in sinks whose extras are installed, plus ``custom`` ones.

    Every built-in sink is registered under its short name and its alias ``qs_<name>``.
    In a session where Spark's auto-discovery already registered them (the usual case:
    see docs/deployment.md) nothing is registered again, and nothing is logged. Where a
    JVM connector owns a short name (Spark looks JVM data sources up first), a warning
    says so once, naming the alias to use.

    Args:
        spark: the session.
        custom: your own Sink subclasses (e.g. BatchingSink subclasses) or DataSource
            classes, registered under their ``name``.
        check_workers: with a local master, first check (once per interpreter) that the
            Python Spark starts for its workers can import quixsinks, and raise
            :class:`~quixsinks.spark.workers.WorkerPythonError` saying how to fix it if
            not.

    Returns:
        The format names quixsinks' sinks answer to in this session.
    """
    if check_workers:
        workers.check_workers(spark)
    registered = []
    for name, sink_name in format_names().items():
        try:
            data_source: Any = load_data_source(name)
        except MissingDependencyError as exc:
            if name == sink_name:
                logger.info("sink %s not registered: %s", name, exc.message)
            continue
        if not _registered_in_jvm(spark, name):
            spark.dataSource.register(data_source)
        _REGISTERED[name] = data_source.sink_class
        registered.append(name)
        if name == sink_name:
            _tell_clash(spark, name, f"use format({alias(name)!r}) for quixsinks' {name} sink")
    for item in custom:
        data_source = (
            data_source_for(item) if isinstance(item, type) and issubclass(item, Sink) else item
        )
        spark.dataSource.register(data_source)
        sink_class = getattr(data_source, "sink_class", None)
        if sink_class is not None:
            _REGISTERED[data_source.name()] = sink_class
        else:
            _REGISTERED.pop(data_source.name(), None)
        registered.append(data_source.name())
        _tell_clash(spark, data_source.name(), "register your sink under another name")
    return registered
