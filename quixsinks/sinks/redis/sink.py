"""The Redis sink: commands built as RESP bytes in Arrow, sent in pipelines.

Executor: each SinkBatch becomes one RESP command stream (``SET``, ``HSET``, ``SADD`` or
``ZADD``, optionally ``DEL`` before and ``EXPIRE`` after), built with pyarrow.compute
kernels, with no Python per row (unless a ``key_serializer`` / ``value_serializer`` is
given). The stream is sent in pipelines of ``pipeline_size`` commands (one round trip
each, no MULTI); the replies are parsed by hiredis. Strings without a TTL (outside a
cluster) go as one ``MSET`` per pipeline instead: the same overwrites, without one
command dispatch per key on the server. Each pipeline runs under the task's
RetryPolicy: connection loss, timeouts and the replies ``OOM``, ``BUSY``, ``LOADING``,
``TRYAGAIN``, ``CLUSTERDOWN``, ``MASTERDOWN``, ``READONLY`` are retried with backoff (a
pipeline of overwrites is safe to send again); ``WRONGTYPE`` (the key holds another
type) is a RecordError naming the key; refused credentials fail at once.

Driver: for ``string``, ``hash``, ``set`` and ``zset`` nothing to commit. Every command is
an overwrite of the same key, field or member with the same value, so a replayed
micro-batch leaves Redis as one run would: effectively exactly-once (the one caveat: a
replay restarts the TTLs it sets). ``list`` and ``stream`` append, so tasks stage their
entries and the driver appends them with one Lua script under a fenced ledger: exactly-once
(see ``ledger``).
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.arrow import as_binary, concat_rows, first_null, first_true, join_lines
from quixsinks.core.batch import SinkBatch, name_prefix
from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.errors import (
    CommitError,
    DestinationAccessDeniedError,
    DestinationError,
    LedgerFenceError,
    MissingDependencyError,
    OptionError,
    QuixSinksError,
    RecordError,
    RetryableError,
    timed_out,
)
from quixsinks.core.formats import json_column, json_object_pieces, json_objects
from quixsinks.core.ledger import fence_owners, log_already_committed
from quixsinks.core.options import load_callable
from quixsinks.core.sink import CommitContext, Receipt, Sink, Task, staged_in_order
from quixsinks.core.tls import certificate_error, certificate_failure

from .ledger import (
    COMMIT_SCRIPT,
    RedisLedgerStore,
    StagedHash,
    ledger_key,
    registry_key,
    staged_totals,
    staging_key,
)
from .options import APPENDING, RedisOptions, template_fields, template_separators

__all__ = ["RedisSink", "resp_commands"]

# Connection pools per process (Python workers are reused between tasks), closed at exit
_POOLS: ClientCache[Any] = ClientCache("redis connection pools", lambda p: p.disconnect())
_CLUSTERS: ClientCache[Any] = ClientCache("redis cluster clients", lambda c: c.close())

#: Redis refuses a string (or bulk argument) larger than this
MAX_VALUE_BYTES = 512 * 1024 * 1024
#: replies that mean "not now": the pipeline is sent again after a backoff
RETRYABLE_REPLIES = (
    "OOM",
    "BUSY",
    "LOADING",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "READONLY",
    "NOREPLICAS",
    "MOVED",  # a slot moved (cluster resharding): the slot map is refreshed, then retried
    "ASK",
)
_AUTH_REPLIES = ("NOAUTH", "WRONGPASS", "NOPERM")

Piece: TypeAlias = pa.Array | bytes


def import_client() -> Any:
    try:
        import hiredis  # noqa: F401  (the reply parser the sink reads pipelines with)
        import redis
    except ImportError as exc:
        raise MissingDependencyError("redis[hiredis]", "redis") from exc
    return redis


# ---------------------------------------------------------------------- RESP in Arrow


def _check_separators(text: pa.Array, name: str, separators: str, template: str) -> None:
    """RecordError for the first value of template column ``name`` that holds one of the
    ``separators`` between it and the next column (its key would be ambiguous)."""
    for character in separators:
        row = first_true(pc.match_substring(text, character))
        if row is not None:
            shown = text[row].as_py().decode("utf-8", "replace")
            raise RecordError(
                f"redis: the value {shown!r} of {{{name}}} (row {row}) holds "
                f"{character!r}, which separates it from the next column in 'key_template' "
                f"{template!r}: two different rows could build the same key and one would "
                "overwrite the other; replace that character in the column, or change the "
                "template's separator",
                column=name,
                row=row,
            )


def as_text(column: pa.Array, name: str) -> pa.Array:
    """A column as binary Redis arguments: text and bytes as they are, numbers and booleans
    as their text, times and nested values as JSON (strings without their quotes)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    t = column.type
    if pa.types.is_dictionary(t):
        column = column.dictionary_decode()
        t = column.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.cast(column, pa.binary())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.cast(pc.cast(column, pa.large_binary()), pa.binary())
    if pa.types.is_boolean(t):
        return pc.cast(pc.if_else(column, "true", "false"), pa.binary())
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return pc.cast(pc.cast(column, pa.string()), pa.binary())
    if pa.types.is_null(t):
        return pa.nulls(len(column), pa.binary())
    text = json_column(column)  # floats (shortest text), times, nested values
    text = pc.if_else(pc.is_null(column), pa.scalar(None, pa.string()), text)
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        text = pc.utf8_slice_codeunits(text, 1, -1)  # the ISO text, without JSON quotes
    del name
    return pc.cast(text, pa.binary())


def _bulk(arg: Piece | list[Piece]) -> list[Piece]:
    """RESP bulk string pieces of one argument: an array, the same bytes in every row, or
    pieces whose row-wise concatenation is the argument (joined once, with the command)."""
    if isinstance(arg, bytes):
        return [b"$%d\r\n%s\r\n" % (len(arg), arg)]
    if isinstance(arg, list):
        arrays = [p for p in arg if not isinstance(p, bytes)]
        fixed = sum(len(p) for p in arg if isinstance(p, bytes))
        if not arrays:
            return _bulk(b"".join(p for p in arg if isinstance(p, bytes)))
        total = pc.binary_length(arrays[0])
        for array in arrays[1:]:
            total = pc.add(total, pc.binary_length(array))
        if fixed:
            total = pc.add(total, fixed)
        length = pc.cast(pc.cast(total, pa.string()), pa.binary())
        return [b"$", length, b"\r\n", *arg, b"\r\n"]
    length = pc.cast(pc.cast(pc.binary_length(arg), pa.string()), pa.binary())
    return [b"$", length, b"\r\n", arg, b"\r\n"]


def resp_commands(args: list[Piece | list[Piece]], rows: int) -> pa.Array:
    """One RESP command per row (``*N`` then each argument as a bulk string)."""
    pieces: list[Piece] = [b"*%d\r\n" % len(args)]
    for arg in args:
        pieces += _bulk(arg)
    return concat_rows(pieces, rows)


@dataclass(frozen=True)
class Window:
    """One pipeline: its RESP bytes, how many replies they get, the rows they come from."""

    body: pa.Buffer  # the batch's command bytes, sliced (not copied)
    replies: int
    row0: int
    counts: pa.Array  # commands per row of the window
    mset: bool = False  # one MSET whose arguments are the window's rows (one reply)
    head: bytes = b""  # sent before the body (an MSET's ``*N`` and name)


#: data types whose commands (SET, MSET, HSET, DEL, EXPIRE, SADD) answer one-line replies only
SIMPLE_REPLIES = ("string", "hash", "set")

#: an MSET (one command, buffered whole by the server) carries at most this many bytes of
#: arguments, however many rows ``pipeline_size`` allows
MSET_MAX_BYTES = 16 * 1024 * 1024

#: pipelines sent back to back (the next one is on its way while the previous one's
#: replies are read) and retried together: they are overwrites, safe to send again
WINDOWS_PER_RETRY = 16


@dataclass(frozen=True)
class Commands:
    """A batch's command stream: per row, its commands' bytes and how many commands."""

    data: pa.Array  # binary, one element per row (possibly several commands)
    counts: pa.Array  # int64, commands (replies) per row
    keys: pa.Array  # binary, the key of each row (for error messages)
    mset: bool = False  # data holds MSET arguments (key, value), one MSET per window


# ---------------------------------------------------------------------- the sink


class RedisSink(Sink[RedisOptions, StagedHash]):
    """Writes keys, hashes, sets or sorted sets to Redis; effectively exactly-once.
    See docs/sinks/redis.md."""

    name: ClassVar[str] = "redis"
    options_class = RedisOptions
    guarantee = "effectively exactly-once"
    extra = "redis"
    retries_requests = True  # each pipeline under the task's RetryPolicy, see write()

    def __init__(self, options: RedisOptions, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.value_names: tuple[str, ...] = ()

    @classmethod
    def check_dependencies(cls) -> None:
        import_client()

    def __repr__(self) -> str:
        opts = self.options
        where = "url=***" if opts.url else f"host={opts.host!r}, port={opts.port}, db={opts.db}"
        return f"RedisSink({where}, data_type={opts.data_type!r})"

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
        self.value_names = tuple(n for n in records.values if n not in taken)
        if not json_values and not self.value_names and opts.value_column is None:
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
        try:
            if self.options.cluster:
                self._redis_call(lambda: self._cluster().ping())
                return
            self._call(lambda conn: (conn.send_command("PING"), conn.read_response()))
        except RetryableError as exc:
            raise DestinationError(exc.message, location=self._where()) from None

    # ------------------------------------------------------------------ connections

    def _connection_error(self, exc: BaseException) -> RetryableError | DestinationError:
        """A refused, lost or unanswered connection: retryable; a timeout says so. A server
        certificate that does not verify is not retried: the error names the options."""
        refused = certificate_failure(exc)
        if refused is not None:
            return certificate_error(
                self._where(),
                refused,
                trust="set 'ssl_ca_certs' to a file holding its CA certificate (PEM)",
                skip="ssl_verify=false",
            )
        redis = import_client()
        if isinstance(exc, (redis.TimeoutError, TimeoutError)):
            limit = timed_out(self.options.socket_timeout, "socket_timeout")
            return RetryableError(f"{self._where()}: {limit} ({exc})")
        return RetryableError(f"{self._where()}: connection failed: {exc}")

    def _where(self) -> str:
        opts = self.options
        if opts.url:
            return "the redis server of 'url'"
        return f"redis {opts.host}:{opts.port} db {opts.db}"

    def _pool(self) -> Any:
        return _POOLS.get(client_key(self.options), self._new_pool)

    def _connection_kwargs(self) -> tuple[dict[str, Any], bool]:
        """redis-py's keyword arguments shared by a pool and a cluster client, and TLS on/off."""
        opts = self.options
        common: dict[str, Any] = {
            "socket_timeout": opts.socket_timeout,
            "socket_connect_timeout": opts.socket_timeout,
        }
        tls = opts.ssl or (opts.url or "").startswith("rediss://")
        if tls:
            common["ssl_cert_reqs"] = "required" if opts.ssl_verify else "none"
            common["ssl_check_hostname"] = opts.ssl_verify
            if opts.ssl_ca_certs:
                common["ssl_ca_certs"] = opts.ssl_ca_certs
        if opts.username is not None:
            common["username"] = opts.username
        if opts.password is not None:
            common["password"] = opts.password
        return common, tls

    def _new_pool(self) -> Any:
        redis = import_client()
        opts = self.options
        common, tls = self._connection_kwargs()
        if opts.url:
            return redis.ConnectionPool.from_url(opts.url, **common)
        if tls:
            common["connection_class"] = redis.SSLConnection
        return redis.ConnectionPool(host=opts.host, port=opts.port, db=opts.db, **common)

    def _cluster(self) -> Any:
        return _CLUSTERS.get(client_key(self.options, "cluster"), self._new_cluster)

    def _new_cluster(self) -> Any:
        from redis.cluster import RedisCluster

        opts = self.options
        common, tls = self._connection_kwargs()
        if tls:
            common["ssl"] = True
        if opts.url:
            return RedisCluster.from_url(opts.url, **common)
        return RedisCluster(host=opts.host, port=opts.port, **common)

    def _call(self, fn: Callable[[Any], Any], pool: Any = None) -> Any:
        """Run ``fn(connection)``; failures translated (connection loss: RetryableError)."""
        redis = import_client()
        pool = pool if pool is not None else self._pool()
        conn = None
        try:
            conn = pool.get_connection()
            return fn(conn)
        except QuixSinksError:
            if conn is not None:
                conn.disconnect()  # replies may be left unread
            raise
        except redis.AuthenticationError as exc:
            raise DestinationAccessDeniedError(
                f"{self._where()}: the credentials were refused ({exc}); check 'username' "
                "and 'password' (or REDIS_PASSWORD)",
                location=self._where(),
            ) from None
        except redis.ResponseError as exc:
            if conn is not None:
                conn.disconnect()
            text = str(exc)
            if "DB index is out of range" in text or "invalid DB index" in text:
                raise OptionError(
                    f"{self._where()}: the server has no database {self.options.db} ({text})",
                    option="db",
                    value=str(self.options.db),
                ) from None
            raise _reply_error(text, self._where()) from None
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            if conn is not None:
                conn.disconnect()
            raise self._connection_error(exc) from None
        finally:
            if conn is not None:
                pool.release(conn)

    # ------------------------------------------------------------------ executor

    def write(self, batch: SinkBatch) -> StagedHash | None:
        staging = None
        if self.options.data_type in APPENDING:
            ctx = batch.context
            staging = staging_key(
                self.options.key_prefix,
                ctx.name_prefix,
                ctx.batch_id,
                ctx.partition_id,
                ctx.attempt_id,
            )
            commands, skipped = self.staged_commands(batch, staging)
            # registered before any entry lands: the next commit deletes it if this
            # attempt dies; it also expires (staging_max_age_hours)
            registry = registry_key(self.options.key_prefix, ctx.name_prefix)
            ttl_ms = int(self.options.staging_max_age_hours * 3_600_000)
            for command in (("SADD", registry, staging), ("PEXPIRE", registry, ttl_ms)):
                register = functools.partial(self._call, functools.partial(_simple, command))
                batch.task.retry(
                    register, what="redis staging registry"
                ) if batch.task else register()
        else:
            commands, skipped = self.commands(batch)
        if skipped:
            batch.count("skipped_null_keys", skipped)
        task = batch.task
        counts = commands.counts
        per_row = max(1, int(pc.max(counts).as_py() or 1)) if len(counts) else 1
        rows_per_pipeline = max(1, self.options.pipeline_size // per_row)
        if self.options.cluster:
            send = functools.partial(self._cluster_send, commands, rows_per_pipeline)
            task.retry(send, what="redis cluster pipelines") if task is not None else send()
            sent = int(pc.sum(counts).as_py() or 0)
            batch.count("commands", sent)
            return None
        windows = _windows(commands.data, counts, rows_per_pipeline, mset=commands.mset)
        sent = 0
        for first in range(0, len(windows), WINDOWS_PER_RETRY):
            group = windows[first : first + WINDOWS_PER_RETRY]
            replies = sum(w.replies for w in group)
            pipeline = functools.partial(self._pipelines, group, commands.keys)
            what = f"redis pipelines of {replies} commands"
            task.retry(pipeline, what=what) if task is not None else pipeline()
            sent += replies
        batch.count("commands", sent)
        batch.count("rows_written", len(commands.data) - int(pc.sum(pc.equal(counts, 0)).as_py()))
        if staging is None or not sent:
            return None
        # a staging hash no commit names (a failed attempt) expires
        ttl_ms = int(self.options.staging_max_age_hours * 3_600_000)
        pexpire = functools.partial(_simple, ("PEXPIRE", staging, ttl_ms))
        task.retry(
            lambda: self._call(pexpire), what="redis staging expiry"
        ) if task else self._call(pexpire)
        return StagedHash(staging, sent)  # one HSET per staged entry

    # ------------------------------------------------------------------ list / stream

    def staged_commands(self, batch: SinkBatch, staging: str) -> tuple[Commands, int]:
        """``HSET <staging> <seq> <entry>`` per row with an entry (seq: the entry's place in
        the task, 0, 1, 2... without gaps: the commit counts the fields to find lost ones)."""
        opts = self.options
        batch, keys, skipped = self._keyed(batch)
        rows = batch.num_rows
        head = concat_rows([_length_text(keys), b"\n", keys], rows)
        if opts.data_type == "list":
            value = self._value(batch)
            _check_size(value, "value")
            entries = concat_rows([head, value], rows)
            present = pa.repeat(pa.scalar(True), rows)
        else:
            table = self._value_table(batch)
            pieces: list[Piece] = [head]
            fields = pa.array([0] * rows, pa.int64())
            for name in table.column_names:
                text = as_text(table.column(name), name)
                valid = pc.is_valid(text)
                name_bytes = name.encode()
                filled = pc.fill_null(text, b"")
                pair = concat_rows(
                    [
                        b"%d\n%s" % (len(name_bytes), name_bytes),
                        _length_text(filled),
                        b"\n",
                        filled,
                    ],
                    rows,
                )
                pieces.append(pc.if_else(valid, pair, pa.scalar(b"", pa.binary())))
                fields = pc.add(fields, pc.cast(valid, pa.int64()))
            entries = concat_rows(pieces, rows)
            present = pc.greater(fields, 0)
            none = rows - int(pc.sum(present).as_py()) if rows else 0
            if none:
                batch.count("skipped_no_fields", none)
        _check_size(entries, "entry")
        task = batch.task
        first = 0
        entries_staged = int(pc.sum(present).as_py() or 0) if rows else 0
        if task is not None:
            first = task.state.get("redis_seq", 0)
            task.state["redis_seq"] = first + entries_staged
        # entries numbered in row order, skipping the rows without one (their seq is unused)
        numbers = pc.add(pc.cumulative_sum(pc.cast(present, pa.int64())), first - 1)
        seq = pc.cast(pc.cast(numbers, pa.string()), pa.binary())
        data = resp_commands([b"HSET", staging.encode(), seq, entries], rows)
        data = pc.if_else(present, data, pa.scalar(b"", pa.binary()))
        return Commands(data, pc.cast(present, pa.int64()), keys), skipped

    def _ledger_client(self) -> Any:
        return import_client().Redis(connection_pool=self._pool())

    def check_fence(self, task: Task) -> None:
        if self.options.data_type not in APPENDING or not task.context.ledgered:
            return
        ctx = task.context
        store = RedisLedgerStore(self._ledger_client(), self.options.key_prefix)
        owners = task.retry(
            lambda: self._redis_call(lambda: store.owners(ctx.sink_id)),
            what="redis fence check",
        )
        fence_owners(ctx.sink_id, ctx.query_id, owners, self.options.takeover_query_id)

    def commit(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        if self.options.data_type not in APPENDING:
            return
        opts = self.options
        client = self._ledger_client()
        ledger = opts.ledger(RedisLedgerStore(client, opts.key_prefix))
        policy = opts.retry_policy()
        committed = policy.call(
            lambda: self._redis_call(
                lambda: ledger.committed(context.sink_id, context.batch_id, context.query_id)
            ),
            what="redis ledger fence",
        )
        staged = staged_totals(staged_in_order(receipts))
        keys = [
            ledger_key(opts.key_prefix, context.sink_id),
            registry_key(opts.key_prefix, name_prefix(context.sink_id, context.query_id)),
            *staged,
        ]
        args = [
            str(context.batch_id),
            context.query_id,
            opts.data_type,
            str(opts.stream_maxlen or 0),
            str(opts.ledger_keep_batches),
            *(str(entries) for entries in staged.values()),
        ]
        script = client.register_script(COMMIT_SCRIPT)
        result = policy.call(
            lambda: self._redis_call(lambda: script(keys=keys, args=args)),
            what="redis commit script",
        )
        code, detail = (
            int(result[0]),
            result[1].decode() if isinstance(result[1], bytes) else result[1],
        )
        if code == -1:
            raise LedgerFenceError(
                sink_id=context.sink_id, owner_query_id=detail, query_id=context.query_id
            )
        if code == -2:
            self.abort(context, receipts)
            raise RecordError(
                f"{self._where()}: the key {detail!r} holds a value of another type than "
                f"{opts.data_type}; nothing of batch {context.batch_id} was appended (delete "
                "the key or write to other keys with key_prefix)"
            )
        if code == -3:
            self.abort(context, receipts)
            raise self._staging_lost(context, detail, *(int(n) for n in result[2:5]))
        if not context.ledgered:  # an unkeyed batch write is never seen again: no ledger key
            self._redis_call(lambda: client.delete(keys[0]))
        if committed:  # before the script, which found the entry too and appended nothing
            log_already_committed(context.sink_id, context.batch_id)
            return
        self.logger.info("batch %s: %s %s entries appended", context.batch_id, code, opts.data_type)

    def _staging_lost(
        self, context: CommitContext, staging: str, expected: int, found: int, short: int
    ) -> CommitError:
        others = f" (and {short - 1} more staging hash(es) of the batch)" if short > 1 else ""
        again = (
            "restart the query from its checkpoint to write the micro-batch again (it is "
            "staged anew)"
            if context.streaming
            else "run the write again"
        )
        return CommitError(
            f"{self._where()}: micro-batch {context.batch_id} of sink {context.sink_id} cannot "
            f"be committed: a task staged {expected} {self.options.data_type} entries in "
            f"{staging!r}, but the server holds {found}{others}. Staged entries were lost "
            "between the tasks' writes and this commit (a server restart without persistence "
            "or within its fsync window, a failover to a replica that missed writes, the hash "
            "evicted by maxmemory-policy, deleted, or expired after staging_max_age_hours). "
            f"Nothing was appended and the micro-batch is not recorded: {again}."
        )

    def abort(self, context: CommitContext, receipts: list[Receipt[StagedHash]]) -> None:
        staged = list(staged_totals(s for r in receipts for s in r.staged))
        if self.options.data_type not in APPENDING or not staged:
            return
        client = self._ledger_client()
        registry = registry_key(
            self.options.key_prefix, name_prefix(context.sink_id, context.query_id)
        )
        self._redis_call(lambda: client.delete(*staged))
        self._redis_call(lambda: client.srem(registry, *staged))

    def _redis_call(self, fn: Callable[[], Any]) -> Any:
        """A redis-py client call with its failures translated."""
        redis = import_client()
        try:
            return fn()
        except redis.AuthenticationError as exc:
            raise DestinationAccessDeniedError(
                f"{self._where()}: the credentials were refused ({exc})", location=self._where()
            ) from None
        except redis.ResponseError as exc:
            raise _reply_error(str(exc), self._where()) from None
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            raise self._connection_error(exc) from None

    def _cluster_send(self, commands: Commands, rows_per_pipeline: int) -> None:
        """Cluster: each row to the node serving its key's hash slot, in pipelines per node
        (every command of a row addresses one key). A MOVED reply refreshes the slot map
        and the whole batch is sent again (overwrites: safe)."""
        from redis.crc import key_slot

        client = self._cluster()
        nodes = client.nodes_manager
        names: dict[str, int] = {}
        index = [
            names.setdefault(nodes.get_node_from_slot(key_slot(k)).name, len(names))
            for k in commands.keys.to_pylist()
        ]
        node_of_row = pa.array(index, pa.int32())
        try:
            for name, number in names.items():
                mask = pc.equal(node_of_row, number)
                counts = commands.counts.filter(mask)
                windows = _windows(commands.data.filter(mask), counts, rows_per_pipeline)
                pool = client.get_node(node_name=name).redis_connection.connection_pool
                for first in range(0, len(windows), WINDOWS_PER_RETRY):
                    group = windows[first : first + WINDOWS_PER_RETRY]
                    self._pipelines(group, commands.keys.filter(mask), pool)
        except RetryableError as exc:
            if "MOVED" in exc.message or "ASK" in exc.message or "connection" in exc.message:
                nodes.initialize()  # the slot map changed, or a node went away
            raise

    def _pipelines(self, windows: list[Window], keys: pa.Array, pool: Any = None) -> None:
        simple = self.options.data_type in SIMPLE_REPLIES
        errors = self._call(functools.partial(_exchange, windows, simple=simple), pool)
        if not errors:
            return
        window, index, message = errors[0]
        row0, counts = windows[window].row0, windows[window].counts
        if windows[window].mset:  # one MSET: its reply names no key
            last = row0 + len(counts) - 1
            raise _reply_error(f"{message} (MSET of rows {row0} to {last})", self._where())
        # the reply index -> the row (rows may send several commands)
        row, seen = row0, 0
        for n in counts.to_pylist():
            seen += n
            if index < seen:
                break
            row += 1
        key = keys[row].as_py()
        shown = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        if message.startswith("WRONGTYPE"):
            raise RecordError(
                f"{self._where()}: the key {shown!r} (row {row}) holds a value of another "
                f"type than {self.options.data_type} ({message}); delete it or write to "
                "other keys (key_prefix)",
                row=row,
            )
        raise _reply_error(f"{message} (key {shown!r}, row {row})", self._where(), row=row)

    def _key_column(self, batch: SinkBatch, values: pa.Table | None) -> pa.Array:
        opts = self.options
        if opts.key_template is not None:
            pieces: list[Piece] = []
            separators = template_separators(opts.key_template)
            for literal, name in template_fields(opts.key_template):
                pieces.append(literal.encode())
                if name is not None:
                    text = as_text(_column(batch, values, name, "key_template"), name)
                    if name in separators:
                        _check_separators(text, name, separators[name], opts.key_template)
                    pieces.append(text)
            keys = concat_rows(pieces, batch.num_rows)
        else:
            assert self.records is not None
            assert self.records.key is not None
            if opts.key_serializer is not None:  # Quix's key_serializer(key, value)
                fn = load_callable(opts.key_serializer, option_name="key_serializer")
                raw = batch.column(self.records.key).to_pylist()
                rows = self._value_table(batch).to_pylist()
                keys = _python_texts(
                    [fn(k, v) for k, v in zip(raw, rows, strict=True)], "key_serializer"
                )
            else:
                keys = as_text(batch.column(self.records.key), self.records.key)
        if opts.key_prefix:
            keys = concat_rows([opts.key_prefix.encode(), keys], batch.num_rows)
        return keys

    def _keyed(self, batch: SinkBatch) -> tuple[SinkBatch, pa.Array, int]:
        """The batch and its keys, without null-key rows (null_keys=skip), and their count.

        With null_keys=error a null key is a RecordError naming the row.
        """
        values = batch.values() if (self.records and self.records.value_json) else None
        keys = self._key_column(batch, values)
        row = first_null(keys)
        if row is None:
            return batch, keys, 0
        if self.options.null_keys == "error":
            raise RecordError(
                f"redis: the key of row {row} is null (key column or key_template column "
                "null); set null_keys=skip to skip such rows",
                row=row,
            )
        keep = pc.is_valid(keys)
        skipped = batch.num_rows - int(pc.sum(keep).as_py())
        batch = SinkBatch(
            batch.table.filter(keep), batch.records, batch.context, batch.counters,
            None, batch.task,
        )  # fmt: skip
        return batch, keys.filter(keep), skipped

    def commands(self, batch: SinkBatch) -> tuple[Commands, int]:
        """The batch's commands and the count of rows skipped for a null key."""
        opts = self.options
        batch, keys, skipped = self._keyed(batch)
        rows = batch.num_rows
        ttl = self._ttl(batch)
        data_type = opts.data_type
        if data_type == "hash":
            data, counts = self._hash_commands(batch, keys, ttl)
            return Commands(data, counts, keys), skipped
        one_each = pa.repeat(pa.scalar(1, pa.int64()), rows)  # one command per row
        value: Piece | list[Piece]
        if self.options.value_column is None and self.options.value_serializer is None:
            value = _json_pieces(self._value_table(batch))  # joined with the command
        else:
            value = self._value(batch)
            _check_size(value, "value")
        if data_type == "string":
            if ttl is None and not opts.cluster:  # MSET (a cluster refuses cross-slot keys)
                data = concat_rows([*_bulk(keys), *_bulk(value)], rows)
                return Commands(data, one_each, keys, mset=True), skipped
            if ttl is None:
                data = resp_commands([b"SET", keys, value], rows)
            elif isinstance(ttl, bytes):
                data = resp_commands([b"SET", keys, value, b"EX", ttl], rows)
            else:
                with_ttl = resp_commands([b"SET", keys, value, b"EX", pc.fill_null(ttl, b"")], rows)
                without = resp_commands([b"SET", keys, value], rows)
                data = pc.if_else(pc.is_valid(ttl), with_ttl, without)
            return Commands(data, one_each, keys), skipped
        if data_type == "set":
            data = resp_commands([b"SADD", keys, value], rows)
        else:
            assert opts.score_column is not None
            score = _scores(batch.column(opts.score_column), opts.score_column)
            data = resp_commands([b"ZADD", keys, score, value], rows)
        data, counts = _with_expire(data, one_each, keys, ttl, rows)
        return Commands(data, counts, keys), skipped

    def _ttl(self, batch: SinkBatch) -> bytes | pa.Array | None:
        opts = self.options
        if opts.ttl_seconds is not None:
            return str(opts.ttl_seconds).encode()
        if opts.ttl_column is None:
            return None
        column = batch.column(opts.ttl_column)
        row = first_true(pc.less_equal(column, 0))
        if row is not None:
            raise RecordError(
                f"redis: ttl_column {opts.ttl_column!r} is {column[row].as_py()} in row {row}; "
                "a TTL must be a positive number of seconds (null: no expiry)",
                column=opts.ttl_column,
                row=row,
            )
        return as_text(column, opts.ttl_column)

    def _value(self, batch: SinkBatch) -> pa.Array:
        opts = self.options
        if opts.value_column is not None:
            value = as_text(batch.column(opts.value_column), opts.value_column)
            row = first_null(value)
            if row is not None:
                raise RecordError(
                    f"redis: value_column {opts.value_column!r} is null in row {row}; Redis "
                    "has no null value (filter such rows, or write JSON values)",
                    column=opts.value_column,
                    row=row,
                )
            return value
        table = self._value_table(batch)
        if opts.value_serializer is not None:
            fn = load_callable(opts.value_serializer, option_name="value_serializer")
            return _python_texts([fn(v) for v in table.to_pylist()], "value_serializer")
        return pc.cast(json_objects(table), pa.binary())

    def _value_table(self, batch: SinkBatch) -> pa.Table:
        values = batch.values()
        taken = {self.options.score_column, self.options.ttl_column}
        keep = [n for n in values.column_names if n not in taken]
        return values.select(keep)

    def _hash_commands(
        self, batch: SinkBatch, keys: pa.Array, ttl: bytes | pa.Array | None
    ) -> tuple[pa.Array, pa.Array]:
        rows = batch.num_rows
        table = self._value_table(batch)
        pieces: list[Piece] = []
        fields: pa.Array | int = 0
        for name in table.column_names:
            text = as_text(table.column(name), name)
            _check_size(text, f"field {name!r}")
            name_bytes = name.encode()
            if text.null_count == 0:  # every row has the field: straight into the join
                pieces += [*_bulk(name_bytes), *_bulk(text)]
                fields = pc.add(fields, 1) if isinstance(fields, pa.Array) else fields + 1
                continue
            valid = pc.is_valid(text)
            pair = concat_rows([*_bulk(name_bytes), *_bulk(pc.fill_null(text, b""))], rows)
            pieces.append(pc.if_else(valid, pair, pa.scalar(b"", pa.binary())))
            fields = pc.add(fields, pc.cast(valid, pa.int64()))  # an int broadcasts
        if isinstance(fields, int):  # the same fields in every row: no per-row choice
            count: Piece = b"%d" % (2 * fields + 2)
            any_field = pa.repeat(pa.scalar(fields > 0), rows)
        else:
            count = pc.cast(pc.cast(pc.add(pc.multiply(fields, 2), 2), pa.string()), pa.binary())
            any_field = pc.greater(fields, 0)
        hset = concat_rows([b"*", count, b"\r\n", *_bulk(b"HSET"), *_bulk(keys), *pieces], rows)
        if isinstance(fields, int):
            data = hset if fields else pa.repeat(pa.scalar(b"", pa.binary()), rows)
        else:
            data = pc.if_else(any_field, hset, pa.scalar(b"", pa.binary()))
        counts = pc.cast(any_field, pa.int64())
        if self.options.hash_replace:
            data = concat_rows([resp_commands([b"DEL", keys], rows), data], rows)
            counts = pc.add(counts, 1)
        return _with_expire(data, counts, keys, ttl, rows, only=any_field)


def _json_pieces(table: pa.Table) -> list[Piece]:
    """Pieces of one JSON object per row (as core's json_objects builds), as binary, null
    free: a JSON object never exceeds Redis's 512 MB in practice (no size check)."""
    out: list[Piece] = []
    for piece in json_object_pieces(table):
        if isinstance(piece, str):
            out.append(piece.encode())
        else:
            out.append(
                as_binary(piece.combine_chunks() if isinstance(piece, pa.ChunkedArray) else piece)
            )
    return out


def _column(batch: SinkBatch, values: pa.Table | None, name: str, option: str) -> pa.Array:
    if name in batch.table.column_names:
        return batch.column(name)
    if values is not None and name in values.column_names:
        return values.column(name).combine_chunks()
    raise RecordError(
        f"redis: {option!r} names {name!r}, which neither the DataFrame nor this batch's "
        "JSON values have",
        column=name,
    )


def _with_expire(
    data: pa.Array,
    counts: pa.Array,
    keys: pa.Array,
    ttl: bytes | pa.Array | None,
    rows: int,
    only: pa.Array | None = None,
) -> tuple[pa.Array, pa.Array]:
    """Append ``EXPIRE key ttl`` to the rows that have a TTL (and ``only`` true)."""
    if ttl is None:
        return data, counts
    expire = resp_commands(
        [b"EXPIRE", keys, ttl if isinstance(ttl, bytes) else pc.fill_null(ttl, b"")], rows
    )
    has = pa.repeat(pa.scalar(True), rows) if isinstance(ttl, bytes) else pc.is_valid(ttl)
    if only is not None:
        has = pc.and_(has, only)
    tail = pc.if_else(has, expire, pa.scalar(b"", pa.binary()))
    return concat_rows([data, tail], rows), pc.add(counts, pc.cast(has, pa.int64()))


def _scores(column: pa.Array, name: str) -> pa.Array:
    if pa.types.is_decimal(column.type):
        column = pc.cast(column, pa.float64())
    row = first_null(column)
    if row is None and pa.types.is_floating(column.type):
        row = first_true(pc.is_nan(column))
    if row is not None:
        raise RecordError(
            f"redis: score_column {name!r} is {column[row].as_py()} in row {row}; every "
            "member needs a score (NaN is not one)",
            column=name,
            row=row,
        )
    if pa.types.is_floating(column.type):
        # shortest round-trip text; Arrow spells infinities inf / -inf, as Redis does
        return pc.cast(pc.cast(column, pa.string()), pa.binary())
    return as_text(column, name)


def _check_size(values: pa.Array, what: str) -> None:
    if not len(values):
        return
    longest = pc.max(pc.binary_length(values)).as_py()
    if longest is not None and longest > MAX_VALUE_BYTES:
        row = first_true(pc.greater(pc.binary_length(values), MAX_VALUE_BYTES))
        raise RecordError(
            f"redis: the {what} of row {row} is {longest} bytes; Redis stores at most "
            f"{MAX_VALUE_BYTES} bytes (512 MB) per value",
            row=row,
        )


def _python_texts(values: list[Any], option: str) -> pa.Array:
    out: list[bytes | None] = []
    for value in values:
        if value is None or isinstance(value, bytes):
            out.append(value)
        elif isinstance(value, str):
            out.append(value.encode())
        else:
            raise RecordError(
                f"redis: {option!r} returned {type(value).__name__}; it must return str or bytes"
            )
    return pa.array(out, pa.binary())


def _windows(
    data: pa.Array, counts: pa.Array, rows_per_pipeline: int, *, mset: bool = False
) -> list[Window]:
    windows: list[Window] = []
    for start in range(0, len(data), rows_per_pipeline):
        if mset:  # one MSET of the window's rows (split where it passes MSET_MAX_BYTES)
            chunk = data.slice(start, rows_per_pipeline)
            for first, n in _byte_bounded(chunk, MSET_MAX_BYTES):
                head = b"*%d\r\n$4\r\nMSET\r\n" % (2 * n + 1)
                body = join_lines(chunk.slice(first, n), b"")
                rows = counts.slice(start + first, n)
                windows.append(Window(body, 1, start + first, rows, mset=True, head=head))
            continue
        chunk_counts = counts.slice(start, rows_per_pipeline)
        replies = int(pc.sum(chunk_counts).as_py() or 0)
        if replies:
            body = join_lines(data.slice(start, rows_per_pipeline), b"")
            windows.append(Window(body, replies, start, chunk_counts))
    return windows


def _byte_bounded(chunk: pa.Array, limit: int) -> list[tuple[int, int]]:
    """(first, count) runs of ``chunk`` of at most ``limit`` bytes each (a longer value
    alone in its run)."""
    sizes = pc.binary_length(chunk)
    if (pc.sum(sizes).as_py() or 0) <= limit:
        return [(0, len(chunk))]
    ends = list(itertools.accumulate(sizes.to_pylist()))
    runs, first, base = [], 0, 0
    while first < len(chunk):
        last = max(bisect.bisect_right(ends, base + limit), first + 1)
        runs.append((first, last - first))
        base, first = ends[last - 1], last
    return runs


def _length_text(values: pa.Array) -> pa.Array:
    return pc.cast(pc.cast(pc.binary_length(values), pa.string()), pa.binary())


def _simple(command: tuple[Any, ...], conn: Any) -> Any:
    conn.send_command(*command)
    return conn.read_response()


def _exchange(windows: list[Window], conn: Any, simple: bool = False) -> list[tuple[int, int, str]]:
    """Send the pipelines, each as soon as the one before is on the wire, and read every
    reply; the error replies as (window, reply index, message).

    ``simple``: the commands answer one-line status or integer replies only (``+OK``,
    ``:1``): while every received line is one, the replies are counted in the received
    bytes instead of being parsed one by one (a third of the sink's CPU on SET pipelines);
    from the first other line on (an error reply), hiredis parses the rest.
    """
    import hiredis

    sock = conn._sock
    if sock is None:
        conn.connect()
        sock = conn._sock
    reader = hiredis.Reader()
    errors: list[tuple[int, int, str]] = []
    if not windows:
        return errors
    ends = list(itertools.accumulate(w.replies for w in windows))  # replies before window k+1
    total, sent, got = ends[-1], 0, 0
    pending = b""  # received bytes after the last complete line (counting mode)
    counting = simple
    while got < total:
        # the replies of at most two pipelines are outstanding: a few kB, never enough to
        # fill the socket buffers and block the server while we send
        current = bisect.bisect_right(ends, got)
        while sent < min(current + 2, len(windows)):
            outgoing = windows[sent]
            if outgoing.head:
                sock.sendall(outgoing.head)
            sock.sendall(outgoing.body)
            sent += 1
        if not counting:
            reply = reader.gets()
            if reply is not False:
                if isinstance(reply, hiredis.ReplyError):
                    window = bisect.bisect_right(ends, got)
                    errors.append((window, got - (ends[window - 1] if window else 0), str(reply)))
                got += 1
                continue
        try:
            data = sock.recv(1 << 20)
        except TimeoutError as exc:
            raise TimeoutError(f"no reply within socket_timeout: {exc}") from None
        if not data:
            raise OSError("the server closed the connection")
        if not counting:
            reader.feed(data)
            continue
        data = pending + data
        end = data.rfind(b"\r\n") + 2
        complete = data[:end] if end >= 2 else b""
        lines = complete.count(b"\r\n")
        inner = complete[:-2]
        if (
            lines
            and complete[0] in b"+:"
            and (inner.count(b"\r\n+") + inner.count(b"\r\n:") == lines - 1)
        ):
            got += lines
            pending = data[end:] if end >= 2 else data
        else:  # an error (or another kind of) reply: parse from here on
            counting = False
            reader.feed(data)
            pending = b""
    return errors


def _reply_error(text: str, where: str, *, row: int | None = None) -> QuixSinksError:
    code = text.split(" ", 1)[0]
    if code in RETRYABLE_REPLIES:
        return RetryableError(f"{where}: the server answered {text}")
    if code in _AUTH_REPLIES:
        return DestinationAccessDeniedError(
            f"{where}: the server answered {text}; check 'username' and 'password'",
            location=where,
        )
    if code in ("ERR", "WRONGTYPE") and row is not None:
        return RecordError(f"{where}: the server answered {text}", row=row)
    return DestinationError(f"{where}: the server answered {text}", location=where)
