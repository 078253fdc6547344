"""The Kinesis sink: PutRecords with per-record resends; at-least-once, never a silent loss.

Executor: each SinkBatch becomes PutRecords entries: the data (a JSON object of the value
columns built in Arrow, a column as it is, or a value serializer's bytes), the partition
key (the key column as text, another column, or a key serializer's text) and an optional
explicit hash key. Every record gets a deterministic dedupe id (``core.delivery.DedupeIds``)
that goes into the JSON object or before the data, so that a consumer can drop the
duplicates an at-least-once resend makes. Each record is checked against Kinesis's limits
first (``requests``): an offender is a RecordError naming its row, or is skipped and
counted. The entries go out through ``core.delivery.deliver``: requests of at most 500
records and 5 MiB, ``max_inflight`` at once; the entries answered with an ``ErrorCode``
(throttling, internal failure) are resent alone, in their order, with the RetryPolicy's
backoff; a whole call that is throttled, fails with 5xx or loses its connection is resent
whole. When the policy's deadline passes with records undelivered the task fails with a
DeliveryError that counts them. With ``ordered`` a request holds at most one record per
partition key and a key's next record goes only once the one before has landed.

Driver: nothing to commit. Kinesis offers no idempotent put, so a replayed micro-batch (or
a call whose answer was lost) puts its records again, with the same dedupe ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import first_null
from quixsinks.core.batch import SinkBatch
from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.delivery import DedupeIds, deliver, kafka_coordinates
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    MissingDependencyError,
    OptionError,
    QuixSinksError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
    timed_out,
)
from quixsinks.core.formats import csv_keys, json_objects
from quixsinks.core.options import load_callable
from quixsinks.core.secrets import scrub as scrub_secrets
from quixsinks.core.sink import Sink, Task

from .options import KinesisOptions
from .requests import MAX_REQUEST_BYTES, entry_size, find_problems, hash_key_text

__all__ = ["KinesisSink", "KinesisStreamNotFoundError", "translate"]

# boto3 clients per process (Python workers are reused between tasks), closed at exit
_CLIENTS: ClientCache[Any] = ClientCache("kinesis clients", lambda c: c.close())

#: per-record ErrorCodes that mean "not now": the record is resent
RETRYABLE_ENTRY_CODES = frozenset(
    {"ProvisionedThroughputExceededException", "InternalFailure", "KMSThrottlingException"}
)
#: whole-call error codes that mean "not now": the whole request is resent
RETRYABLE_CALL_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "KMSThrottlingException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "InternalFailure",
        "InternalFailureException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
_DENIED_CODES = frozenset(
    {
        "AccessDeniedException",
        "AccessDenied",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "MissingAuthenticationToken",
        "KMSAccessDeniedException",
    }
)
#: the placement prefix: 32 hex characters and a space
PREFIX_BYTES = 33


class KinesisStreamNotFoundError(DestinationNotFoundError):
    """The Kinesis stream does not exist in this region / endpoint (Quix's name)."""


def import_client() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise MissingDependencyError("boto3", "kinesis") from exc
    return boto3


def translate(
    exc: Exception,
    where: str,
    *,
    stream: str,
    secrets: Sequence[str] = (),
    timeout: float | None = None,
) -> Exception:
    """The quixsinks error for a failed Kinesis call (botocore's error, or ours unchanged);
    ``timeout``: ``request_timeout_seconds``, named when the call timed out."""
    if isinstance(exc, QuixSinksError):
        return exc
    try:
        import botocore.exceptions as bex
    except ImportError:  # pragma: no cover - boto3 brings botocore
        return exc

    def scrub(text: str) -> str:
        return scrub_secrets(text, secrets)

    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        code = str(error.get("Code") or "")
        status = meta.get("HTTPStatusCode")
        detail = scrub(str(error.get("Message") or "")) or f"HTTP {status}"
        text = f"{where}: {code or f'HTTP {status}'}: {detail}"
        if code == "ResourceNotFoundException":
            return KinesisStreamNotFoundError(
                f"{where}: the stream {stream!r} does not exist in this region / endpoint; "
                f"create it first ({code}: {detail})",
                location=stream,
            )
        if code in _DENIED_CODES or status == 403:
            return DestinationAccessDeniedError(
                f"{text}; check aws_access_key_id, aws_secret_access_key, aws_session_token and "
                f"region_name, and that they may put records into stream {stream!r}",
                location=stream,
            )
        if code in RETRYABLE_CALL_CODES or status in (429, 500, 502, 503, 504):
            retry_after = _retry_after(meta.get("HTTPHeaders", {}).get("retry-after"))
            if retry_after is not None:
                return SinkBackpressureError(retry_after, text)
            return RetryableError(text)
        return DestinationError(text, location=stream)
    if isinstance(exc, (bex.NoCredentialsError, bex.PartialCredentialsError)):
        return DestinationAccessDeniedError(
            f"{where}: no usable AWS credentials ({type(exc).__name__}); set aws_access_key_id "
            "and aws_secret_access_key, or configure boto3's credential chain",
            location=stream,
        )
    if isinstance(exc, bex.NoRegionError):
        return OptionError(
            f"{where}: no AWS region; set 'region_name' (or AWS_REGION)", option="region_name"
        )
    if isinstance(exc, (bex.ConnectTimeoutError, bex.ReadTimeoutError)):
        # no answer in time (the records may have landed: the resend has the same dedupe ids)
        limit = "timed out" if timeout is None else timed_out(timeout, "request_timeout_seconds")
        return RetryableError(f"{where}: {limit}: {scrub(str(exc))}")
    if isinstance(exc, (bex.ConnectionError, bex.HTTPClientError)):
        # refused, timed out or dropped connections (a dropped answer too: the records may
        # have landed; the resend duplicates them, with the same dedupe ids)
        return RetryableError(f"{where}: {scrub(str(exc))}")
    if isinstance(exc, bex.BotoCoreError):
        return DestinationError(f"{where}: {scrub(str(exc))}", location=stream)
    return exc


def _retry_after(value: Any) -> float | None:
    try:
        return max(0.0, float(value)) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


class KinesisSink(Sink[KinesisOptions, None]):
    """Puts records into a Kinesis data stream; at-least-once with deterministic dedupe ids.
    See docs/sinks/kinesis.md."""

    name: ClassVar[str] = "kinesis"
    options_class = KinesisOptions
    guarantee = "at-least-once"
    extra = "kinesis"
    retries_requests = True  # deliver() resends per record under the task's RetryPolicy

    def __init__(self, options: KinesisOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.key_column: str | None = None
        self.kafka_coordinates: tuple[str, str, str] | None = None

    @classmethod
    def check_dependencies(cls) -> None:
        import_client()

    def __repr__(self) -> str:
        where = f", endpoint_url={self.options.endpoint_url!r}" if self.options.endpoint_url else ""
        return (
            f"KinesisSink(stream_name={self.options.stream_name!r}, "
            f"region_name={self.options.region_name!r}{where})"
        )

    @property
    def _where(self) -> str:
        return f"kinesis stream {self.options.stream_name!r}"

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        records = self.records
        assert records is not None
        opts = self.options
        if opts.data_column is not None:
            t = self.column_type(schema, opts.data_column, "data_column")
            if not (
                pa.types.is_binary(t)
                or pa.types.is_string(t)
                or pa.types.is_large_binary(t)
                or pa.types.is_large_string(t)
            ):
                raise OptionError(
                    f"kinesis: 'data_column' {opts.data_column!r} has type {t}; it must hold "
                    "bytes or text (leave it unset to send the value columns as JSON)",
                    option="data_column",
                    value=opts.data_column,
                )
        if opts.partition_key_column is not None:
            t = self.column_type(schema, opts.partition_key_column, "partition_key_column")
            if pa.types.is_nested(t):
                raise OptionError(
                    f"kinesis: 'partition_key_column' {opts.partition_key_column!r} has type "
                    f"{t}; use a column of text, bytes or numbers",
                    option="partition_key_column",
                    value=opts.partition_key_column,
                )
            self.key_column = opts.partition_key_column
        else:
            self.key_column = records.key
        if self.key_column is None and opts.null_partition_keys == "error":
            raise OptionError(
                "kinesis: no partition key; set 'partition_key_column' (the DataFrame has no "
                "`key` column), or null_partition_keys=dedupe_id to spread records over the "
                "shards by their dedupe id",
                option="partition_key_column",
            )
        if opts.explicit_hash_key_column is not None:
            t = self.column_type(schema, opts.explicit_hash_key_column, "explicit_hash_key_column")
            if not (
                pa.types.is_string(t)
                or pa.types.is_large_string(t)
                or pa.types.is_integer(t)
                or (pa.types.is_decimal(t) and t.scale == 0)
            ):
                raise OptionError(
                    f"kinesis: 'explicit_hash_key_column' {opts.explicit_hash_key_column!r} has "
                    f"type {t}; it must hold decimal text or integers (0..2^128-1)",
                    option="explicit_hash_key_column",
                    value=opts.explicit_hash_key_column,
                )
        for path, option_name in (
            (opts.key_serializer, "key_serializer"),
            (opts.value_serializer, "value_serializer"),
        ):
            if path is not None:
                load_callable(path, option_name=option_name)
        topic, partition, offset = records.topic, records.partition, records.offset
        self.kafka_coordinates = (
            (topic, partition, offset)
            if topic is not None and partition is not None and offset is not None
            else None
        )

    def preflight(self) -> None:
        """DescribeStreamSummary: a missing stream, refused credentials or an unreachable
        endpoint fail here, before any task runs."""
        opts = self.options
        what = f"{self._where}: DescribeStreamSummary"
        try:
            summary = opts.retry_policy().call(
                lambda: self._call(
                    what,
                    lambda client: client.describe_stream_summary(StreamName=opts.stream_name),
                ),
                what=what,
            )
        except RetryableError as exc:
            raise DestinationError(
                f"{exc.message}; is 'endpoint_url' / 'region_name' right?", location=self._where
            ) from None
        status = summary.get("StreamDescriptionSummary", {}).get("StreamStatus")
        if status not in (None, "ACTIVE", "UPDATING"):
            raise DestinationError(
                f"{self._where} is {status}; records can be put only into an ACTIVE or UPDATING "
                "stream",
                location=opts.stream_name,
            )

    # ------------------------------------------------------------------ client

    def _client(self) -> Any:
        return _CLIENTS.get(client_key(self.options), self._new_client)

    def _new_client(self) -> Any:
        boto3 = import_client()
        from botocore.config import Config

        opts = self.options
        session = boto3.session.Session(
            aws_access_key_id=opts.aws_access_key_id,
            aws_secret_access_key=opts.aws_secret_access_key,
            aws_session_token=opts.aws_session_token,
            region_name=opts.region_name,
        )
        config = Config(
            connect_timeout=min(10.0, opts.request_timeout_seconds),
            read_timeout=opts.request_timeout_seconds,
            # one attempt per call: the sink's RetryPolicy resends (and counts) every retry
            retries={"total_max_attempts": 1},
            max_pool_connections=max(10, 2 * opts.max_inflight),
            # every record is checked against Kinesis's limits before it is sent (requests.py);
            # botocore's per-record validation of the same would cost CPU per record again
            parameter_validation=False,
        )
        return session.client("kinesis", endpoint_url=opts.endpoint_url, config=config)

    def _call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        opts = self.options
        try:
            return fn(self._client())
        except Exception as exc:
            error = translate(
                exc,
                what,
                stream=opts.stream_name,
                secrets=opts.secret_values(),
                timeout=opts.request_timeout_seconds,
            )
            if error is exc:
                raise
            raise error from None

    # ------------------------------------------------------------------ executor

    def setup(self, task: Task) -> None:
        ctx = task.context
        task.state["dedupe"] = DedupeIds(ctx.sink_id, ctx.batch_id, ctx.partition_id)
        task.state["row0"] = 0

    def write(self, batch: SinkBatch) -> None:
        task = batch.task
        if task is None:  # called directly (tests): a task of its own
            task = Task(batch.context, self.options.retry_policy())
            self.setup(task)
        row0 = int(task.state.get("row0", 0))
        task.state["row0"] = row0 + batch.num_rows
        if batch.num_rows == 0:
            return
        entries = self.entries(batch, task.state["dedupe"], row0)
        if not entries:
            return
        opts = self.options
        what = f"{self._where}: PutRecords"

        def send(chunk: Sequence[dict[str, Any]]) -> list[int]:
            answer = self._call(
                what,
                lambda client: client.put_records(StreamName=opts.stream_name, Records=chunk),
            )
            return self._refused(answer, len(chunk))

        for layer in _layers(entries) if opts.ordered else [entries]:
            deliver(
                layer,
                send,
                task.policy,
                what=f"{what} (batch {batch.batch_id}, partition {batch.partition_id})",
                chunk_size=opts.records_per_request,
                max_inflight=opts.max_inflight,
                stats=task.stats,
                size_of=entry_size,
                max_chunk_size=MAX_REQUEST_BYTES,
            )
        batch.count("records", len(entries))

    def _refused(self, answer: dict[str, Any], sent: int) -> list[int]:
        """Indices of the entries to resend; a permanent per-record error fails the task."""
        results = answer.get("Records") or []
        if len(results) != sent:
            raise RetryableError(
                f"{self._where}: PutRecords answered {len(results)} results for {sent} records"
            )
        if not answer.get("FailedRecordCount"):
            return []
        refused: list[int] = []
        for index, result in enumerate(results):
            code = result.get("ErrorCode")
            if not code:
                continue
            if code not in RETRYABLE_ENTRY_CODES and code.startswith("KMS"):
                raise DestinationError(
                    f"{self._where}: PutRecords refused a record with {code}: "
                    f"{result.get('ErrorMessage', '')} (check the stream's KMS key and its "
                    "permissions)",
                    location=self.options.stream_name,
                )
            refused.append(index)  # throttled, internal failure, or unknown: resend
        return refused

    # ------------------------------------------------------------------ entries

    def entries(self, batch: SinkBatch, dedupe: DedupeIds, row0: int = 0) -> list[dict[str, Any]]:
        """The PutRecords entries of a batch: limits checked, dedupe ids placed."""
        opts = self.options
        data = self._data(batch)
        keys = self._keys(batch)
        hash_keys = (
            hash_key_text(batch.column(opts.explicit_hash_key_column))
            if opts.explicit_hash_key_column
            else None
        )

        # the dedupe id covers the record's content (data, key, hash key); for Kafka input
        # it is keyed by the record's topic, partition and offset, else by its position
        parts: list[Any] = [data, b"\x00", pc.cast(pc.fill_null(keys, ""), pa.binary())]
        if hash_keys is not None:
            parts += [b"\x00", pc.cast(pc.fill_null(hash_keys, ""), pa.binary())]
        content = pc.binary_join_element_wise(*parts, b"")
        coordinates = kafka_coordinates(batch) if self.kafka_coordinates else None
        ids = pa.array(dedupe.ids(content.to_pylist(), coordinates), pa.string())

        null_row = first_null(keys)
        if null_row is not None:
            if opts.null_partition_keys == "error":
                raise RecordError(
                    f"kinesis: row {row0 + null_row} of batch {batch.batch_id} partition "
                    f"{batch.partition_id} has a null partition key (column "
                    f"{self.key_column!r}); set null_partition_keys=dedupe_id to use the "
                    "record's dedupe id as its partition key",
                    column=self.key_column,
                    row=row0 + null_row,
                )
            keys = pc.coalesce(keys, ids)

        placement = opts.dedupe_placement
        if placement == "prefix":
            data = pc.binary_join_element_wise(pc.cast(ids, pa.binary()), b" ", data, b"")
        elif placement == "field":
            data = _with_field(data, ids, opts.dedupe_id_field)

        problem = find_problems(data, keys, hash_keys)
        keep = None
        if problem is not None:
            if opts.invalid_records == "error":
                key = keys[problem.row].as_py()
                shown = key if len(key) <= 60 else key[:60] + "..."
                raise RecordError(
                    f"kinesis: row {row0 + problem.row} of batch {batch.batch_id} partition "
                    f"{batch.partition_id} (partition key {shown!r}) cannot be put: "
                    f"{problem.reason}. {problem.count} record(s) of this batch break a limit; "
                    "set invalid_records=skip to skip and count them",
                    row=row0 + problem.row,
                )
            self.logger.warning(
                "%s: skipping %d record(s) Kinesis would refuse, first row %d: %s",
                self._where,
                problem.count,
                row0 + problem.row,
                problem.reason,
            )
            batch.count("skipped_invalid", problem.count)
            keep = pc.invert(problem.mask)
            data, keys = data.filter(keep), keys.filter(keep)
            hash_keys = hash_keys.filter(keep) if hash_keys is not None else None

        out: list[dict[str, Any]] = [
            {"Data": d, "PartitionKey": k}
            for d, k in zip(data.to_pylist(), keys.to_pylist(), strict=True)
        ]
        if hash_keys is not None:
            for entry, h in zip(out, hash_keys.to_pylist(), strict=True):
                if h is not None:
                    entry["ExplicitHashKey"] = h
        return out

    def _data(self, batch: SinkBatch) -> pa.Array:
        """Each record's data, binary, no nulls."""
        opts = self.options
        if opts.data_column is not None:
            column = batch.column(opts.data_column)
            row = first_null(column)
            if row is not None:
                raise RecordError(
                    f"kinesis: 'data_column' {opts.data_column!r} is null in row {row} of batch "
                    f"{batch.batch_id} partition {batch.partition_id}; a record needs data",
                    column=opts.data_column,
                    row=row,
                )
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            return pc.cast(pc.cast(column, pa.large_binary()), pa.binary())
        if opts.value_serializer is not None:
            fn = load_callable(opts.value_serializer, option_name="value_serializer")
            return _as_bytes([fn(v) for v in batch.values().to_pylist()], "value_serializer")
        values = batch.values()
        if values.num_columns == 0:
            return pa.array([b"{}"] * batch.num_rows, pa.binary())
        return pc.cast(json_objects(values), pa.binary())

    def _keys(self, batch: SinkBatch) -> pa.Array:
        """Each record's partition key as text (null where the row has none)."""
        opts = self.options
        if self.key_column is None:
            return pa.nulls(batch.num_rows, pa.string())
        column = batch.column(self.key_column)
        if opts.key_serializer is not None:
            fn = load_callable(opts.key_serializer, option_name="key_serializer")
            texts = []
            for key in column.to_pylist():
                text = None if key is None else fn(key)
                if text is not None and not isinstance(text, str):
                    raise RecordError(
                        f"kinesis: 'key_serializer' returned {type(text).__name__}; it must "
                        "return str (a partition key is text)"
                    )
                texts.append(text)
            return pa.array(texts, pa.string())
        return csv_keys(column)


def _with_field(data: pa.Array, ids: pa.Array, name: str) -> pa.Array:
    """``{"<name>":"<id>",...rest}`` from each JSON object ``{...rest}``."""
    head = ("{" + json.dumps(name, ensure_ascii=False) + ':"').encode()
    # after the "{" (the sink's own JSON: valid UTF-8)
    rest = pc.cast(pc.utf8_slice_codeunits(pc.cast(data, pa.string()), 1), pa.binary())
    empty = pc.equal(rest, pa.scalar(b"}", pa.binary()))
    tail = pc.if_else(empty, rest, pc.binary_join_element_wise(b",", rest, b""))
    return pc.binary_join_element_wise(head, pc.cast(ids, pa.binary()), b'"', tail, b"")


def _as_bytes(values: list[Any], option: str) -> pa.Array:
    out: list[bytes] = []
    for value in values:
        if isinstance(value, bytes):
            out.append(value)
        elif isinstance(value, str):
            out.append(value.encode())
        else:
            raise RecordError(
                f"kinesis: {option!r} returned {type(value).__name__}; it must return str or bytes"
            )
    return pa.array(out, pa.binary())


def _layers(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Entries split so that each layer holds at most one record per partition key, and a
    key's n-th record is in layer n: a layer goes once the one before has fully landed."""
    seen: dict[str, int] = {}
    layers: list[list[dict[str, Any]]] = []
    for entry in entries:
        depth = seen.get(entry["PartitionKey"], 0)
        seen[entry["PartitionKey"]] = depth + 1
        if depth == len(layers):
            layers.append([])
        layers[depth].append(entry)
    return layers
