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
    import pyarrow as pa
    from pyspark.sql import SparkSession

try:  # the one version source: pyproject.toml, through the installed package's metadata
    __version__ = _distribution_version("quixsinks")
except PackageNotFoundError:  # a checkout on sys.path, not installed
    __version__ = "0+unknown"
__all__ = [
    *_core_all,
    "__version__",
    "available_sinks",
    "commit_records",
    "data_source_for",
    "register",
]


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


def commit_records(format: str | type[Sink[Any, Any]], **options: Any) -> pa.Table:
    """The commit records a sink keeps with its ledger entries, as a pyarrow Table.

    ``format`` is a built-in sink's format name (``"postgresql"``, ``"qs_file"``...) or a
    sink class; ``options`` are the write's own options (where the destination and its
    ledger are; ``sink_id`` narrows the records to one writer). One row per committed
    micro-batch, see :class:`~quixsinks.core.commits.CommitRecord`. No Spark session is
    needed. Sinks without a ledger in their destination keep no records (they log them).

        quixsinks.commit_records("file", path="/data/out", sink_id="orders")
    """
    import pyarrow  # noqa: F401  (the return type; the core needs only pyarrow)

    from .core.commits import records_table
    from .core.secrets import scrubbed_errors

    sink_class = format if isinstance(format, type) else _sink_class(format)
    raw = {k: _option_text(v) for k, v in options.items() if v is not None}
    parsed = sink_class.options_class.from_options(raw)
    with scrubbed_errors(parsed.secret_values):
        sink = sink_class(parsed)
        return records_table(sink.commit_records(parsed.sink_id))


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _sink_class(name: str) -> type[Sink[Any, Any]]:
    """The built-in sink class of a format name (short name or ``qs_`` alias)."""
    import importlib

    from .catalogue import format_names
    from .core.errors import OptionError

    names = format_names()
    if name.lower() not in names:
        raise OptionError(
            f"no built-in sink {name!r}; built-in: {', '.join(sorted(set(names.values())))}; "
            "for your own sink pass its class",
            option="format",
            value=name,
            allowed=sorted(names),
        )
    sink_name = names[name.lower()]
    module = importlib.import_module(f"quixsinks.sinks.{sink_name}")
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and issubclass(value, Sink)
            and getattr(value, "name", None) == sink_name
        ):
            return value
    raise LookupError(f"quixsinks.sinks.{sink_name} declares no sink class")  # pragma: no cover
