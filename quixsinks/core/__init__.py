"""Engine-agnostic building blocks of quixsinks. Nothing in here imports pyspark."""

from .azure import AzureDestination
from .backpressure import RetryPolicy, RetryStats
from .batch import SinkBatch, SinkItem, WriteContext
from .clients import ClientCache, ClientPool, MachineSlots, Secret, client_key
from .column_types import ColumnTypes, TypeChangeError
from .commits import CommitRecord
from .deadletters import Refusals
from .delivery import DedupeIds
from .destinations import Destination, LocalDestination, StorageOptions
from .errors import (
    AzureContainerAccessDeniedError,
    AzureContainerNotFoundError,
    CommitError,
    DeliveryError,
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    GCSBucketAccessDeniedError,
    GCSBucketNotFoundError,
    InvalidFormatError,
    LedgerFenceError,
    LocalStateError,
    MissingDependencyError,
    OptionError,
    QuixSinksError,
    RecordError,
    RetryableError,
    S3BucketAccessDeniedError,
    S3BucketNotFoundError,
    SinkBackpressureError,
    error_from,
)
from .formats import CSVFormat, Format, JSONFormat, ParquetFormat, resolve_format
from .gcs import GCSDestination
from .ledger import Ledger, LedgerEntry, LedgerStore, RecordingLedgerStore
from .options import OptionSpec, SinkOptions, option
from .publish import AppendPublisher, FilePublisher, PublishResult, StagedFile, StagingArea
from .records import RecordSchema
from .rowchecks import RowChecks
from .s3 import S3Destination
from .sink import BatchingSink, CommitContext, CommonOptions, LedgerOptions, Receipt, Sink, Task
from .timeouts import StreamTimeoutTracker
from .upload import StreamingUpload, UploadTarget

__all__ = [
    "AppendPublisher",
    "AzureContainerAccessDeniedError",
    "AzureContainerNotFoundError",
    "AzureDestination",
    "BatchingSink",
    "CSVFormat",
    "ClientCache",
    "ClientPool",
    "ColumnTypes",
    "CommitContext",
    "CommitError",
    "CommitRecord",
    "CommonOptions",
    "DedupeIds",
    "DeliveryError",
    "Destination",
    "DestinationAccessDeniedError",
    "DestinationError",
    "DestinationNotFoundError",
    "FilePublisher",
    "Format",
    "GCSBucketAccessDeniedError",
    "GCSBucketNotFoundError",
    "GCSDestination",
    "InvalidFormatError",
    "JSONFormat",
    "Ledger",
    "LedgerEntry",
    "LedgerFenceError",
    "LedgerOptions",
    "LedgerStore",
    "LocalDestination",
    "LocalStateError",
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
    "RecordingLedgerStore",
    "Refusals",
    "RetryPolicy",
    "RetryStats",
    "RetryableError",
    "RowChecks",
    "S3BucketAccessDeniedError",
    "S3BucketNotFoundError",
    "S3Destination",
    "Secret",
    "Sink",
    "SinkBackpressureError",
    "SinkBatch",
    "SinkItem",
    "SinkOptions",
    "StagedFile",
    "StagingArea",
    "StorageOptions",
    "StreamTimeoutTracker",
    "StreamingUpload",
    "Task",
    "TypeChangeError",
    "UploadTarget",
    "WriteContext",
    "client_key",
    "error_from",
    "option",
    "resolve_format",
]
