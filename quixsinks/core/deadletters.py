"""Row-level refusals: ``on_error`` (fail, skip, dead_letter) and the dead-letter output.

A *row-level refusal* is a row that the destination or an encoder refuses for what the
row holds: text that is not JSON, a value over a destination's limit, a type or a
constraint the destination refuses for that row, a per-record permanent error. It is a
:class:`~quixsinks.core.errors.RecordError`. Everything else (a server down, a timeout,
an authentication failure, throttling) is retried and then fails the batch: a server
being down never sends good rows to the dead-letter output.

What happens to a refused row is the ``on_error`` option's choice:

``fail`` (default)
    The batch fails with an error naming the row (its Kafka topic, partition and offset
    when present, else its key, else its position).
``skip``
    The row is dropped and counted (``skipped`` in the commit log line and record).
``dead_letter``
    The row goes to ``dead_letter_path`` as one JSON Lines object
    ``{"sink", "sink_id", "batch_id", "error": {"type", "message"}, "row": {...}}``
    and is counted (``dead_lettered``).

**Finding the bad rows.** A sink that knows which row it refuses calls
``batch.refuse(row, error)`` (see :meth:`Refusals.refuse`). When a sink's ``write``
raises a RecordError for its whole SinkBatch (a destination that refuses a whole request
for one row), :func:`write_isolating` splits the batch in halves and writes each again,
down to the single rows that fail: one bad row in n costs about 2·log2(n) extra writes.
A sink's ``write`` must therefore leave nothing behind when it raises a RecordError
(what it staged is not in the receipt, or it rolls back to a savepoint), or write
idempotently.

**Exactly once, with the batch.** A task's dead letters are staged in
``<dead_letter_path>/_quixsinks/staging`` under its attempt id and reported in its
receipt; the driver publishes them in the micro-batch's commit, *before* the sink's own
commit records the batch in its ledger, through the file commit protocol
(:class:`~quixsinks.core.publish.FilePublisher`: a create-only marker per batch, the
winning attempt's files moved to names fixed by sink id and batch id). A replayed or
retried batch that refuses the same rows therefore never loses or duplicates a dead
letter.

**A replay that refuses other rows.** A refusal that depends on the destination's state
(a key whose type changed, a unique violation against rows written since) can differ
between a batch's first commit and its replay. When the first commit published its dead
letters and then failed, the replay's data is what the sink commits, and a row only the
replay refuses would be in neither place: so the replay publishes its dead letters whose
rows the published ones lack as a *supplement* (:func:`publish_dead_letters`), before
the sink's commit, exactly once (its own marker, under the sink id ``<sink id>.r<n>``).
Where the first commit's data did land, such a row may then be in both places: never in
neither.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import hashlib
import io
import json
import logging
import math
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Literal

import pyarrow as pa

from .batch import WriteContext
from .errors import CommitError, OptionError, RecordError
from .publish import FilePublisher, StagedFile, StagingArea
from .records import json_object_errors
from .secrets import scrub

if TYPE_CHECKING:
    from .batch import SinkBatch
    from .sink import CommitContext, CommonOptions, Receipt

__all__ = [
    "DEAD_LETTER_STATE",
    "OnError",
    "Refusals",
    "abort_dead_letters",
    "dead_letter_files",
    "dead_letter_staging",
    "describe_row",
    "publish_dead_letters",
    "refusals_of",
    "row_object",
    "write_isolating",
]

OnError = Literal["fail", "skip", "dead_letter"]

#: The hidden folder under ``dead_letter_path`` holding staging and the publish ledger.
DEAD_LETTER_STATE = "_quixsinks"
#: Dead letters kept in memory per task before they spill to a temporary file.
_SPOOL_BYTES = 8 * 1024 * 1024
#: The longest error message kept in a dead letter.
_MAX_MESSAGE = 2000
#: Supplements a batch's dead letters may get (one per replay that refused other rows).
MAX_SUPPLEMENTS = 100

logger = logging.getLogger("quixsinks.deadletters")


def describe_row(batch: SinkBatch, row: int) -> str:
    """Words that find a row again: its Kafka topic, partition and offset when the batch
    has them, else its key, else its position in the task's partition."""
    records = batch.records
    table = batch.table
    if records.topic and records.partition and records.offset:
        topic = table.column(records.topic)[row].as_py()
        partition = table.column(records.partition)[row].as_py()
        offset = table.column(records.offset)[row].as_py()
        return f"Kafka topic {topic!r} partition {partition} offset {offset}"
    if records.key:
        key = table.column(records.key)[row].as_py()
        if key is not None:
            if isinstance(key, bytes):
                key = key.decode("utf-8", "backslashreplace")
            text = str(key)
            text = text if len(text) <= 80 else text[:77] + "..."
            return f"the row with key {text!r} (partition {batch.partition_id})"
    return f"row {row} of the batch's slice in partition {batch.partition_id}"


def _json_safe(value: Any) -> Any:
    """A JSON-serialisable form of an Arrow value (see docs/errors.md, "Dead letters")."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        # Arrow maps come as lists of (key, value) tuples
        return [_json_safe(v) for v in value]
    return str(value)


def row_object(table: pa.Table, row: int) -> dict[str, Any]:
    """One row of ``table`` as a JSON-ready dict: binary as UTF-8 text when it is valid
    UTF-8, else ``{"base64": ...}``; times in ISO 8601; non-finite floats as text."""
    return {name: _json_safe(table.column(name)[row].as_py()) for name in table.column_names}


class Refusals:
    """One task's refused rows: counts them, and spools the dead letters of the task.

    Args:
        sink: the sink's format name (written into each dead letter).
        on_error: the ``on_error`` option.
        secrets: the sink's secret values, taken out of the error messages dead letters keep.
    """

    def __init__(
        self, sink: str, on_error: OnError = "fail", *, secrets: Sequence[str] = ()
    ) -> None:
        self.sink = sink
        self.on_error = on_error
        self.secrets = tuple(secrets)
        self.count = 0
        self._spool: IO[bytes] | None = None

    def refuse(self, batch: SinkBatch, row: int, error: BaseException) -> None:
        """Refuse row ``row`` of ``batch`` (an index into ``batch.table``) for ``error``.

        ``fail``: raises a RecordError naming the row. ``skip``: counts it.
        ``dead_letter``: counts it and keeps its dead letter for the task's receipt.
        """
        message = str(error) or type(error).__name__
        if self.on_error == "fail":
            where = f"{self.sink}: " if self.sink else ""
            raise RecordError(
                f"{where}{describe_row(batch, row)} was refused: {message} "
                "(on_error=skip drops such rows, on_error=dead_letter writes them to "
                "dead_letter_path)",
                row=row,
                column=getattr(error, "column", None),
            ) from error
        self.count += 1
        if self.on_error == "skip":
            batch.count("skipped")
            return
        batch.count("dead_lettered")
        message = scrub(message, self.secrets)  # an error may quote a connection string
        context = batch.context
        letter = {
            "sink": self.sink,
            "sink_id": context.sink_id,
            "batch_id": context.batch_id,
            "error": {"type": type(error).__name__, "message": message[:_MAX_MESSAGE]},
            "row": row_object(batch.table, row),
        }
        spool = self._spool
        if spool is None:
            spool = self._spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115
        line = json.dumps(letter, ensure_ascii=False, allow_nan=False)
        spool.write(line.encode("utf-8") + b"\n")

    def mark(self) -> tuple[int, int]:
        """Where the refusals stand now, for :meth:`rollback`."""
        return self.count, self._spool.tell() if self._spool is not None else 0

    def rollback(self, mark: tuple[int, int]) -> None:
        """Forget the refusals made since ``mark``: a write that refused rows and then
        failed as a whole is written again in halves, which refuse those rows again."""
        self.count, position = mark
        if self._spool is not None:
            self._spool.seek(position)
            self._spool.truncate()

    def stage(self, staging: StagingArea, context: WriteContext) -> list[StagedFile]:
        """Stage the task's dead letters (one JSON Lines file); [] when there are none."""
        spool = self._spool
        if spool is None or spool.seek(0, io.SEEK_END) == 0:  # none, or all rolled back
            self.close()
            return []
        spool.seek(0)

        def produce(out: BinaryIO) -> None:
            while chunk := spool.read(1024 * 1024):
                out.write(chunk)

        name = dead_letter_name(context.name_prefix, context.batch_id, context.partition_id)
        staged = staging.stage(context, name, produce, final_key=name, rows=self.count)
        self.close()
        return [staged]

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


def refusals_of(batch: SinkBatch) -> Refusals:
    """The refusals of ``batch``'s task (a fail-mode one when it has no task: a direct
    ``write`` outside Spark)."""
    return batch.task.refusals if batch.task is not None else Refusals("")


def dead_letter_name(prefix: str, batch_id: int, partition_id: int) -> str:
    """The published name of one task's dead letters: fixed by sink id (and query), batch
    id and partition; the batch's marker decides which attempt's files are published."""
    return f"{prefix}-{batch_id:010d}-{partition_id:05d}.jsonl"


def write_isolating(
    batch: SinkBatch, write: Callable[[SinkBatch], Any], refusals: Refusals
) -> list[Any]:
    """``write(batch)``; when it raises a RecordError, write the two halves again, down to
    the single rows that fail, which ``refusals`` refuses. Returns what the successful writes
    returned (None left out), in row order."""
    results: list[Any] = []
    pending = [batch]
    while pending:
        piece = pending.pop()
        counted = dict(piece.counters)
        mark = refusals.mark()
        try:
            staged = write(piece)
        except RecordError as exc:
            # what the failed write counted or refused did not happen: its halves do it again
            piece.counters.clear()
            piece.counters.update(counted)
            refusals.rollback(mark)
            rows = piece.num_rows
            if rows <= 1:
                refusals.refuse(piece, 0, exc)
                continue
            half = rows // 2
            pending.append(_reparsed(piece.slice(half, rows - half)))
            pending.append(_reparsed(piece.slice(0, half)))  # popped first: row order kept
            continue
        if staged is not None:
            results.append(staged)
    return results


def _reparsed(piece: SinkBatch) -> SinkBatch:
    """A piece whose JSON values are typed from its own rows, not from the whole batch's:
    a bad row's type (``"six"`` among integers) must not make its good neighbours fail."""
    if piece.records.value_json and piece._values is not None:
        return dataclasses.replace(piece, _values=None)
    return piece


def without_unparseable(batch: SinkBatch, *, typed: bool = True) -> SinkBatch | None:
    """``batch`` less the rows whose JSON value cannot be parsed, which are refused (the
    commonest poison, found before the sink writes anything, so that a file-like sink
    still writes one file); None when no row is left. Parsing is bisected like writes.

    ``typed=False`` (:meth:`Sink.types_json_values`): the sink writes the values as their
    text, so only rows that are not a JSON object are refused; a key whose type differs
    between messages is kept."""
    if not batch.records.value_json:
        return batch
    try:
        batch.values()
        return batch
    except RecordError:
        pass
    if not typed:
        name = batch.records.values[0]
        errors = json_object_errors(batch.column(name), name)
        for row, error in errors.items():
            batch.refuse(row, error)
        if len(errors) == batch.num_rows:
            return None
        return batch.without(errors) if errors else batch
    good = write_isolating(batch, _parsed, refusals_of(batch))
    if not good:
        return None
    table = pa.concat_tables([piece.table for piece in good])
    return dataclasses.replace(batch, table=table, _values=None)


def _parsed(piece: SinkBatch) -> SinkBatch:
    piece.values()
    return piece


# ---------------------------------------------------------------------- driver side


def check_dead_letter_options(options: CommonOptions) -> None:
    """OptionError unless ``on_error`` and ``dead_letter_path`` go together."""
    if options.on_error == "dead_letter" and not options.dead_letter_path:
        raise OptionError(
            "option 'on_error' is 'dead_letter' but 'dead_letter_path' is not set: give the "
            "directory for refused rows (an absolute path, s3://, abfs[s]://, az:// or gs://)",
            option="dead_letter_path",
            value=None,
        )
    if options.dead_letter_path and options.on_error != "dead_letter":
        raise OptionError(
            f"option 'dead_letter_path' is set but 'on_error' is {options.on_error!r}: "
            "refused rows go to dead_letter_path only with on_error=dead_letter",
            option="on_error",
            value=options.on_error,
            allowed=("dead_letter",),
        )


def dead_letter_staging(options: CommonOptions) -> StagingArea | None:
    """The staging area under ``dead_letter_path``, or None without dead letters.

    Object-store credentials come from the sink's own storage options where it has them
    (``file``, ``tsdatalake``), else from each client's default chain."""
    if options.on_error != "dead_letter" or not options.dead_letter_path:
        return None
    from .destinations import StorageOptions, destination_for

    storage = options if isinstance(options, StorageOptions) else None
    destination = destination_for(options.dead_letter_path, storage, option_name="dead_letter_path")
    return StagingArea(
        destination,
        DEAD_LETTER_STATE,
        keep_batches=getattr(options, "ledger_keep_batches", 100),
        staging_max_age_hours=getattr(options, "staging_max_age_hours", 24.0),
    )


def dead_letter_files(receipts: Sequence[Receipt[Any]]) -> list[StagedFile]:
    ordered = sorted(receipts, key=lambda r: r.partition_id)
    return [f for receipt in ordered for f in receipt.dead_letters]


def publish_dead_letters(
    options: CommonOptions, context: CommitContext, receipts: Sequence[Receipt[Any]]
) -> int:
    """Publish the micro-batch's dead letters (driver, before the sink's commit); returns
    how many files were published (0: nothing to publish).

    A replay whose dead letters hold rows the published ones lack (see the module
    docstring) publishes those as a supplement."""
    files = dead_letter_files(receipts)
    staging = dead_letter_staging(options)
    if not files or staging is None:
        return 0
    takeover = getattr(options, "takeover_query_id", None)
    missed, supplement = (
        _not_yet_published(staging, context, files) if context.ledgered else ([], 0)
    )
    result = FilePublisher(staging, takeover).publish(
        context.sink_id,
        context.batch_id,
        files,
        query_id=context.query_id,
        keep_ledger=context.ledgered,
    )
    if missed:
        return result.files + _publish_supplement(staging, context, missed, supplement, takeover)
    return result.files


def _row_key(line: bytes) -> bytes:
    """What identifies a dead letter's row (not its error: a replay may word it otherwise)."""
    row = json.loads(line).get("row")
    return hashlib.blake2b(json.dumps(row, sort_keys=True).encode(), digest_size=16).digest()


def _supplement_id(sink_id: str, n: int) -> str:
    """The sink id of a batch's ``n``-th supplement (within the 200 characters of a sink
    id: a long one is shortened and told apart by its digest)."""
    suffix = f".r{n}"
    if len(sink_id) + len(suffix) > 200:
        digest = hashlib.blake2b(sink_id.encode(), digest_size=8).hexdigest()
        sink_id = f"{sink_id[:150]}-{digest}"
    return sink_id + suffix


def _not_yet_published(
    staging: StagingArea, context: CommitContext, files: Sequence[StagedFile]
) -> tuple[list[bytes], int]:
    """The lines of ``files`` (this commit's staged dead letters) whose rows the batch's
    published dead letters (its marker's files, and its supplements') lack, and the number
    of the batch's next supplement; no lines when the batch has no marker yet (nothing
    published: the usual case)."""
    published: Counter[bytes] = Counter()
    sink_id = context.sink_id
    ours = {f.staging_key for f in files}
    n = 0
    while n <= MAX_SUPPLEMENTS:
        marker_sink = sink_id if n == 0 else _supplement_id(sink_id, n)
        try:
            manifest = staging.read_marker(staging.marker_key(marker_sink, context.batch_id))
        except CommitError:
            return [], n  # being written by another committer: its publish decides
        if manifest is None:
            if n == 0:
                return [], n
            break
        n += 1
        for src, dst in manifest.get("files", []):
            if src in ours:
                return [], n  # this very commit published them (a retried commit call)
            key = dst if staging.destination.exists(dst) else src
            for line in staging.destination.read_bytes(key).splitlines():
                if line.strip():
                    published[_row_key(line)] += 1
    missed: list[bytes] = []
    for staged in files:
        for line in staging.destination.read_bytes(staged.staging_key).splitlines():
            if not line.strip():
                continue
            key = _row_key(line)
            if published[key] > 0:
                published[key] -= 1
            else:
                missed.append(line)
    return missed, n


def _publish_supplement(
    staging: StagingArea,
    context: CommitContext,
    lines: list[bytes],
    n: int,
    takeover: str | None,
) -> int:
    """Publish ``lines`` as the batch's ``n``-th supplement (one file, its own marker)."""
    if n > MAX_SUPPLEMENTS:
        raise CommitError(
            f"batch {context.batch_id} of sink id {context.sink_id} has been replayed with "
            f"other dead letters {MAX_SUPPLEMENTS} times; its refused rows cannot be "
            "published once more"
        )
    sink_id = _supplement_id(context.sink_id, n)
    task = WriteContext(
        sink_id, context.batch_id, 0, uuid.uuid4().hex, context.streaming, context.query_id
    )
    name = dead_letter_name(task.name_prefix, context.batch_id, 0)
    staged = staging.stage(task, name, b"\n".join(lines) + b"\n", final_key=name, rows=len(lines))
    logger.warning(
        "batch %d of sink id %s: its replay refused %d row(s) its first commit did not; "
        "they are published in %s",
        context.batch_id,
        context.sink_id,
        len(lines),
        name,
    )
    result = FilePublisher(staging, takeover).publish(
        sink_id, context.batch_id, [staged], query_id=context.query_id, keep_ledger=True
    )
    return result.files


def abort_dead_letters(
    options: CommonOptions, context: CommitContext, receipts: Sequence[Receipt[Any]]
) -> None:
    """Delete the staged dead letters of a failed batch (unless the batch was committed)."""
    files = dead_letter_files(receipts)
    staging = dead_letter_staging(options)
    if not files or staging is None:
        return
    FilePublisher(staging, getattr(options, "takeover_query_id", None)).abort(
        context.sink_id, context.batch_id, files, ledgered=context.ledgered
    )
