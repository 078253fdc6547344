"""The quixsinks exception tree.

Every error raised by quixsinks derives from :class:`QuixSinksError`, grouped by what
the caller can do about it::

    QuixSinksError
    ├── OptionError (also ValueError)       a bad, unknown or missing option; raised on the
    │   └── InvalidFormatError              driver before any task runs. Fix the option.
    ├── RecordError (also ValueError)       a row that cannot be written (missing column,
    │                                       unserialisable value). Fix the data.
    ├── DestinationError                    the destination refused or failed.
    │   ├── DestinationNotFoundError        bucket, container, directory or table missing
    │   │   └── S3BucketNotFoundError, AzureContainerNotFoundError, GCSBucketNotFoundError
    │   ├── DestinationAccessDeniedError    credentials lack the right to write
    │   │   └── S3BucketAccessDeniedError, AzureContainerAccessDeniedError, GCSBucket...
    │   └── DeliveryError                   records still refused when the retry deadline passed
    ├── CommitError                         the driver could not finish a micro-batch; the
    │   │                                   query can be restarted from its checkpoint
    │   └── LedgerFenceError                another streaming query owns this sink id
    ├── RetryableError                      transient: the RetryPolicy retries these
    │   └── SinkBackpressureError           the destination asked us to slow down
    ├── LocalStateError                     a local state directory or file another user
    │                                       could reach; nothing was read or written there
    └── MissingDependencyError (ImportError) a sink's optional extra is not installed

Errors carry their details as attributes (``option``, ``value``, ``allowed``...) and
survive pickling, so they can cross from a Spark executor to the driver intact.
Messages never contain secret option values.

Through Spark only an error's text reaches your code (PySpark raises its own exception,
an ``AnalysisException`` or ``StreamingQueryException``, with the Python error inside
its message); :func:`error_from` finds the quixsinks error in that text again.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "AzureContainerAccessDeniedError",
    "AzureContainerNotFoundError",
    "CommitError",
    "DeliveryError",
    "DestinationAccessDeniedError",
    "DestinationError",
    "DestinationNotFoundError",
    "GCSBucketAccessDeniedError",
    "GCSBucketNotFoundError",
    "InvalidFormatError",
    "LedgerFenceError",
    "LocalStateError",
    "MissingDependencyError",
    "OptionError",
    "QuixSinksError",
    "RecordError",
    "RetryableError",
    "S3BucketAccessDeniedError",
    "S3BucketNotFoundError",
    "SinkBackpressureError",
    "error_from",
]


class QuixSinksError(Exception):
    """Root of every quixsinks error.

    Subclasses keep their constructor keywords in ``self._kwargs`` so that they pickle
    and unpickle with their attributes (exceptions with keyword-only constructors do
    not survive pickling by default).
    """

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message)
        self._kwargs = kwargs

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self._kwargs))


def _rebuild(cls: type[QuixSinksError], message: str, kwargs: dict[str, Any]) -> QuixSinksError:
    error = cls.__new__(cls)
    QuixSinksError.__init__(error, message, **kwargs)
    for name, value in kwargs.items():
        setattr(error, name, value)
    return error


class OptionError(QuixSinksError, ValueError):
    """A data source option is unknown, missing or has a value that is not allowed.

    Attributes:
        option: the option's canonical (snake_case) name, or None for several options.
        value: the offending value as given (``"***"`` for secrets).
        allowed: what is allowed, as a sequence of values or a description.
    """

    def __init__(
        self,
        message: str,
        *,
        option: str | None = None,
        value: Any = None,
        allowed: Sequence[str] | str | None = None,
    ) -> None:
        super().__init__(message, option=option, value=value, allowed=allowed)
        self.option = option
        self.value = value
        self.allowed = allowed


class InvalidFormatError(OptionError):
    """An unknown file format name, or a format that cannot do what was asked."""


class RecordError(QuixSinksError, ValueError):
    """Data that cannot be written: a missing column, a value that cannot be serialised.

    Attributes:
        column: the column involved, when known.
        row: the row's index within its partition's batch, when known.
    """

    def __init__(self, message: str, *, column: str | None = None, row: int | None = None):
        super().__init__(message, column=column, row=row)
        self.column = column
        self.row = row


class DestinationError(QuixSinksError):
    """The destination failed or refused an operation.

    Attributes:
        location: the path, URL or table involved (never with credentials).
    """

    def __init__(self, message: str, *, location: str | None = None) -> None:
        super().__init__(message, location=location)
        self.location = location


class DestinationNotFoundError(DestinationError):
    """The directory, bucket, container or table does not exist."""


class DestinationAccessDeniedError(DestinationError):
    """The destination exists but the credentials in use may not write to it."""


class S3BucketNotFoundError(DestinationNotFoundError):
    """The S3 bucket does not exist (Quix's name)."""


class S3BucketAccessDeniedError(DestinationAccessDeniedError):
    """The credentials may not use the S3 bucket, or are wrong (Quix's name)."""


class AzureContainerNotFoundError(DestinationNotFoundError):
    """The Azure Blob container does not exist (Quix's name)."""


class AzureContainerAccessDeniedError(DestinationAccessDeniedError):
    """The credentials may not use the Azure Blob container, or are wrong (Quix's name)."""


class GCSBucketNotFoundError(DestinationNotFoundError):
    """The Google Cloud Storage bucket does not exist."""


class GCSBucketAccessDeniedError(DestinationAccessDeniedError):
    """The credentials may not use the Google Cloud Storage bucket, or are wrong."""


class DeliveryError(DestinationError):
    """Records were still refused (throttled) when the retry policy's deadline passed.

    Attributes:
        undelivered: how many items were not delivered.
        total: how many items the call had to deliver.
        reason: the last refusal, as the destination gave it.
    """

    def __init__(self, message: str, *, undelivered: int, total: int, reason: str) -> None:
        QuixSinksError.__init__(self, message, undelivered=undelivered, total=total, reason=reason)
        self.location = None
        self.undelivered = undelivered
        self.total = total
        self.reason = reason


class CommitError(QuixSinksError):
    """The driver could not finish committing a micro-batch.

    What was already published stays consistent: restarting the query from its
    checkpoint replays the batch and the commit completes (or is skipped if done).
    """


class LedgerFenceError(CommitError):
    """Another writer has written under this sink id: nothing was written.

    Batch ids restart at 0 with a new checkpoint, so the other query's ledger entries
    must never be read as "this batch is committed already" (that would skip data). Keyed
    batch writes (options ``sink_id`` and ``batch_id``) are one writer with the query id
    ``batch-write``.

    Attributes:
        sink_id: the contested sink id.
        owner_query_id: the query whose entries the ledger holds.
        query_id: the query that tried to write.
    """

    def __init__(self, *, sink_id: str, owner_query_id: str, query_id: str) -> None:
        owner = _writer(owner_query_id) if owner_query_id else "a batch write or an older quixsinks"
        message = (
            f"sink id {sink_id!r} belongs to {owner} (its ledger entries are in the "
            f"destination), but this is {_writer(query_id) if query_id else 'query (none)'}: "
            "a new checkpoint, or two writers sharing one sink_id. Nothing was written. Either "
            f"give this writer its own 'sink_id', or, if {owner} will never run again, set "
            f"option takeover_query_id={owner_query_id!r} to drop its ledger entries and take "
            "the sink id over."
        )
        QuixSinksError.__init__(
            self,
            message,
            sink_id=sink_id,
            owner_query_id=owner_query_id,
            query_id=query_id,
        )
        self.sink_id = sink_id
        self.owner_query_id = owner_query_id
        self.query_id = query_id


def _writer(query_id: str) -> str:
    """A ledger writer as a fence message names it."""
    from .ledger import BATCH_WRITE_QUERY_ID  # the ledger module imports this one

    if query_id == BATCH_WRITE_QUERY_ID:
        return f"keyed batch writes (sink_id and batch_id; query id {query_id})"
    return f"streaming query {query_id}"


class RetryableError(QuixSinksError):
    """A transient failure that the :class:`~quixsinks.core.backpressure.RetryPolicy` retries.

    Attributes:
        retry_after: seconds the destination asked us to wait, or None to use backoff.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.retry_after = retry_after


class SinkBackpressureError(RetryableError):
    """Raised by a sink's ``write`` when the destination asks to slow down (HTTP 429...).

    As in Quix Streams, ``retry_after`` is the pause in seconds before the write is
    tried again. quixsinks retries the write within the task, according to the
    sink's RetryPolicy, instead of failing the micro-batch.
    """

    def __init__(self, retry_after: float = 0.0, message: str | None = None) -> None:
        if retry_after < 0:
            raise ValueError(f"retry_after must be >= 0, got {retry_after!r}")
        text = message or f"destination asked to retry after {retry_after:g} s"
        super().__init__(text, retry_after=retry_after)


class LocalStateError(QuixSinksError):
    """A directory or file for local state (the silence spool, connection slot locks) is
    not this user's alone: a symbolic link, another owner, or access for group or others.
    See :mod:`quixsinks.core.localstate`; the message says how to fix it.

    Attributes:
        path: the refused directory or file.
        reason: what is wrong with it.
    """

    def __init__(self, message: str, *, path: str, reason: str) -> None:
        super().__init__(message, path=path, reason=reason)
        self.path = path
        self.reason = reason


class MissingDependencyError(QuixSinksError, ImportError):
    """A sink's optional dependency is not installed.

    Attributes:
        extra: the quixsinks extra to install, e.g. ``"postgresql"``.
    """

    def __init__(
        self, package: str, extra: str, found: str | None = None, hint: str | None = None
    ) -> None:
        installed = f" (found {found})" if found else ""
        advice = hint or f"install it with: pip install 'quixsinks[{extra}]'"
        super().__init__(f"{package!r} is not installed{installed}; {advice}", extra=extra)
        self.extra = extra


def format_allowed(values: Iterable[str]) -> str:
    """Render allowed values for a message: ``'a', 'b' or 'c'``."""
    items = [repr(v) for v in values]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


def timed_out(seconds: float, option: str) -> str:
    """The words every sink uses for a call that got no answer in time, naming the option
    that sets the limit: ``timed out (no answer in 2 s; option 'socket_timeout')``."""
    return f"timed out (no answer in {seconds:g} s; option {option!r})"


# "quixsinks.core.errors.OptionError: file: unknown option 'pathh'..." in Spark's text
_IN_SPARK_TEXT = re.compile(r"\b(quixsinks(?:\.\w+)*)\.(\w+(?:Error|Exception)): (.*)")
_SPARK_SUFFIX = re.compile(r"(\s+SQLSTATE: \w+)+\s*$")


def error_from(exc: BaseException | str) -> QuixSinksError | None:
    """The quixsinks error inside an exception PySpark raised (or its text), or None.

    Spark hands a Python data source's error to your code as text inside its own
    exception; this rebuilds the first quixsinks error in it (its class and message;
    its other attributes are lost on the way)::

        try:
            df.write.format("postgresql").options(**opts).mode("append").save()
        except Exception as exc:
            error = quixsinks.error_from(exc)
            if isinstance(error, quixsinks.OptionError):
                ...  # fix the option named in error.message
            else:
                raise
    """
    for match in _IN_SPARK_TEXT.finditer(str(exc)):
        module_name, class_name, message = match.groups()
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        if isinstance(cls, type) and issubclass(cls, QuixSinksError):
            return _rebuild(cls, _SPARK_SUFFIX.sub("", message), {})
    return None
