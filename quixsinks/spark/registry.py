"""Register quixsinks' data sources with a SparkSession.

``quixsinks.register(spark)`` registers every built-in sink whose optional extra is
installed and returns their names; :func:`available_sinks` says which sinks can be
used here and, for the others, which extra to install.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from quixsinks.core.errors import MissingDependencyError, QuixSinksError
from quixsinks.core.sink import Sink

from . import workers
from .datasource import QuixDataSource, data_source_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BUILTIN_SINKS", "available_sinks", "load_data_source", "register", "registered_sink"]

logger = logging.getLogger("quixsinks.registry")

#: format name -> the sink class ``register`` registered under it in this process
_REGISTERED: dict[str, type[Sink[Any, Any]]] = {}

#: format name -> the module that Spark auto-registers it from (its ``DefaultSource``)
BUILTIN_SINKS: dict[str, str] = {
    name: f"pyspark_quixsinks_{name}"
    for name in (
        "bigquery",
        "csvfile",
        "file",
        "influxdb3",
        "iceberg",
        "kinesis",
        "mqtt",
        "postgresql",
        "pubsub",
        "redis",
        "tsdatalake",
    )
}


def load_data_source(name: str) -> type[QuixDataSource]:
    """The DataSource class of a built-in sink; MissingDependencyError if its extra is absent."""
    try:
        module_name = BUILTIN_SINKS[name]
    except KeyError:
        raise QuixSinksError(
            f"no built-in sink {name!r}; built-in sinks: {', '.join(sorted(BUILTIN_SINKS))}"
        ) from None
    # The pyspark_quixsinks_* modules stand in a failing DataSource when quixsinks cannot be
    # imported (so that Spark's lookup of other data sources survives); here that error is
    # raised where the user can see it.
    importlib.import_module(f"{__package__}.sources")
    data_source: type[QuixDataSource] = importlib.import_module(module_name).DefaultSource
    data_source.sink_class.check_dependencies()
    return data_source


def registered_sink(name: str) -> type[Sink[Any, Any]] | None:
    """The sink class :func:`register` registered under format ``name`` in this process
    (e.g. for ``track`` to find a subclass's ``on_stream_timeout``), or None."""
    return _REGISTERED.get(name)


def available_sinks() -> dict[str, str | None]:
    """Every built-in sink's name -> None if usable, else why not (the extra to install)."""
    status: dict[str, str | None] = {}
    for name in sorted(BUILTIN_SINKS):
        try:
            load_data_source(name)
            status[name] = None
        except MissingDependencyError as exc:
            status[name] = exc.message
    return status


def register(spark: SparkSession, *custom: Any, check_workers: bool = True) -> list[str]:
    """Register the built-in sinks whose extras are installed, plus ``custom`` ones.

    Args:
        spark: the session.
        custom: your own Sink subclasses (e.g. BatchingSink subclasses) or DataSource
            classes, registered under their ``name``.
        check_workers: with a local master, first check (once per interpreter) that the
            Python Spark starts for its workers can import quixsinks, and raise
            :class:`~quixsinks.spark.workers.WorkerPythonError` saying how to fix it if
            not.

    Returns:
        The registered format names.
    """
    if check_workers:
        workers.check_workers(spark)
    registered = []
    for name in sorted(BUILTIN_SINKS):
        try:
            data_source: Any = load_data_source(name)
        except MissingDependencyError as exc:
            logger.info("sink %s not registered: %s", name, exc.message)
            continue
        spark.dataSource.register(data_source)
        _REGISTERED[name] = data_source.sink_class
        registered.append(name)
    if "iceberg" in registered:  # a JVM Iceberg connector would own the name
        from quixsinks.sinks.iceberg.clash import warn_if_jvm_connector

        warn_if_jvm_connector(spark)
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
    return registered
