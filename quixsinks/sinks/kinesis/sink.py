"""The Kinesis sink: PutRecords with per-record resends; at-least-once, never a silent loss.

Executor: each SinkBatch becomes PutRecords entries (``wire.encode``: data, partition key,
optional explicit hash key, and a deterministic dedupe id a consumer can drop the duplicates
of an at-least-once resend by; each record checked against Kinesis's limits first: an
offender is refused by its row, as ``on_error`` says, or skipped and counted with
``invalid_records=skip``). The entries go out
through ``core.delivery.deliver``: requests of at most 500 records and 5 MiB,
``max_inflight`` at once; the entries answered with an ``ErrorCode`` (throttling, internal
failure) are resent alone, in their order, with the RetryPolicy's backoff; a whole call
that is throttled, fails with 5xx or loses its connection is resent whole (``client``: the
one error boundary). When the policy's deadline passes with records undelivered the task
fails with a DeliveryError that counts them. With ``ordered`` a request holds at most one
record per partition key and a key's next record goes only once the one before has landed.

Driver: nothing to commit. Kinesis offers no idempotent put, so a replayed micro-batch (or
a call whose answer was lost) puts its records again, with the same dedupe ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pyarrow as pa

from quixsinks.core.batch import SinkBatch
from quixsinks.core.delivery import DedupeIds, deliver
from quixsinks.core.errors import DestinationError, OptionError, RetryableError
from quixsinks.core.options import load_callable
from quixsinks.core.sink import Sink, Task

from . import client
from .options import KinesisOptions
from .wire import MAX_REQUEST_BYTES, encode, entry_size, layers

__all__ = ["KinesisSink"]


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
        client.check_dependencies()

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
                lambda: client.call(
                    opts,
                    what,
                    lambda kinesis: kinesis.describe_stream_summary(StreamName=opts.stream_name),
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

    # ------------------------------------------------------------------ executor

    def setup(self, task: Task) -> None:
        ctx = task.context
        task.state["dedupe"] = DedupeIds(ctx.sink_id, ctx.batch_id, ctx.partition_id)
        task.state["row0"] = 0

    def types_json_values(self) -> bool:
        """The data is the value's JSON text (or a column, or a serializer's bytes over
        each message's own object): nothing reads typed value columns."""
        return False

    def write(self, batch: SinkBatch) -> None:
        task = self.task_of(batch)
        row0 = int(task.state.get("row0", 0))
        if batch.num_rows == 0:
            return
        entries = self.entries(batch, task.state["dedupe"], row0)
        task.state["row0"] = row0 + batch.num_rows
        if not entries:
            return
        opts = self.options
        what = f"{self._where}: PutRecords"

        def send(chunk: Sequence[dict[str, Any]]) -> list[int]:
            answer = client.put_records(opts, what, chunk)
            return client.refused(answer, len(chunk), where=self._where, stream=opts.stream_name)

        for layer in layers(entries) if opts.ordered else [entries]:
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

    # ------------------------------------------------------------------ entries

    def entries(self, batch: SinkBatch, dedupe: DedupeIds, row0: int = 0) -> list[dict[str, Any]]:
        """The PutRecords entries of a batch: limits checked, dedupe ids placed. A row
        Kinesis would refuse is refused (``on_error``) before anything is sent; with
        ``invalid_records=skip`` one breaking a limit is skipped, logged and counted."""
        out, skipped = encode(
            batch,
            self.options,
            key_column=self.key_column,
            kafka=self.kafka_coordinates is not None,
            dedupe=dedupe,
            row0=row0,
        )
        if skipped is not None:
            self.logger.warning(
                "%s: skipping %d record(s) Kinesis would refuse, first row %d: %s",
                self._where,
                skipped.count,
                row0 + skipped.row,
                skipped.reason,
            )
            batch.count("skipped_invalid", skipped.count)
        return out
