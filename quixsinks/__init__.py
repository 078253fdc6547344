"""quixsinks: Apache Spark sinks ported from the Quix Streams sink catalogue.

    import quixsinks
    quixsinks.register(spark)                      # every sink whose extra is installed
    df.writeStream.format("file").option("path", "/data/out").start()

The core (``quixsinks.core``) needs only pyarrow; ``register`` and the DataSource
classes import pyspark on first use, and say how to install it where it is missing
(``pip install 'quixsinks[spark]'``, unless your platform brings its own Spark).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version
from typing import TYPE_CHECKING, Any

from .core import *  # noqa: F403
from .core import __all__ as _core_all
from .core.sink import Sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

try:  # the one version source: pyproject.toml, through the installed package's metadata
    __version__ = _distribution_version("quixsinks")
except PackageNotFoundError:  # a checkout on sys.path, not installed
    __version__ = "0+unknown"
__all__ = [*_core_all, "__version__", "available_sinks", "data_source_for", "register"]


def register(spark: SparkSession, *custom: Any, check_workers: bool = True) -> list[str]:
    """Register every built-in sink whose extra is installed (and ``custom`` sinks).

    With a local master it first checks that Spark's Python workers can import quixsinks.
    See :func:`quixsinks.spark.registry.register`.
    """
    from .spark.registry import register as _register

    return _register(spark, *custom, check_workers=check_workers)


def data_source_for(sink_class: type[Sink[Any, Any]]) -> Any:
    """The PySpark DataSource class of a sink class (see :func:`register` for the short way)."""
    from .spark.datasource import data_source_for as _data_source_for

    return _data_source_for(sink_class)


def available_sinks() -> dict[str, str | None]:
    """Built-in sink name -> None if usable here, else the extra to install."""
    from .spark.registry import available_sinks as _available

    return _available()
