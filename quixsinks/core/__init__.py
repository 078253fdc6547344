"""Engine-agnostic building blocks of quixsinks. Nothing in here imports pyspark."""

from .backpressure import RetryPolicy
from .batch import SinkBatch, SinkItem, WriteContext
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
from .options import SinkOptions, option
from .records import RecordSchema
from .sink import BatchingSink, CommitContext, CommonOptions, Receipt, Sink
from .timeouts import StreamTimeoutTracker

__all__ = [
    "BatchingSink",
    "CSVFormat",
    "CommitContext",
    "CommitError",
    "CommonOptions",
    "Destination",
    "DestinationAccessDeniedError",
    "DestinationError",
    "DestinationNotFoundError",
    "Format",
    "InvalidFormatError",
    "JSONFormat",
    "LocalDestination",
    "MissingDependencyError",
    "OptionError",
    "ParquetFormat",
    "QuixSinksError",
    "Receipt",
    "RecordError",
    "RecordSchema",
    "RetryPolicy",
    "RetryableError",
    "Sink",
    "SinkBackpressureError",
    "SinkBatch",
    "SinkItem",
    "SinkOptions",
    "StreamTimeoutTracker",
    "WriteContext",
    "option",
    "resolve_format",
]
