"""Per-key silence detection for sinks.

This module provides :class:`StreamTimeoutTracker`, a small, stdlib-only and
sink-agnostic helper that detects when individual message keys ("streams") go
quiet and invokes a user callback once per silent key.

A *stream* is one message key. The silence threshold (``stream_timeout_ms``)
is the same for every key observed by a tracker. A sink composes one tracker,
calls :meth:`StreamTimeoutTracker.touch` for every record it receives,
optionally calls :meth:`StreamTimeoutTracker.check_now` after each flush, and
starts/stops the tracker in its setup/cleanup hooks. A background daemon
thread runs the check periodically, so keys still fire when the input goes
completely silent and the sink stops flushing.

Semantics in short:

* **Fire-and-evict**: a key silent for at least ``stream_timeout_ms`` is
  evicted, then ``on_stream_timeout(key)`` is called (outside the internal
  lock) and an INFO line is logged. The eviction happens before the callback,
  so a callback that raises still counts as fired: its exception is logged
  and swallowed, and the key does not fire again for the current silence
  period. If the key publishes again later it is a fresh stream with a new
  baseline and can fire again.
* **Disabled with zero overhead** unless ``stream_timeout_ms`` is a positive
  ``int`` *and* ``on_stream_timeout`` is callable: any other combination
  (``None``, ``0``, a negative timeout, no callback) allocates no per-key
  dict and starts no thread.
* **TTL sweep**: a key silent for at least ``3 * stream_timeout_ms`` is
  dropped *without* firing (a WARNING is logged). This bounds memory when
  checks could not run for a long time.
* State is in memory only; it is lost on restart or rebalance.

Example:
    >>> tracker = StreamTimeoutTracker(60_000, lambda key: print("silent", key))
    >>> tracker.start()
    >>> tracker.touch(b"sensor-a")
    >>> tracker.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Any

__all__ = ["StreamTimeoutCallback", "StreamTimeoutTracker"]

#: Signature of the per-key timeout callback; it receives the raw key.
StreamTimeoutCallback = Callable[[Any], object]

_DEFAULT_LOGGER_NAME = "quixsinks.timeouts"
_MIN_CHECK_INTERVAL_MS = 100
_MAX_CHECK_INTERVAL_MS = 1000
_CHECK_INTERVAL_DIVISOR = 5
_TTL_MULTIPLIER = 3
_JOIN_TIMEOUT_S = 5.0


def _wall_clock_ms() -> int:
    """Return the current wall-clock time in integer milliseconds."""
    return int(time.time() * 1000)


def _is_positive_int(value: object) -> bool:
    """Return True for a positive ``int`` (``bool`` is rejected)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class StreamTimeoutTracker:
    """Detect per-key silence and fire a callback once per silent key.

    The tracker records, for every key passed to :meth:`touch`, the time it
    was last seen. :meth:`check_now` (run periodically by a background daemon
    thread, and callable directly, e.g. after a sink flush) compares each
    key's silence with the threshold:

    * silence ``>= 3 * stream_timeout_ms``: the key is dropped without firing
      and a WARNING is logged (TTL safety sweep);
    * silence ``>= stream_timeout_ms``: the key is evicted, then
      ``on_stream_timeout(key)`` is called outside the lock and an INFO line
      is logged. A callback that raises still counts as fired: the error is
      logged and swallowed, and the key fires again only after it has been
      touched again and gone silent again.

    Eviction happens under the lock before any callback runs, so concurrent
    checks never fire the same key twice, and a :meth:`touch` racing with the
    callback starts a fresh silence period.

    Tracking is enabled only when ``stream_timeout_ms`` is a positive ``int``
    and ``on_stream_timeout`` is callable. Any other combination (``None``,
    ``0`` or a negative timeout, a missing callback) disables it: a disabled
    tracker allocates no per-key state, never starts a thread, and all its
    methods are no-ops.

    The background thread is started by :meth:`start` or lazily by
    :meth:`touch`. It exits by itself after ``idle_exit_cycles`` consecutive
    check cycles during which no key was tracked; the next :meth:`touch`
    starts it again. After :meth:`stop`, :meth:`touch` no longer starts the
    thread (only an explicit :meth:`start` does), which also gives a purely
    manual tracker driven by :meth:`check_now`. The tracker can be used as a
    context manager: ``__enter__`` calls :meth:`start` and ``__exit__`` calls
    :meth:`stop`.

    The callback runs on the checking thread (the background thread or the
    caller of :meth:`check_now`, e.g. a sink's flush thread); it must do
    bounded, non-blocking work.

    Args:
        stream_timeout_ms: Per-key silence threshold in milliseconds; tracking
            is disabled unless it is a positive ``int``.
        on_stream_timeout: Called with the raw key (exactly the object given
            to :meth:`touch`) when that key has been silent for at least
            ``stream_timeout_ms``; tracking is disabled unless it is callable.
        check_interval_ms: Period of the background check. A positive
            ``int`` is used as given; anything else selects the default
            ``max(100, min(1000, stream_timeout_ms // 5))``.
        idle_exit_cycles: Number of consecutive cycles with no tracked key
            after which the background thread exits (a positive ``int``).
        clock: Zero-argument callable returning the current time in integer
            milliseconds; defaults to the wall clock. Intended for tests.
        logger: Logger to use; defaults to ``logging.getLogger("quixsinks.timeouts")``.
        thread_name: Name of the background thread.

    Raises:
        ValueError: If ``idle_exit_cycles`` is not a positive ``int``.
    """

    def __init__(
        self,
        stream_timeout_ms: int | None,
        on_stream_timeout: StreamTimeoutCallback | None,
        *,
        check_interval_ms: int | None = None,
        idle_exit_cycles: int = 3,
        clock: Callable[[], int] | None = None,
        logger: logging.Logger | None = None,
        thread_name: str = "quixsinks-stream-timeout",
    ) -> None:
        if not _is_positive_int(idle_exit_cycles):
            raise ValueError("idle_exit_cycles must be a positive int")
        self._logger = logger if logger is not None else logging.getLogger(_DEFAULT_LOGGER_NAME)
        self._clock: Callable[[], int] = clock if clock is not None else _wall_clock_ms
        self._idle_exit_cycles = idle_exit_cycles
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop_event: threading.Event | None = None
        self._stopped = False

        self._timeout_ms: int | None = None
        self._callback: StreamTimeoutCallback | None = None
        self._check_interval_ms: int | None = None
        # Per-key state is only allocated when tracking is enabled.
        self._last_seen: dict[Hashable, int] | None = None

        if not _is_positive_int(stream_timeout_ms) or not callable(on_stream_timeout):
            return  # disabled, as the seed says: no dict, no thread
        assert isinstance(stream_timeout_ms, int)

        self._timeout_ms = stream_timeout_ms
        self._callback = on_stream_timeout
        if check_interval_ms is not None and _is_positive_int(check_interval_ms):
            self._check_interval_ms = check_interval_ms
        else:
            self._check_interval_ms = max(
                _MIN_CHECK_INTERVAL_MS,
                min(_MAX_CHECK_INTERVAL_MS, stream_timeout_ms // _CHECK_INTERVAL_DIVISOR),
            )
        self._last_seen = {}

    # ------------------------------------------------------------------ info

    @property
    def enabled(self) -> bool:
        """Whether stream-timeout tracking is active."""
        return self._timeout_ms is not None

    @property
    def stream_timeout_ms(self) -> int | None:
        """The silence threshold in milliseconds, or ``None`` when disabled."""
        return self._timeout_ms

    @property
    def check_interval_ms(self) -> int | None:
        """Background check period in milliseconds, or ``None`` when disabled."""
        return self._check_interval_ms

    @property
    def running(self) -> bool:
        """Whether the background thread is currently alive."""
        with self._lock:
            thread = self._thread
        return thread is not None and thread.is_alive()

    def tracked_keys(self) -> list[Hashable]:
        """Return a snapshot list of the currently tracked keys."""
        if self._last_seen is None:
            return []
        with self._lock:
            return list(self._last_seen)

    def __len__(self) -> int:
        """Return the number of currently tracked keys."""
        if self._last_seen is None:
            return 0
        with self._lock:
            return len(self._last_seen)

    # ------------------------------------------------------------- tracking

    def touch(self, key: Hashable | None, *, now_ms: int | None = None) -> None:
        """Record that ``key`` was just seen.

        The key is stored as-is and later passed unchanged to the callback.
        ``None`` keys are ignored. Starts the background thread if it is not
        running, unless :meth:`stop` has been called.

        Args:
            key: The message key (any hashable object).
            now_ms: The time to record, in milliseconds; defaults to the
                tracker's clock.
        """
        last_seen = self._last_seen
        if last_seen is None or key is None:
            return
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            last_seen[key] = now
            if not self._stopped and not self._thread_alive_locked():
                self._spawn_locked()

    def check_now(self, *, now_ms: int | None = None) -> list[Any]:
        """Run one silence check: sweep expired keys, evict and fire silent ones.

        Args:
            now_ms: The current time in milliseconds; defaults to the
                tracker's clock.

        Returns:
            The keys fired by this check (evicted, callback called; a callback
            that raised counts as fired).
        """
        last_seen = self._last_seen
        timeout_ms = self._timeout_ms
        callback = self._callback
        if last_seen is None or timeout_ms is None or callback is None:
            return []
        now = self._clock() if now_ms is None else now_ms
        ttl_ms = _TTL_MULTIPLIER * timeout_ms

        dropped: list[tuple[Hashable, int]] = []
        due: list[tuple[Hashable, int]] = []
        with self._lock:
            for key, seen in last_seen.items():
                silence = now - seen
                if silence >= ttl_ms:
                    dropped.append((key, silence))
                elif silence >= timeout_ms:
                    due.append((key, silence))
            # evict before any callback runs: a key fires once per silence period
            for key, _ in dropped:
                del last_seen[key]
            for key, _ in due:
                del last_seen[key]

        for key, _ in dropped:
            self._logger.warning(
                "Stream %r dropped by TTL sweep (silence >= 3x threshold %d ms)",
                key,
                timeout_ms,
            )

        fired: list[Any] = []
        for key, silence in due:
            fired.append(key)
            try:
                callback(key)
            except Exception:
                self._logger.exception(
                    "on_stream_timeout callback failed for stream %r; it counts as fired",
                    key,
                )
            self._logger.info(
                "Stream %r timed out (silence %d ms >= threshold %d ms)",
                key,
                silence,
                timeout_ms,
            )
        return fired

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the background check thread (idempotent).

        Also re-enables lazy respawning by :meth:`touch` after :meth:`stop`.
        No-op when tracking is disabled.
        """
        if not self.enabled:
            return
        with self._lock:
            self._stopped = False
            if not self._thread_alive_locked():
                self._spawn_locked()

    def stop(self) -> None:
        """Stop the background thread and wait for it to exit (idempotent).

        The join is bounded; if the thread is stuck in a slow callback a
        warning is logged and the daemon thread is left to exit on its own.
        After this call :meth:`touch` no longer starts the thread. Tracked
        keys are kept and :meth:`check_now` still works.
        """
        with self._lock:
            self._stopped = True
            thread = self._thread
            event = self._stop_event
            self._thread = None
            self._stop_event = None
        if event is not None:
            event.set()
        if thread is None or thread is threading.current_thread():
            return
        thread.join(_JOIN_TIMEOUT_S)
        if thread.is_alive():
            self._logger.warning(
                "Stream-timeout thread %r did not exit within %.1f s",
                thread.name,
                _JOIN_TIMEOUT_S,
            )

    def __enter__(self) -> StreamTimeoutTracker:
        """Start the tracker and return it."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the tracker."""
        self.stop()

    # ------------------------------------------------------------- internal

    def _thread_alive_locked(self) -> bool:
        """Return whether the background thread is alive (lock held)."""
        return self._thread is not None and self._thread.is_alive()

    def _spawn_locked(self) -> None:
        """Create and start the background thread (lock held)."""
        event = threading.Event()
        thread = threading.Thread(
            target=self._run, args=(event,), name=self._thread_name, daemon=True
        )
        self._thread = thread
        self._stop_event = event
        thread.start()

    def _run(self, stop_event: threading.Event) -> None:
        """Background loop: check every interval until stopped or idle."""
        interval_ms = self._check_interval_ms
        last_seen = self._last_seen
        if interval_ms is None or last_seen is None:
            return
        interval_s = interval_ms / 1000.0
        me = threading.current_thread()
        idle_cycles = 0
        try:
            while not stop_event.wait(interval_s):
                try:
                    self.check_now()
                except Exception:
                    self._logger.exception("Stream-timeout check failed; continuing")
                with self._lock:
                    if last_seen:
                        idle_cycles = 0
                        continue
                    idle_cycles += 1
                    if idle_cycles >= self._idle_exit_cycles:
                        # Cleared under the lock, so a concurrent touch()
                        # either sees a key we keep checking or respawns us.
                        if self._thread is me:
                            self._thread = None
                            self._stop_event = None
                        return
        finally:
            with self._lock:
                if self._thread is me:
                    self._thread = None
                    self._stop_event = None
