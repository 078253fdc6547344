"""Engine-agnostic building blocks of quixsinks. Nothing in here imports pyspark."""

from .backpressure import RetryPolicy, RetryStats
from .batch import SinkBatch, SinkItem, WriteContext
from .clients import ClientCache, MachineSlots, client_key
from .destinations import Destination, LocalDestination
from .errors import (
    CommitError,
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    InvalidFormatError,
    LedgerFenceError,
    MissingDependencyError,
    OptionError,
    QuixSinksError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
)
from .formats import CSVFormat, Format, JSONFormat, ParquetFormat, resolve_format
from .ledger import Ledger, LedgerEntry, LedgerStore
from .options import OptionSpec, SinkOptions, option
from .publish import AppendPublisher, FilePublisher, PublishResult, StagedFile, StagingArea
from .records import RecordSchema
from .sink import BatchingSink, CommitContext, CommonOptions, LedgerOptions, Receipt, Sink, Task
from .timeouts import StreamTimeoutTracker

__all__ = [
    "AppendPublisher",
    "BatchingSink",
    "CSVFormat",
    "ClientCache",
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
    "Ledger",
    "LedgerEntry",
    "LedgerFenceError",
    "LedgerOptions",
    "LedgerStore",
    "LocalDestination",
    "MachineSlots",
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
    "Task",
    "WriteContext",
    "client_key",
    "option",
    "resolve_format",
]
