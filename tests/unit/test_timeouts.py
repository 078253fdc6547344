"""Unit tests for quixsinks.core.timeouts.StreamTimeoutTracker."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import pytest

from quixsinks.core.timeouts import StreamTimeoutTracker

LOGGER_NAME = "quixsinks.timeouts"
THREAD_NAME = "quixsinks-stream-timeout"


class FakeClock:
    """Manually advanced millisecond clock."""

    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class Recorder:
    """Callback that records every key it is called with."""

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, key: Any) -> None:
        with self._lock:
            self.keys.append(key)


def manual_tracker(
    timeout_ms: int = 1000,
    callback: Callable[[Any], object] | None = None,
    clock: FakeClock | None = None,
) -> StreamTimeoutTracker:
    """A tracker driven only by check_now (stop() disables lazy thread spawn)."""
    tracker = StreamTimeoutTracker(
        timeout_ms,
        callback if callback is not None else Recorder(),
        clock=clock if clock is not None else FakeClock(),
    )
    tracker.stop()
    return tracker


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll predicate until true or the bounded timeout elapses."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def tracker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


# ----------------------------------------------------------------- validation


def test_both_none_disables_tracking() -> None:
    tracker = StreamTimeoutTracker(None, None)
    assert tracker.enabled is False
    assert tracker.check_interval_ms is None


@pytest.mark.parametrize(
    ("timeout", "callback"),
    [
        (1000, None),  # no callback
        (None, Recorder()),  # no timeout
        (0, Recorder()),
        (-1, Recorder()),
        (-1000, Recorder()),
        (True, Recorder()),
        (1.5, Recorder()),
        (1000.0, Recorder()),
        ("1000", Recorder()),
        (1000, 42),  # not callable
        (1000, "module:function"),
        (1000, object()),
    ],
)
def test_any_other_combination_disables_with_zero_overhead(timeout: Any, callback: Any) -> None:
    """The seed: enabled only by a positive int timeout *and* a callable; anything else
    disables the feature (no error, no per-key dict, no thread)."""
    before = len(tracker_threads())
    tracker = StreamTimeoutTracker(timeout, callback)
    assert tracker.enabled is False
    assert tracker.stream_timeout_ms is None
    tracker.touch("a", now_ms=0)
    assert tracker.check_now(now_ms=10**9) == []
    assert tracker._last_seen is None
    assert len(tracker_threads()) == before


@pytest.mark.parametrize("bad_cycles", [0, -1, True, 1.0])
def test_non_positive_idle_exit_cycles_raises(bad_cycles: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("idle_exit_cycles must be a positive int")):
        StreamTimeoutTracker(1000, Recorder(), idle_exit_cycles=bad_cycles)


# ------------------------------------------------------------------- disabled


def test_disabled_tracker_methods_are_noops() -> None:
    before = len(tracker_threads())
    tracker = StreamTimeoutTracker(None, None, clock=FakeClock())
    tracker.start()
    tracker.touch("a", now_ms=0)
    assert tracker.check_now(now_ms=10**9) == []
    assert tracker.tracked_keys() == []
    assert len(tracker) == 0
    assert tracker.running is False
    # No per-key state allocated and no thread started.
    assert tracker._last_seen is None
    assert len(tracker_threads()) == before
    with tracker:
        pass
    tracker.stop()


# ------------------------------------------------------- fire-and-evict (manual)


def test_fires_once_then_evicts() -> None:
    clock = FakeClock()
    recorder = Recorder()
    tracker = manual_tracker(1000, recorder, clock)
    tracker.touch("sensor-a")
    clock.now_ms = 1500
    assert tracker.check_now() == ["sensor-a"]
    assert tracker.tracked_keys() == []
    clock.now_ms = 2500
    assert tracker.check_now() == []
    assert recorder.keys == ["sensor-a"]


def test_fires_only_silent_key() -> None:
    clock = FakeClock()
    recorder = Recorder()
    tracker = manual_tracker(1000, recorder, clock)
    tracker.touch("sensor-a", now_ms=0)
    tracker.touch("sensor-b", now_ms=0)
    tracker.touch("sensor-b", now_ms=900)
    tracker.check_now(now_ms=1200)
    assert recorder.keys == ["sensor-a"]
    assert tracker.tracked_keys() == ["sensor-b"]


def test_retouch_after_fire_fires_again() -> None:
    recorder = Recorder()
    tracker = manual_tracker(1000, recorder)
    tracker.touch("k", now_ms=0)
    tracker.check_now(now_ms=1000)
    tracker.touch("k", now_ms=5000)
    assert tracker.check_now(now_ms=5999) == []
    tracker.check_now(now_ms=6000)
    assert recorder.keys == ["k", "k"]


def test_no_fire_before_threshold() -> None:
    recorder = Recorder()
    tracker = manual_tracker(1000, recorder)
    tracker.touch("k", now_ms=0)
    assert tracker.check_now(now_ms=999) == []
    assert recorder.keys == []
    assert tracker.tracked_keys() == ["k"]


def test_fires_exactly_at_threshold() -> None:
    recorder = Recorder()
    tracker = manual_tracker(1000, recorder)
    tracker.touch("k", now_ms=0)
    assert tracker.check_now(now_ms=1000) == ["k"]
    assert recorder.keys == ["k"]


def test_fire_logs_info(caplog: pytest.LogCaptureFixture) -> None:
    tracker = manual_tracker(1000)
    tracker.touch("sensor-a", now_ms=0)
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        tracker.check_now(now_ms=1234)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert messages == ["Stream 'sensor-a' timed out (silence 1234 ms >= threshold 1000 ms)"]
    assert all(r.name == LOGGER_NAME for r in caplog.records)


def test_custom_logger_is_used(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tests.custom.timeouts")
    tracker = StreamTimeoutTracker(1000, Recorder(), clock=FakeClock(), logger=logger)
    tracker.stop()
    tracker.touch("k", now_ms=0)
    with caplog.at_level(logging.INFO, logger="tests.custom.timeouts"):
        tracker.check_now(now_ms=1000)
    assert [r.name for r in caplog.records] == ["tests.custom.timeouts"]


def test_ttl_sweep_drops_without_firing_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    tracker = manual_tracker(1000, recorder)
    tracker.touch("stale", now_ms=0)
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        assert tracker.check_now(now_ms=3000) == []
    assert recorder.keys == []
    assert tracker.tracked_keys() == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "Stream 'stale' dropped by TTL sweep (silence >= 3x threshold 1000 ms)"
    ]
    assert not [r for r in caplog.records if r.levelno == logging.INFO]


def test_raising_callback_is_evicted_first_and_counts_as_fired(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The seed: "The eviction happens before the callback, so a callback that raises still
    counts as fired: the same key will not fire again for the current silence period."""
    calls: list[Any] = []
    tracked_during_callback: list[list[Any]] = []
    tracker: StreamTimeoutTracker

    def fails(key: Any) -> None:
        calls.append(key)
        tracked_during_callback.append(tracker.tracked_keys())
        raise RuntimeError("boom")

    tracker = manual_tracker(1000, fails)
    tracker.touch("k", now_ms=0)
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        assert tracker.check_now(now_ms=1000) == ["k"]
        assert tracker.check_now(now_ms=1100) == []
        assert tracker.check_now(now_ms=5000) == []
    assert calls == ["k"]
    assert tracked_during_callback == [[]]  # evicted before the callback ran
    assert tracker.tracked_keys() == []
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is not None
    assert isinstance(errors[0].exc_info[1], RuntimeError)
    assert any("timed out" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)

    # a fresh silence period after the key publishes again fires again
    tracker.touch("k", now_ms=6000)
    assert tracker.check_now(now_ms=7000) == ["k"]
    assert calls == ["k", "k"]


def test_failing_callback_does_not_block_other_keys() -> None:
    fired: list[Any] = []

    def fails_for_a(key: Any) -> None:
        if key == "a":
            raise RuntimeError("boom")
        fired.append(key)

    tracker = manual_tracker(1000, fails_for_a)
    tracker.touch("a", now_ms=0)
    tracker.touch("b", now_ms=0)
    assert tracker.check_now(now_ms=1000) == ["a", "b"]
    assert fired == ["b"]
    assert tracker.tracked_keys() == []


@pytest.mark.parametrize("key", [b"sensor-a", 42, "sensor-a", ("tenant", 7)])
def test_callback_receives_raw_key_object(key: Hashable) -> None:
    received: list[Any] = []
    tracker = manual_tracker(1000, received.append)
    tracker.touch(key, now_ms=0)
    tracker.check_now(now_ms=1000)
    assert len(received) == 1
    assert received[0] is key
    assert type(received[0]) is type(key)


def test_none_key_ignored() -> None:
    recorder = Recorder()
    tracker = manual_tracker(1000, recorder)
    tracker.touch(None, now_ms=0)
    assert tracker.tracked_keys() == []
    assert len(tracker) == 0
    tracker.check_now(now_ms=10_000)
    assert recorder.keys == []


def test_touch_during_callback_keeps_fresh_entry() -> None:
    tracker: StreamTimeoutTracker

    def retouch(key: Any) -> None:
        # Simulates a concurrent touch() racing with the eviction.
        tracker.touch(key, now_ms=1000)

    tracker = manual_tracker(1000, retouch)
    tracker.touch("k", now_ms=0)
    assert tracker.check_now(now_ms=1000) == ["k"]
    assert tracker.tracked_keys() == ["k"]
    assert tracker.check_now(now_ms=1999) == []
    assert tracker.check_now(now_ms=2000) == ["k"]


def test_concurrent_checks_do_not_double_fire() -> None:
    entered = threading.Event()
    release = threading.Event()
    calls: list[Any] = []

    def slow(key: Any) -> None:
        calls.append(key)
        entered.set()
        release.wait(5)

    tracker = manual_tracker(1000, slow)
    tracker.touch("k", now_ms=0)
    worker = threading.Thread(target=tracker.check_now, kwargs={"now_ms": 1000})
    worker.start()
    try:
        assert entered.wait(5)
        assert tracker.check_now(now_ms=1000) == []
    finally:
        release.set()
        worker.join(5)
    assert calls == ["k"]
    assert tracker.tracked_keys() == []


def test_tracked_keys_snapshot_and_len() -> None:
    tracker = manual_tracker(1000)
    tracker.touch("a", now_ms=0)
    tracker.touch("b", now_ms=0)
    tracker.touch("a", now_ms=10)
    snapshot = tracker.tracked_keys()
    assert isinstance(snapshot, list)
    assert set(snapshot) == {"a", "b"}
    assert len(tracker) == 2
    tracker.touch("c", now_ms=20)
    assert set(snapshot) == {"a", "b"}
    assert len(tracker) == 3


def test_injected_clock_used_when_now_ms_omitted() -> None:
    clock = FakeClock(10_000)
    recorder = Recorder()
    tracker = manual_tracker(1000, recorder, clock)
    tracker.touch("k")
    clock.now_ms = 10_999
    assert tracker.check_now() == []
    clock.now_ms = 11_000
    assert tracker.check_now() == ["k"]


# -------------------------------------------------------------- check interval


@pytest.mark.parametrize(
    ("timeout_ms", "expected"),
    [
        (1, 100),
        (100, 100),
        (499, 100),
        (500, 100),
        (1000, 200),
        (2500, 500),
        (5000, 1000),
        (60_000, 1000),
        (10**9, 1000),
    ],
)
def test_check_interval_formula(timeout_ms: int, expected: int) -> None:
    tracker = StreamTimeoutTracker(timeout_ms, Recorder())
    assert tracker.check_interval_ms == expected


def test_check_interval_override() -> None:
    tracker = StreamTimeoutTracker(60_000, Recorder(), check_interval_ms=7)
    assert tracker.check_interval_ms == 7


@pytest.mark.parametrize("override", [None, 0, -5, True, 2.5])
def test_invalid_check_interval_override_uses_formula(override: Any) -> None:
    tracker = StreamTimeoutTracker(2500, Recorder(), check_interval_ms=override)
    assert tracker.check_interval_ms == 500


# ---------------------------------------------------------- background thread


def test_background_thread_fires_with_real_clock() -> None:
    recorder = Recorder()
    tracker = StreamTimeoutTracker(50, recorder, check_interval_ms=10)
    with tracker:
        tracker.touch(b"sensor-a")
        assert wait_until(lambda: recorder.keys == [b"sensor-a"])
        assert tracker.tracked_keys() == []
    assert tracker.running is False


def test_touch_starts_thread_lazily() -> None:
    tracker = StreamTimeoutTracker(50, Recorder(), check_interval_ms=10)
    assert tracker.running is False
    try:
        tracker.touch("k")
        assert tracker.running is True
    finally:
        tracker.stop()


def test_thread_self_terminates_when_idle_and_touch_respawns() -> None:
    tracker = StreamTimeoutTracker(10_000, Recorder(), check_interval_ms=10, idle_exit_cycles=2)
    try:
        tracker.start()
        assert tracker.running is True
        assert wait_until(lambda: not tracker.running)
        tracker.touch("k")
        assert tracker.running is True
    finally:
        tracker.stop()
    assert tracker.running is False


def test_thread_stays_alive_while_keys_tracked() -> None:
    tracker = StreamTimeoutTracker(10_000, Recorder(), check_interval_ms=5, idle_exit_cycles=1)
    try:
        tracker.touch("k")
        time.sleep(0.05)  # ~10 cycles, each would exit if the tracker were empty
        assert tracker.running is True
    finally:
        tracker.stop()


def test_stop_prevents_respawn() -> None:
    tracker = StreamTimeoutTracker(50, Recorder(), check_interval_ms=10)
    tracker.start()
    tracker.stop()
    assert tracker.running is False
    tracker.touch("k")
    assert tracker.running is False
    assert tracker.tracked_keys() == ["k"]


def test_start_and_stop_are_idempotent() -> None:
    before = len(tracker_threads())
    tracker = StreamTimeoutTracker(10_000, Recorder(), check_interval_ms=10, idle_exit_cycles=1000)
    tracker.start()
    tracker.start()
    assert len(tracker_threads()) == before + 1
    tracker.stop()
    tracker.stop()
    assert tracker.running is False
    assert len(tracker_threads()) == before


def test_start_after_stop_restarts_thread() -> None:
    tracker = StreamTimeoutTracker(10_000, Recorder(), check_interval_ms=10, idle_exit_cycles=1000)
    tracker.stop()
    tracker.start()
    try:
        assert tracker.running is True
    finally:
        tracker.stop()


def test_context_manager_starts_and_stops() -> None:
    tracker = StreamTimeoutTracker(10_000, Recorder(), check_interval_ms=10, idle_exit_cycles=1000)
    with tracker as entered:
        assert entered is tracker
        assert tracker.running is True
    assert tracker.running is False


def test_background_thread_has_configured_name_and_is_daemon() -> None:
    tracker = StreamTimeoutTracker(
        10_000,
        Recorder(),
        check_interval_ms=10,
        idle_exit_cycles=1000,
        thread_name="custom-timeout-thread",
    )
    with tracker:
        threads = [t for t in threading.enumerate() if t.name == "custom-timeout-thread"]
        assert len(threads) == 1
        assert threads[0].daemon is True


def test_background_loop_survives_raising_check(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    failures = {"left": 2}

    def flaky_clock() -> int:
        if failures["left"] > 0 and threading.current_thread().name == THREAD_NAME:
            failures["left"] -= 1
            raise RuntimeError("clock broke")
        return int(time.time() * 1000)

    tracker = StreamTimeoutTracker(30, recorder, check_interval_ms=5, clock=flaky_clock)
    with caplog.at_level(logging.ERROR, logger=LOGGER_NAME), tracker:
        tracker.touch("k")
        assert wait_until(lambda: recorder.keys == ["k"])
    assert failures["left"] == 0
    assert any("clock broke" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_concurrent_touch_and_check_smoke() -> None:
    recorder = Recorder()
    errors: list[BaseException] = []
    tracker = StreamTimeoutTracker(5, recorder, check_interval_ms=1)
    stop = threading.Event()

    def toucher(worker: int) -> None:
        try:
            for i in range(2000):
                tracker.touch((worker, i % 50))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def checker() -> None:
        try:
            while not stop.is_set():
                tracker.check_now()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with tracker:
        touchers = [threading.Thread(target=toucher, args=(w,)) for w in range(4)]
        checkers = [threading.Thread(target=checker) for _ in range(2)]
        for t in touchers + checkers:
            t.start()
        for t in touchers:
            t.join(5)
        stop.set()
        for t in checkers:
            t.join(5)
        assert not any(t.is_alive() for t in touchers + checkers)
        assert wait_until(lambda: len(tracker) == 0)
    assert errors == []
    assert all(isinstance(k, tuple) for k in recorder.keys)
