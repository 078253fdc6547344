"""Destination clients on executors: one bounded per-process cache, one per-machine cap.

Spark reuses its Python worker processes between tasks, so a client (an HTTP session, a
database connection) made by one task can serve the next ones of the same process.
:class:`ClientCache` keeps them, least recently used first out, keyed by
:func:`client_key` (secrets only as a digest), and closes them when evicted or when the
process exits.

:class:`ClientPool` keeps clients that one user at a time must hold (a database connection
a transaction runs on): a user takes an idle one, or a new one, and gives it back when it
is clean.

:class:`MachineSlots` caps how many tasks of **one machine** hold a connection to one
server at once: each Spark task runs in its own Python worker process, so the cap is a
set of lock files, one ``flock`` per holder, in the user's private state directory
(:mod:`quixsinks.core.localstate`: ``<tmp>/quixsinks-<uid>``, 0700, checked before use).
The kernel drops a lock when its process dies, so a killed task never leaks a slot. On a
cluster the bound is per machine (and per user running executors): N executor machines
open up to N x ``slots`` connections.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

from .errors import RetryableError
from .localstate import default_state_directory, open_private_file, state_root
from .options import SinkOptions, shown_value

__all__ = [
    "CONNECT_TIMEOUT_CAP",
    "ClientCache",
    "ClientPool",
    "MachineSlots",
    "Secret",
    "client_key",
    "connect_timeout",
    "secret_digest",
]

logger = logging.getLogger("quixsinks.clients")
C = TypeVar("C")

_CACHES: weakref.WeakSet[ClientCache[Any] | ClientPool[Any]] = weakref.WeakSet()

#: The longest a client waits for a connection to open (a server that accepts does so in
#: milliseconds; the request timeout options bound the wait for answers).
CONNECT_TIMEOUT_CAP = 10.0


def connect_timeout(timeout: float) -> float:
    """The connect timeout that goes with a request timeout option: the shorter of the two."""
    return min(CONNECT_TIMEOUT_CAP, timeout)


def secret_digest(value: str) -> str:
    """What a cache key holds instead of a secret."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


class Secret:
    """A credential a destination carries to the executors (it pickles by value: they
    need it) that shows as ``***`` wherever it is printed and compares by digest."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    @classmethod
    def wrap(cls, value: str | None) -> Secret | None:
        return None if value is None else cls(value)

    def reveal(self) -> str:
        return self._value

    def digest(self) -> str:
        return secret_digest(self._value)

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self.digest())

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (self._value,))


def client_key(options: SinkOptions, *extra: Hashable) -> tuple[Hashable, ...]:
    """A cache key for a client made from ``options``: secret values only as a digest."""
    parts: list[Hashable] = [type(options).__qualname__]
    for spec in options.specs():
        value = getattr(options, spec.name)
        if value is not None and shown_value(spec, value) != value:  # a secret, a URL password
            value = secret_digest(str(value))
        parts.append((spec.name, value))
    return (*parts, *extra)


class ClientCache(Generic[C]):
    """Clients of one kind, per process, at most ``max_size`` (LRU), closed on the way out.

    Args:
        name: for log lines, e.g. ``"postgresql connections"``.
        close: how to close a client (errors are logged, never raised).
        max_size: clients kept; the least recently used one is closed beyond that.
    """

    def __init__(self, name: str, close: Callable[[C], object], *, max_size: int = 8) -> None:
        self.name = name
        self._close = close
        self.max_size = max_size
        self._clients: OrderedDict[Hashable, C] = OrderedDict()
        self._lock = threading.Lock()
        _CACHES.add(self)

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, key: Hashable, create: Callable[[], C]) -> C:
        """The cached client for ``key``, made with ``create()`` when there is none."""
        with self._lock:
            client = self._clients.get(key)
            if client is not None:
                self._clients.move_to_end(key)
                return client
        client = create()
        evicted: list[C] = []
        with self._lock:
            self._clients[key] = client
            while len(self._clients) > self.max_size:
                evicted.append(self._clients.popitem(last=False)[1])
        for old in evicted:
            self._close_quietly(old)
        return client

    def discard(self, key: Hashable) -> None:
        """Close and forget the client of ``key`` (e.g. after its connection broke)."""
        with self._lock:
            client = self._clients.pop(key, None)
        if client is not None:
            self._close_quietly(client)

    def clear(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            self._close_quietly(client)

    def _close_quietly(self, client: C) -> None:
        _close_quietly(self.name, self._close, client)


class ClientPool(Generic[C]):
    """Clients of one kind kept open between uses, per process, each lent to one user at a
    time; at most ``max_idle`` idle ones per key, closed on the way out.

    :meth:`take` lends an idle client of ``key`` that ``alive`` accepts (the others are
    closed) or makes a new one; :meth:`give_back` keeps it for the next user when it is
    clean, else closes it. A process forked from this one (``os.fork``) starts with an
    empty pool and never closes its parent's clients (a closed connection would end the
    parent's session on the shared socket).

    Args:
        name: for log lines, e.g. ``"postgresql sessions"``.
        close: how to close a client (errors are logged, never raised).
        alive: whether an idle client can still be used (checked when it is taken).
        max_idle: idle clients kept per key; more are closed when given back.
    """

    def __init__(
        self,
        name: str,
        close: Callable[[C], object],
        *,
        alive: Callable[[C], bool] = lambda client: True,
        max_idle: int = 2,
    ) -> None:
        self.name = name
        self._close = close
        self._alive = alive
        self.max_idle = max_idle
        self._idle: dict[Hashable, list[C]] = {}
        self._lock = threading.Lock()
        _CACHES.add(self)

    def idle(self, key: Hashable) -> int:
        """How many idle clients of ``key`` there are."""
        with self._lock:
            return len(self._idle.get(key, ()))

    def take(self, key: Hashable, create: Callable[[], C]) -> C:
        """An idle client of ``key`` that is still alive, else ``create()``."""
        while True:
            with self._lock:
                idle = self._idle.get(key)
                client = idle.pop() if idle else None
            if client is None:
                return create()
            if self._alive(client):
                return client
            logger.debug("%s: an idle client is no longer usable; closing it", self.name)
            self._close_quietly(client)

    def give_back(self, key: Hashable, client: C, *, keep: bool) -> None:
        """Return a taken client: kept for the next user if ``keep`` and there is room,
        else closed."""
        if keep:
            with self._lock:
                idle = self._idle.setdefault(key, [])
                if len(idle) < self.max_idle:
                    idle.append(client)
                    return
        self._close_quietly(client)

    def clear(self) -> None:
        with self._lock:
            clients = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for client in clients:
            self._close_quietly(client)

    def _forget(self) -> None:
        """In a forked child: drop the parent's idle clients without closing them."""
        _INHERITED.extend(c for idle in self._idle.values() for c in idle)
        self._idle.clear()
        self._lock = threading.Lock()

    def _close_quietly(self, client: C) -> None:
        _close_quietly(self.name, self._close, client)


#: a forked child's inherited idle clients, kept (never closed, never garbage collected)
_INHERITED: list[Any] = []


def _forget_pools_in_child() -> None:
    for cache in list(_CACHES):
        if isinstance(cache, ClientPool):
            cache._forget()


os.register_at_fork(after_in_child=_forget_pools_in_child)


def _close_quietly(name: str, close: Callable[[C], object], client: C) -> None:
    """Close ``client``; closing is best effort (a failure is logged, never raised)."""
    try:
        close(client)
    except Exception as exc:
        logger.debug("%s: closing a client failed: %s", name, exc)


@atexit.register
def _close_all() -> None:
    for cache in list(_CACHES):
        cache.clear()


class MachineSlots:
    """At most ``slots`` holders at once on this machine, per ``server`` (see module doc).

    Args:
        kind: what is capped, e.g. ``"pg"`` (part of the lock folder's name).
        server: which server the cap is for (host and port; never credentials).
        slots: holders allowed at once.
    """

    def __init__(self, kind: str, server: str, slots: int, *, poll_seconds: float = 0.05) -> None:
        key = hashlib.sha1(server.encode()).hexdigest()[:16]
        self.name = f"{kind}-slots-{key}"
        self.server = server
        self.slots = slots
        self.poll_seconds = poll_seconds
        self._handle: int | None = None

    @property
    def folder(self) -> str:
        """The lock files' folder (checked and created by :meth:`acquire`)."""
        return str(state_root() / self.name)

    def acquire(self, timeout: float = 600.0) -> None:
        """Hold a slot; LocalStateError if the lock folder is not this user's alone."""
        folder = default_state_directory(self.name)
        deadline = time.monotonic() + timeout
        while True:
            for slot in range(self.slots):
                handle = open_private_file(folder / f"{slot}.lock", os.O_RDWR | os.O_CREAT)
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(handle)
                    continue
                self._handle = handle
                return
            if time.monotonic() > deadline:
                raise RetryableError(
                    f"{self.server}: no free connection slot on this machine in {timeout:.0f} s "
                    f"({self.slots} allowed at once)"
                )
            time.sleep(self.poll_seconds)

    def release(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._handle, fcntl.LOCK_UN)
            os.close(self._handle)
            self._handle = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()
