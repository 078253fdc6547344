"""The Redis client of the sink: redis-py and hiredis imported, connections built (timeouts,
TLS, credentials) and cached per process, the pipelined socket loop, and :func:`translate`,
the one error boundary of the destination.

Pipelines are written straight to a pooled connection's socket and their replies parsed by
hiredis (:func:`exchange`): redis-py's own pipeline would turn every command back into
Python objects. Errors, classified by redis-py's exception types and the reply's error
code (its first word):

* connection refused, lost or unanswered within ``socket_timeout``, and the replies
  ``OOM``, ``BUSY``, ``LOADING``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``MASTERDOWN``, ``READONLY``,
  ``NOREPLICAS``, ``MOVED``, ``ASK``: :class:`RetryableError` (a pipeline of overwrites is
  safe to send again);
* refused credentials (``AuthenticationError``, ``NOAUTH``, ``WRONGPASS``, ``NOPERM``):
  :class:`DestinationAccessDeniedError`, never retried;
* ``ERR``/``WRONGTYPE`` for one row's command: a row-level refusal of that row
  (:meth:`RedisClient.send` returns it; the sink refuses the row as ``on_error`` says,
  the other commands of the pipelines having been applied); a database the server does not
  have: an OptionError naming ``db``;
* a server certificate that does not verify: the non-retryable error of
  :mod:`quixsinks.core.tls`.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    OptionError,
    QuixSinksError,
    RecordError,
    RetryableError,
    timed_out,
)
from quixsinks.core.tls import certificate_error, certificate_failure
from quixsinks.core.vendors.http import import_client as import_vendor_client

from .options import RedisOptions
from .wire import SIMPLE_REPLIES, WINDOWS_PER_RETRY, Commands, Window, windows

__all__ = ["RETRYABLE_REPLIES", "RedisClient", "exchange", "import_client", "translate"]

# Connection pools per process (Python workers are reused between tasks), closed at exit
_POOLS: ClientCache[Any] = ClientCache("redis connection pools", lambda p: p.disconnect())
_CLUSTERS: ClientCache[Any] = ClientCache("redis cluster clients", lambda c: c.close())

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


def import_client() -> Any:
    """redis-py; MissingDependencyError naming the extra if it or hiredis (the reply parser
    the sink reads pipelines with) is missing."""
    import_vendor_client("hiredis", package="redis[hiredis]", extra="redis")
    return import_vendor_client("redis", package="redis[hiredis]", extra="redis")


def where(options: RedisOptions) -> str:
    """The server, for messages (no secret: a URL is not shown)."""
    if options.url:
        return "the redis server of 'url'"
    return f"redis {options.host}:{options.port} db {options.db}"


def translate(
    exc: BaseException, options: RedisOptions, *, row: int | None = None
) -> QuixSinksError | None:
    """The quixsinks error for what redis-py, hiredis or the socket raised (a reply error
    may come as its text); None for anything else (a bug: re-raised as it is)."""
    here = where(options)
    if isinstance(exc, QuixSinksError):
        return exc
    refused = certificate_failure(exc)
    if refused is not None:
        return certificate_error(
            here,
            refused,
            trust="set 'ssl_ca_certs' to a file holding its CA certificate (PEM)",
            skip="ssl_verify=false",
        )
    redis = import_client()
    if isinstance(exc, redis.AuthenticationError):
        return DestinationAccessDeniedError(
            f"{here}: the credentials were refused ({exc}); check 'username' and 'password' "
            "(or REDIS_PASSWORD)",
            location=here,
        )
    if isinstance(exc, redis.ResponseError):
        text = str(exc)
        if "DB index is out of range" in text or "invalid DB index" in text:
            return OptionError(
                f"{here}: the server has no database {options.db} ({text})",
                option="db",
                value=str(options.db),
            )
        return reply_error(text, here, row=row)
    if isinstance(exc, (redis.TimeoutError, TimeoutError)):
        limit = timed_out(options.socket_timeout, "socket_timeout")
        return RetryableError(f"{here}: {limit} ({exc})")
    if isinstance(exc, (redis.ConnectionError, OSError)):
        return RetryableError(f"{here}: connection failed: {exc}")
    return None


def reply_error(text: str, where: str, *, row: int | None = None) -> QuixSinksError:
    """The error for an error reply, by its code (the reply's first word)."""
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


class RedisClient:
    """The sink's way to its server: cached pools (or a cluster client), every call
    translated. Cheap to make: the connections live in the process caches."""

    def __init__(self, options: RedisOptions) -> None:
        self.options = options
        self.where = where(options)

    # ------------------------------------------------------------------ building

    def pool(self) -> Any:
        return _POOLS.get(client_key(self.options), self._new_pool)

    def cluster(self) -> Any:
        return _CLUSTERS.get(client_key(self.options, "cluster"), self._new_cluster)

    def redis(self) -> Any:
        """A redis-py client over the pool (ledger reads, the commit script)."""
        return import_client().Redis(connection_pool=self.pool())

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

    def _new_cluster(self) -> Any:
        from redis.cluster import RedisCluster

        opts = self.options
        common, tls = self._connection_kwargs()
        if tls:
            common["ssl"] = True
        if opts.url:
            return RedisCluster.from_url(opts.url, **common)
        return RedisCluster(host=opts.host, port=opts.port, **common)

    # ------------------------------------------------------------------ calls

    def call(self, fn: Callable[[], Any]) -> Any:
        """A redis-py client call with its failures translated."""
        try:
            return fn()
        except Exception as exc:
            error = translate(exc, self.options)
            if error is None or error is exc:
                raise
            raise error from None

    def on_connection(self, fn: Callable[[Any], Any], pool: Any = None) -> Any:
        """Run ``fn(connection)`` on a pooled connection; failures translated (the
        connection is dropped: replies may be left unread)."""
        pool = pool if pool is not None else self.pool()
        conn = None
        try:
            conn = pool.get_connection()
            return fn(conn)
        except Exception as exc:
            if conn is not None:
                conn.disconnect()
            error = translate(exc, self.options)
            if error is None or error is exc:
                raise
            raise error from None
        finally:
            if conn is not None:
                pool.release(conn)

    def command(self, *command: Any) -> Any:
        """One command on a pooled connection, e.g. ``("SADD", key, member)``."""
        return self.on_connection(functools.partial(_simple, command))

    def ping(self) -> None:
        """Connect once (AUTH, SELECT, PING)."""
        if self.options.cluster:
            self.call(lambda: self.cluster().ping())
        else:
            self.command("PING")

    # ------------------------------------------------------------------ pipelines

    def send(self, group: list[Window], keys: pa.Array, pool: Any = None) -> list[tuple[int, str]]:
        """Send a group of pipelines and read their replies. Returns the rows whose own
        command the server refused for what the row holds (``WRONGTYPE``, ``ERR``: row,
        reason), every other command having been applied; any other error reply is
        raised (the first one), naming its row where the row is known."""
        simple = self.options.data_type in SIMPLE_REPLIES
        errors = self.on_connection(functools.partial(exchange, group, simple=simple), pool)
        refused: dict[int, str] = {}
        for window, index, message in errors:
            row0, counts = group[window].row0, group[window].counts
            if group[window].mset:  # one MSET: its reply names no key
                last = row0 + len(counts) - 1
                raise reply_error(f"{message} (MSET of rows {row0} to {last})", self.where)
            # the reply index -> the row (rows may send several commands)
            row, seen = row0, 0
            for n in counts.to_pylist():
                seen += n
                if index < seen:
                    break
                row += 1
            key = keys[row].as_py()
            shown = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
            error = reply_error(f"{message} (key {shown!r}, row {row})", self.where, row=row)
            if not isinstance(error, RecordError):
                raise error
            if message.startswith("WRONGTYPE"):
                text = (
                    f"{self.where}: the key {shown!r} (row {row}) holds a value of another "
                    f"type than {self.options.data_type} ({message}); delete it or write to "
                    "other keys (key_prefix)"
                )
            else:
                text = error.message
            refused.setdefault(row, text)
        return sorted(refused.items())

    def send_cluster(self, commands: Commands, rows_per_pipeline: int) -> list[tuple[int, str]]:
        """Cluster: each row to the node serving its key's hash slot, in pipelines per node
        (every command of a row addresses one key). A MOVED reply refreshes the slot map
        and the whole batch is sent again (overwrites: safe). Returns the rows refused
        for what they hold, as :meth:`send` does."""
        from redis.crc import key_slot

        client = self.cluster()
        nodes = client.nodes_manager
        names: dict[str, int] = {}
        index = [
            names.setdefault(nodes.get_node_from_slot(key_slot(k)).name, len(names))
            for k in commands.keys.to_pylist()
        ]
        node_of_row = pa.array(index, pa.int32())
        refused: list[tuple[int, str]] = []
        try:
            for name, number in names.items():
                mask = pc.equal(node_of_row, number)
                rows = pc.indices_nonzero(mask).to_pylist()  # the node's rows in the batch
                counts = commands.counts.filter(mask)
                node_windows = windows(commands.data.filter(mask), counts, rows_per_pipeline)
                pool = client.get_node(node_name=name).redis_connection.connection_pool
                for first in range(0, len(node_windows), WINDOWS_PER_RETRY):
                    group = node_windows[first : first + WINDOWS_PER_RETRY]
                    for row, text in self.send(group, commands.keys.filter(mask), pool):
                        refused.append((rows[row], text))
        except RetryableError as exc:
            if "MOVED" in exc.message or "ASK" in exc.message or "connection" in exc.message:
                nodes.initialize()  # the slot map changed, or a node went away
            raise
        return sorted(refused)


def _simple(command: tuple[Any, ...], conn: Any) -> Any:
    conn.send_command(*command)
    return conn.read_response()


def exchange(windows: list[Window], conn: Any, simple: bool = False) -> list[tuple[int, int, str]]:
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
