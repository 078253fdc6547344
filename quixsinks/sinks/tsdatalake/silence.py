"""Per-key silence detection for Spark: executors report keys, commits record them, and a
watcher in the driver process fires the callback, also while the input is silent.

Spark runs no micro-batch while the input is silent and a streaming commit runs in a
short-lived Python worker, so the :class:`~quixsinks.core.timeouts.StreamTimeoutTracker`
cannot live in the sink. The pieces:

1. every task reports the distinct keys it wrote with the time it saw them (at most
   ``stream_timeout_max_keys`` per task; more are counted as ``silence_keys_dropped``);
2. every commit merges them into a small JSON *spool* file on the driver host,
   ``<stream_timeout_dir>/<query id>.json``, together with the timeout, and prunes keys
   silent for more than 3x the timeout;
3. a :class:`SilenceWatcher` in the driver process (started by :func:`track`) polls that
   file and feeds a StreamTimeoutTracker, whose background thread fires the callback.

The spool holds data, never code: the watcher takes its callback only from the user's
process (``track``'s argument, the query's own ``on_stream_timeout`` option, or a sink
class registered there), and ignores any callback a spool file names. The spool's
directory is private to the user (:mod:`quixsinks.core.localstate`: by default
``<tmp>/quixsinks-<uid>/silence``, mode 0700, checked before every use; files 0600): a
directory another local user could reach is refused with a
:class:`~quixsinks.core.errors.LocalStateError`.

With ``stream_timeout_state=memory`` (Quix's behaviour) a watcher ignores last-seen times
from before its Spark application started: a key quiet across a driver restart does not
fire. With ``persisted`` it takes them, so such a key still fires.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

from quixsinks.core.errors import LocalStateError
from quixsinks.core.localstate import (
    default_state_directory,
    private_directory,
    read_private_file,
    state_root,
    write_private_file,
)
from quixsinks.core.options import load_callable, normalize_name
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
_QUERY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
#: fields older releases wrote into spool files; never loaded
_CALLBACK_FIELDS = ("on_stream_timeout", "sink_class")
_DIR_REMEDY = "set the option stream_timeout_dir to a directory of your own"


def default_directory() -> str:
    """``<tmp>/quixsinks-<uid>/silence`` (created and checked on first use)."""
    return str(state_root() / "silence")


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
    """The spool file of one streaming query (driver host), in a private directory."""

    def __init__(self, query_id: str, directory: str | None = None) -> None:
        if not _QUERY_ID.match(query_id):
            raise ValueError(f"silence spool: {query_id!r} is not a streaming query id")
        self.query_id = query_id
        self.directory = directory
        self.path = Path(os.path.abspath(directory or default_directory())) / f"{query_id}.json"

    def check_directory(self) -> Path:
        """Create the spool's directory (0700) or check it before use.

        Raises:
            LocalStateError: the directory is a symbolic link, not this user's, or open to
                group or others (the message names it and says how to fix it).
        """
        return self.directory_for(self.directory)

    @staticmethod
    def directory_for(directory: str | None) -> Path:
        """:meth:`check_directory` for a ``stream_timeout_dir`` (None: the default)."""
        if directory:
            return private_directory(directory, remedy=_DIR_REMEDY)
        return default_state_directory("silence")

    def read(self) -> dict[str, Any] | None:
        """The spool's content, or None when there is none; a file that is not this user's
        own (a symbolic link, another owner, writable by others) is ignored (logged)."""
        try:
            data = read_private_file(self.path)
        except FileNotFoundError:
            return None
        except (OSError, LocalStateError) as exc:
            logger.warning("silence spool %s refused (%s); ignored", self.path, exc)
            return None
        try:
            return dict(json.loads(data))
        except ValueError as exc:
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
        number of tracked keys. Keys silent for 3x the timeout are pruned. The file is
        replaced atomically, mode 0600 (it holds record keys).

        Raises:
            LocalStateError: the spool's directory is refused (see :meth:`check_directory`).
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self.check_directory()
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
        for name in _CALLBACK_FIELDS:
            body.pop(name, None)
        write_private_file(self.path, json.dumps(body).encode())
        return len(live)


class SilenceWatcher:
    """Fires ``on_stream_timeout`` for the keys of one streaming query that go silent.

    Runs in the driver process. Reads the query's spool file (see the module docstring)
    whenever it changes and feeds a StreamTimeoutTracker with each key's last-seen time.
    The callback comes from this process only; a callback a spool file names is ignored.

    Args:
        query_id: the streaming query's id (``query.id``).
        on_stream_timeout: the callback.
        find_callback: without ``on_stream_timeout``: called once the spool has keys, returns
            the callback or None (``track`` looks at the query's options and registered sinks).
        directory: the sink's ``stream_timeout_dir`` (default
            ``<tmp>/quixsinks-<uid>/silence``).
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
        find_callback: Callable[[], Callable[[Any], object] | None] | None = None,
        directory: str | None = None,
        since_ms: int | None = None,
        is_active: Callable[[], bool] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.spool = SilenceSpool(query_id, directory)
        self._callback = on_stream_timeout
        self._find_callback = find_callback
        self._warned: set[str] = set()
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
        """Read the spool if it changed; returns how many keys were (re)touched.

        Raises:
            LocalStateError: the spool's directory is refused.
        """
        self.spool.check_directory()
        try:
            mtime = os.lstat(self.spool.path).st_mtime_ns
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
        named = [name for name in _CALLBACK_FIELDS if state.get(name)]
        if named:
            self._warn_once(
                "named",
                "silence spool %s names a callback (%s); ignored: the callback comes only "
                "from this process",
                self.spool.path,
                ", ".join(named),
            )
        callback = self._callback
        if callback is None and self._find_callback is not None:
            try:
                callback = self._find_callback()
            except Exception:
                logger.exception("silence detection: cannot load the on_stream_timeout callback")
                callback = None
        if callback is None:
            self._warn_once(
                "none",
                "silence detection for query %s: no on_stream_timeout callback in this "
                "process; pass one to track(query, on_stream_timeout=...)",
                self.spool.query_id,
            )
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

    def _warn_once(self, what: str, message: str, *args: object) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning(message, *args)

    def start(self) -> SilenceWatcher:
        """Start polling in a daemon thread.

        Raises:
            LocalStateError: the spool's directory is refused (checked here first).
        """
        self.spool.check_directory()
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
            except LocalStateError as exc:
                logger.error("silence watcher stopped: %s", exc.message)
                break
            except Exception:
                logger.exception("silence watcher %s: poll failed; continuing", self.spool.path)
            interval = self.tracker.check_interval_ms if self.tracker else None
            self._stop.wait(interval / 1000 if interval else _POLL_BEFORE_CONFIG_S)
        if self.tracker is not None:
            self.tracker.stop()


def track(
    query: Any,
    on_stream_timeout: Callable[[Any], object] | str | None = None,
    *,
    directory: str | None = None,
) -> SilenceWatcher:
    """Start silence detection for a running ``tsdatalake`` streaming query.

    The callback is the first of, all from this process, never from the spool file:

    1. ``on_stream_timeout``: a callable, or an import path ``"package.module:function"``;
    2. the query's own ``on_stream_timeout`` option, read from ``query`` (classic Spark;
       under Spark Connect the client cannot see a query's options: pass it here);
    3. the ``on_stream_timeout`` attribute of the sink class registered in this process
       with ``quixsinks.register(spark, MySink)`` under the query's format name.

    Args:
        query: the started ``StreamingQuery``.
        on_stream_timeout: the callback (see above).
        directory: the sink's ``stream_timeout_dir``, if set.

    Returns:
        The started :class:`SilenceWatcher`; it stops by itself when the query stops (or
        call ``stop()``).

    Raises:
        LocalStateError: the spool's directory is refused (see :mod:`.silence`).
        OptionError: ``on_stream_timeout`` is an import path that cannot be imported.
    """
    callback = (
        load_callable(on_stream_timeout, option_name="on_stream_timeout")
        if isinstance(on_stream_timeout, str)
        else on_stream_timeout
    )
    since = None
    try:
        since = int(query.sparkSession.sparkContext.startTime)
    except Exception:  # Spark Connect: no SparkContext; the watcher's own start time
        since = None
    return SilenceWatcher(
        str(query.id),
        on_stream_timeout=callback,
        find_callback=None if callback is not None else lambda: _callback_of(query),
        directory=directory,
        since_ms=since,
        is_active=lambda: bool(query.isActive),
    ).start()


def _callback_of(query: Any) -> Callable[[Any], object] | None:
    """The callback the query's own sink names, looked up in this process: its
    ``on_stream_timeout`` option, else its registered sink class's attribute."""
    name, options = _query_sink(query)
    path = options.get(normalize_name("on_stream_timeout"))
    if path:
        return load_callable(path, option_name="on_stream_timeout")
    if name:
        from quixsinks.spark.registry import registered_sink

        callback = getattr(registered_sink(name), "on_stream_timeout", None)
        if callable(callback):
            return callback  # type: ignore[no-any-return]
    return None


def _query_sink(query: Any) -> tuple[str | None, dict[str, str]]:
    """The format name and the options (names normalized) the user started ``query``
    with, read through the JVM query object; (None, {}) where that is not reachable
    (Spark Connect)."""
    try:
        execution = query._jsq.streamingQuery()
    except Exception:
        return None, {}
    name: str | None = None
    options: dict[str, str] = {}
    try:
        name = str(execution.sink().name())
    except Exception:
        logger.debug("silence detection: the query's sink name is not readable", exc_info=True)
    try:
        pairs = execution.logicalPlan().writeOptions().iterator()
        while pairs.hasNext():
            pair = pairs.next()
            options[normalize_name(str(pair._1()))] = str(pair._2())
    except Exception:
        logger.debug("silence detection: the query's options are not readable", exc_info=True)
    return name, options
