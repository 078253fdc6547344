"""The Spark glue: the only part of quixsinks that imports pyspark."""

from .datasource import QuixDataSource, ReceiptMessage, data_source_for
from .registry import available_sinks, register

__all__ = ["QuixDataSource", "ReceiptMessage", "available_sinks", "data_source_for", "register"]
