"""The Spark glue: the only part of quixsinks that imports pyspark."""

import importlib.util

from quixsinks.core.errors import MissingDependencyError

if importlib.util.find_spec("pyspark") is None:
    # pyspark is not a requirement of quixsinks: platforms bring their own Spark
    raise MissingDependencyError(
        "pyspark",
        "spark",
        hint="quixsinks' Spark sinks run in a Spark 4.1+ Python environment: on a "
        "platform with its own Spark (Databricks, Dataproc, EMR) use its Python; "
        "elsewhere install pyspark with: pip install 'quixsinks[spark]'",
    )

from .datasource import QuixDataSource, ReceiptMessage, data_source_for
from .registry import available_sinks, register
from .workers import WorkerPythonError

__all__ = [
    "QuixDataSource",
    "ReceiptMessage",
    "WorkerPythonError",
    "available_sinks",
    "data_source_for",
    "register",
]
