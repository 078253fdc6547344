"""The Redis sink: commands built as RESP bytes in Arrow, sent in pipelines.

Executor: each SinkBatch becomes one RESP command stream (:mod:`.wire`: ``SET``, ``HSET``,
``SADD`` or ``ZADD``, optionally ``DEL`` before and ``EXPIRE`` after), with no Python per
row (unless a ``key_serializer`` / ``value_serializer`` is given). The stream is sent in
pipelines of ``pipeline_size`` commands (one round trip each, no MULTI) and the replies
are parsed by hiredis (:mod:`.client`, the one error boundary). Before anything is sent,
a row Redis would refuse for what it holds (a null key, a key template value holding its
separator, a TTL that is not positive, a null value or score, a value over 512 MB) is
refused by its row (``on_error``; ``null_keys=skip`` skips null keys and wins). Strings
without a TTL (outside a cluster) go as one ``MSET`` per pipeline instead: the same
overwrites, without one command dispatch per key on the server. Each group of pipelines
runs under the task's RetryPolicy: connection loss, timeouts and the "not now" replies
(``OOM``, ``BUSY``, ``LOADING``, ``READONLY``...) are retried with backoff (a pipeline of
overwrites is safe to send again); a ``WRONGTYPE`` (the key holds another type) or
``ERR`` reply to one row's command refuses that row (``on_error``), the others having been
applied; refused credentials fail at once.

Driver: for ``string``, ``hash``, ``set`` and ``zset`` nothing to commit. Every command is
an overwrite of the same key, field or member with the same value, so a replayed
micro-batch leaves Redis as one run would: effectively exactly-once (the one caveat: a
replay restarts the TTLs it sets). ``list`` and ``stream`` append, so tasks stage their
entries and the driver appends them with one Lua script under a fenced ledger: exactly-once
(:mod:`.modes`, :mod:`.ledger`).
"""

from __future__ import annotations

import functools
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.batch import SinkBatch
from quixsinks.core.commits import CommitRecord
from quixsinks.core.errors import DestinationError, OptionError, RetryableError
from quixsinks.core.options import load_callable
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task

from .client import RedisClient, import_client
from .ledger import StagedHash, records_key
from .modes import Sent, WriteMode, retried, write_mode
from .options import APPENDING, RedisOptions, template_fields
from .wire import WINDOWS_PER_RETRY, Commands, RespEncoder, windows

__all__ = ["RedisSink"]


def _glob_escape(text: str) -> str:
    """``text`` matched literally by a Redis glob (SCAN MATCH)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisSink(Sink[RedisOptions, StagedHash]):
    """Writes keys, hashes, sets or sorted sets to Redis; effectively exactly-once.
    See docs/sinks/redis.md."""

    name: ClassVar[str] = "redis"
    options_class = RedisOptions
    guarantee = "effectively exactly-once"
    extra = "redis"
    retries_requests = True  # each pipeline under the task's RetryPolicy, see write()

    @classmethod
    def check_dependencies(cls) -> None:
        import_client()

    def __repr__(self) -> str:
        opts = self.options
        where = "url=***" if opts.url else f"host={opts.host!r}, port={opts.port}, db={opts.db}"
        return f"RedisSink({where}, data_type={opts.data_type!r})"

    @property
    def mode(self) -> WriteMode:
        """How this data type writes (overwrites, or staged appends)."""
        return write_mode(self.options, self.logger)

    @property
    def encoder(self) -> RespEncoder:
        """The batches' RESP encoder (after ``prepare``)."""
        assert self.records is not None
        return RespEncoder(self.options, self.records)

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        records = self.records
        assert records is not None
        opts = self.options
        json_values = records.value_json
        if opts.key_template is not None:
            if not json_values:
                for _, name in template_fields(opts.key_template):
                    if name is not None:
                        self.column_type(schema, name, "key_template")
        elif records.key is None:
            raise OptionError(
                "redis: no key; set 'key_column' (the DataFrame has no `key` column) or "
                "'key_template' (a key built from columns, e.g. sensor:{id})",
                option="key_column",
            )
        for option_name in ("score_column", "ttl_column"):
            name = getattr(opts, option_name)
            if name is not None:
                self.column_type(schema, name, option_name)
                t = schema.field(name).type
                ok = pa.types.is_integer(t) or (
                    option_name == "score_column"
                    and (pa.types.is_floating(t) or pa.types.is_decimal(t))
                )
                if not ok:
                    raise OptionError(
                        f"redis: {option_name!r} column {name!r} has type {t}; it must be "
                        + ("numeric" if option_name == "score_column" else "an integer"),
                        option=option_name,
                        value=name,
                    )
        if opts.value_column is not None:
            self.column_type(schema, opts.value_column, "value_column")
        taken = {opts.score_column, opts.ttl_column}
        value_names = [n for n in records.values if n not in taken]
        if not json_values and not value_names and opts.value_column is None:
            raise OptionError(
                "redis: no value column left once the key, score and TTL columns are taken",
                option="value_columns",
            )
        for path, option_name in (
            (opts.key_serializer, "key_serializer"),
            (opts.value_serializer, "value_serializer"),
        ):
            if path is not None:
                load_callable(path, option_name=option_name)

    def preflight(self) -> None:
        """Connect once (AUTH, SELECT, PING): unreachable, refused or wrong db fails here."""
        client = RedisClient(self.options)
        try:
            client.ping()
        except RetryableError as exc:
            raise DestinationError(exc.message, location=client.where) from None

    # ------------------------------------------------------------------ executor

    def check_fence(self, task: Task) -> None:
        self.mode.check_fence(task)

    def types_json_values(self) -> bool:
        """A hash or a stream writes one field per JSON key, a key_template reads them:
        typed; every other value is written as its JSON text (or a column, or a
        serializer's bytes)."""
        return self.options.data_type in ("hash", "stream") or self.options.key_template is not None

    def write(self, batch: SinkBatch) -> StagedHash | None:
        return self.mode.write(batch, self.encoder, self._send)

    def _send(self, batch: SinkBatch, commands: Commands) -> Sent:
        """Send a batch's commands in pipelines, each group under the task's RetryPolicy;
        the commands sent, and the rows the server refused for what they hold."""
        client, task = RedisClient(self.options), batch.task
        counts = commands.counts
        per_row = max(1, int(pc.max(counts).as_py() or 1)) if len(counts) else 1
        rows_per_pipeline = max(1, self.options.pipeline_size // per_row)
        if self.options.cluster:
            send = functools.partial(client.send_cluster, commands, rows_per_pipeline)
            refused = retried(task, send, "redis cluster pipelines")
            batch.count("commands", int(pc.sum(counts).as_py() or 0))
            return Sent(0, refused)  # not staged: nothing to count for a commit
        pipelines = windows(commands.data, counts, rows_per_pipeline, mset=commands.mset)
        sent = 0
        refused = []
        for first in range(0, len(pipelines), WINDOWS_PER_RETRY):
            group = pipelines[first : first + WINDOWS_PER_RETRY]
            replies = sum(w.replies for w in group)
            what = f"redis pipelines of {replies} commands"
            refused += retried(task, functools.partial(client.send, group, commands.keys), what)
            sent += replies
        batch.count("commands", sent)
        empty = int(pc.sum(pc.equal(counts, 0)).as_py() or 0)
        written = len(commands.data) - empty - len(refused)
        batch.count("rows_written", written)
        return Sent(sent, refused)

    # ------------------------------------------------------------------ driver: commit

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        self.mode.commit(context, receipts)

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        self.mode.abort(context, receipts)

    # ------------------------------------------------------------------ reading back

    def commit_records(self, sink_id: str | None = None) -> list[CommitRecord]:
        """The commit records of ``list`` and ``stream`` writes (kept by the Lua commit
        next to each ledger entry; batches committed before records existed have none),
        of ``sink_id`` or of every sink id under ``key_prefix``, oldest first. The other
        data types overwrite and keep no ledger: no records."""
        opts = self.options
        if opts.data_type not in APPENDING:
            return super().commit_records(sink_id)
        client = RedisClient(opts)
        redis = client.redis()
        if sink_id is not None:
            names = [records_key(opts.key_prefix, sink_id).encode()]
        else:
            pattern = _glob_escape(records_key(opts.key_prefix, "")) + "*"
            names = client.call(lambda: list(redis.scan_iter(match=pattern, count=1000)))
        records: list[CommitRecord] = []
        for name in names:
            entries = client.call(functools.partial(redis.hgetall, name))
            records += [CommitRecord.from_json(v) for v in entries.values()]
        return sorted(records, key=lambda r: (r.sink_id, r.batch_id, r.committed_at))
