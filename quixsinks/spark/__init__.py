"""The Spark glue: the only part of quixsinks that imports pyspark."""

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
