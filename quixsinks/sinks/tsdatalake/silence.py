"""Per-key silence detection for Spark: executors report keys, commits record them, and a
watcher in the driver process fires the callback, also while the input is silent.

Spark runs no micro-batch while the input is silent and a streaming commit runs in a
short-lived Python worker, so the :class:`~quixsinks.core.timeouts.StreamTimeoutTracker`
cannot live in the sink. The pieces:

1. every task reports the distinct keys it wrote with the time it saw them (at most
   ``stream_timeout_max_keys`` per task; more are counted as ``silence_keys_dropped``);
2. every commit merges them into a small JSON *spool* file on the driver host,
   ``<stream_timeout_dir>/<query id>.json``, together with the timeout and the callback's
   import path, and prunes keys silent for more than 3x the timeout;
3. a :class:`SilenceWatcher` in the driver process (started for every streaming query by
   ``quixsinks.register(spark)``, or by :func:`track`) polls that file and feeds a
   StreamTimeoutTracker, whose background thread fires the callback.

With ``stream_timeout_state=memory`` (Quix's behaviour) a watcher ignores last-seen times
from before its Spark application started: a key quiet across a driver restart does not
fire. With ``persisted`` it takes them, so such a key still fires.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

from quixsinks.core.options import load_callable
from quixsinks.core.timeouts import StreamTimeoutTracker

__all__ = [
    "SilenceSpool",
    "SilenceWatcher",
    "decode_key",
    "default_directory",
    "encode_key",
    "track",
]

logger = logging.getLogger("quixsinks.sinks.tsdatalake.silence")

_POLL_BEFORE_CONFIG_S = 0.5


def default_directory() -> str:
    return os.path.join(tempfile.gettempdir(), "quixsinks-silence")


def encode_key(key: Any) -> list[Any]:
    """A JSON form of a raw key that :func:`decode_key` turns back into the same object."""
    if isinstance(key, bytes):
        return ["b", base64.b64encode(key).decode("ascii")]
    if isinstance(key, bool):
        return ["o", key]
    if isinstance(key, int):
        return ["i", key]
    if isinstance(key, float):
        return ["f", key]
    return ["s", str(key)]


def decode_key(item: list[Any]) -> Hashable:
    tag, value = item
    if tag == "b":
        return base64.b64decode(value)
    if tag == "i":
        return int(value)
    if tag == "f":
        return float(value)
    if tag == "o":
        return bool(value)
    return str(value)


class SilenceSpool:
    """The spool file of one streaming query (driver host)."""

    def __init__(self, query_id: str, directory: str | None = None) -> None:
        self.query_id = query_id
        self.path = Path(directory or default_directory()) / f"{query_id}.json"

    def read(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.path.read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("silence spool %s unreadable (%s); ignored", self.path, exc)
            return None

    def record(
        self,
        keys: Iterable[tuple[Any, int]],
        *,
        config: dict[str, Any],
        now_ms: int | None = None,
    ) -> int:
        """Merge ``(key, last seen ms)`` pairs into the file (commit side); returns the
        number of tracked keys. Keys silent for 3x the timeout are pruned."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        state = self.read() or {}
        merged: dict[str, list[Any]] = {
            json.dumps(item[0]): item for item in state.get("keys", []) if len(item) == 2
        }
        for key, seen in keys:
            encoded = encode_key(key)
            name = json.dumps(encoded)
            previous = merged.get(name)
            if previous is None or previous[1] < seen:
                merged[name] = [encoded, int(seen)]
        ttl = 3 * int(config["stream_timeout_ms"])
        live = [item for item in merged.values() if now - item[1] < ttl]
        body = {**config, "query_id": self.query_id, "updated_ms": now, "keys": live}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, self.path)
        return len(live)


class SilenceWatcher:
    """Fires ``on_stream_timeout`` for the keys of one streaming query that go silent.

    Runs in the driver process. Reads the query's spool file (see the module docstring)
    whenever it changes and feeds a StreamTimeoutTracker with each key's last-seen time.

    Args:
        query_id: the streaming query's id (``query.id``).
        on_stream_timeout: the callback; default: the one the sink's options name.
        directory: the sink's ``stream_timeout_dir`` (default ``<tmp>/quixsinks-silence``).
        since_ms: with ``stream_timeout_state=memory``, last-seen times before this are
            ignored (default: now; ``track`` passes the Spark application's start time).
        is_active: returns False once the query has stopped; the watcher then stops.
        clock: milliseconds now (tests).
    """

    def __init__(
        self,
        query_id: str,
        *,
        on_stream_timeout: Callable[[Any], object] | None = None,
        directory: str | None = None,
        since_ms: int | None = None,
        is_active: Callable[[], bool] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.spool = SilenceSpool(query_id, directory)
        self._callback = on_stream_timeout
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._since_ms = self._clock() if since_ms is None else since_ms
        self._is_active = is_active
        self.tracker: StreamTimeoutTracker | None = None
        self._applied: dict[Hashable, int] = {}
        self._mtime: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired: list[Any] = []

    def __repr__(self) -> str:
        return f"SilenceWatcher(query_id={self.spool.query_id!r}, spool={str(self.spool.path)!r})"

    # ------------------------------------------------------------------ polling

    def poll(self) -> int:
        """Read the spool if it changed; returns how many keys were (re)touched."""
        try:
            mtime = self.spool.path.stat().st_mtime_ns
        except FileNotFoundError:
            return 0
        if mtime == self._mtime:
            return 0
        state = self.spool.read()
        if state is None:
            return 0
        self._mtime = mtime
        tracker = self.tracker or self._make_tracker(state)
        if tracker is None or not tracker.enabled:
            return 0
        persisted = state.get("stream_timeout_state") == "persisted"
        touched = 0
        for item in state.get("keys", []):
            key, seen = decode_key(item[0]), int(item[1])
            if not persisted and seen < self._since_ms:
                continue
            if self._applied.get(key, -1) >= seen:
                continue
            self._applied[key] = seen
            tracker.touch(key, now_ms=seen)
            touched += 1
        return touched

    def _make_tracker(self, state: dict[str, Any]) -> StreamTimeoutTracker | None:
        callback = self._callback or _configured_callback(state)
        if callback is None:
            return None

        def fire(key: Any) -> object:
            self.fired.append(key)
            return callback(key)

        self.tracker = StreamTimeoutTracker(
            state.get("stream_timeout_ms"),
            fire,
            clock=self._clock,
            logger=logging.getLogger("quixsinks.timeouts"),
            thread_name=f"quixsinks-silence-{self.spool.query_id[:8]}",
        )
        if not self._stop.is_set():
            self.tracker.start()
        return self.tracker

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> SilenceWatcher:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run,
                name=f"quixsinks-silence-watch-{self.spool.query_id[:8]}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        if self.tracker is not None:
            self.tracker.stop()

    def __enter__(self) -> SilenceWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
                if self._is_active is not None and not self._is_active():
                    break
            except Exception:
                logger.exception("silence watcher %s: poll failed; continuing", self.spool.path)
            interval = self.tracker.check_interval_ms if self.tracker else None
            self._stop.wait(interval / 1000 if interval else _POLL_BEFORE_CONFIG_S)
        if self.tracker is not None:
            self.tracker.stop()


def _configured_callback(state: dict[str, Any]) -> Callable[[Any], object] | None:
    """The callback the sink's options (or its registered subclass) name, or None."""
    path = state.get("on_stream_timeout")
    try:
        if path:
            return load_callable(str(path), option_name="on_stream_timeout")
        sink_class = state.get("sink_class")
        if sink_class:
            owner = load_callable(str(sink_class), option_name="on_stream_timeout")
            callback = getattr(owner, "on_stream_timeout", None)
            return callback if callable(callback) else None
    except Exception:
        logger.exception("silence detection: cannot load the on_stream_timeout callback")
    return None


def track(
    query: Any,
    on_stream_timeout: Callable[[Any], object] | None = None,
    *,
    directory: str | None = None,
) -> SilenceWatcher:
    """Start silence detection for a running ``tsdatalake`` streaming query.

    Not needed after ``quixsinks.register(spark)``, which starts a watcher for every
    streaming query of the session. Returns the started :class:`SilenceWatcher`; it stops
    by itself when the query stops (or call ``stop()``).
    """
    since = None
    try:
        since = int(query.sparkSession.sparkContext.startTime)
    except Exception:  # Spark Connect: no SparkContext; the watcher's own start time
        since = None
    return SilenceWatcher(
        str(query.id),
        on_stream_timeout=on_stream_timeout,
        directory=directory,
        since_ms=since,
        is_active=lambda: bool(query.isActive),
    ).start()
