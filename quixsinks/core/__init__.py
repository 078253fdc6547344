"""Engine-agnostic building blocks of quixsinks. Nothing in here imports pyspark."""

from .backpressure import RetryPolicy, RetryStats
from .batch import SinkBatch, SinkItem, WriteContext
from .column_types import ColumnTypes
from .destinations import Destination, LocalDestination
from .errors import (
    CommitError,
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    InvalidFormatError,
    MissingDependencyError,
    OptionError,
    QuixSinksError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
)
from .formats import CSVFormat, Format, JSONFormat, ParquetFormat, resolve_format
from .options import OptionSpec, SinkOptions, option
from .publish import AppendPublisher, FilePublisher, PublishResult, StagedFile, StagingArea
from .records import RecordSchema
from .sink import BatchingSink, CommitContext, CommonOptions, Receipt, Sink
from .timeouts import StreamTimeoutTracker

__all__ = [
    "AppendPublisher",
    "BatchingSink",
    "CSVFormat",
    "ColumnTypes",
    "CommitContext",
    "CommitError",
    "CommonOptions",
    "Destination",
    "DestinationAccessDeniedError",
    "DestinationError",
    "DestinationNotFoundError",
    "FilePublisher",
    "Format",
    "InvalidFormatError",
    "JSONFormat",
    "LocalDestination",
    "MissingDependencyError",
    "OptionError",
    "OptionSpec",
    "ParquetFormat",
    "PublishResult",
    "QuixSinksError",
    "Receipt",
    "RecordError",
    "RecordSchema",
    "RetryPolicy",
    "RetryStats",
    "RetryableError",
    "Sink",
    "SinkBackpressureError",
    "SinkBatch",
    "SinkItem",
    "SinkOptions",
    "StagedFile",
    "StagingArea",
    "StreamTimeoutTracker",
    "WriteContext",
    "option",
    "resolve_format",
]
