"""Specification of RetryPolicy (quixsinks.core.backpressure), driven by a fake clock."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from quixsinks.core.backpressure import RetryPolicy, RetryStats
from quixsinks.core.errors import DestinationError, RetryableError, SinkBackpressureError


class FakeTime:
    """A clock that only moves when the policy sleeps (or a call takes time)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Flaky:
    """A call that raises the given errors in turn, then returns "done"."""

    def __init__(
        self, failures: Iterable[Exception], time: FakeTime | None = None, takes: float = 0.0
    ) -> None:
        self.failures = list(failures)
        self.calls = 0
        self.time = time
        self.takes = takes

    def __call__(self) -> str:
        self.calls += 1
        if self.time is not None:
            self.time.now += self.takes
        if self.failures:
            raise self.failures.pop(0)
        return "done"


class Always(Flaky):
    """A call that always raises ``make()``."""

    def __init__(self, make: Callable[[], Exception], **kwargs: Any) -> None:
        super().__init__([], **kwargs)
        self.make = make

    def __call__(self) -> str:
        super().__call__()
        raise self.make()


@pytest.fixture
def time() -> FakeTime:
    return FakeTime()


def policy(time: FakeTime, **kwargs: Any) -> RetryPolicy:
    settings: dict[str, Any] = {"jitter": False, **kwargs}
    return RetryPolicy(sleep=time.sleep, clock=time.clock, **settings)


def retryable() -> RetryableError:
    return RetryableError("flaky")


def test_success_returns_the_result_without_waiting(time: FakeTime) -> None:
    call = Flaky([])
    assert policy(time).call(call) == "done"
    assert (call.calls, time.sleeps) == (1, [])


def test_waits_retry_after_before_retrying(time: FakeTime) -> None:
    call = Flaky([SinkBackpressureError(3.0)])
    assert policy(time).call(call) == "done"
    assert time.sleeps == [3.0]


def test_retry_after_is_capped_at_max_backoff(time: FakeTime) -> None:
    policy(time, max_backoff=5.0).call(Flaky([SinkBackpressureError(60.0)]))
    assert time.sleeps == [5.0]


def test_zero_retry_after_retries_at_once(time: FakeTime) -> None:
    call = Flaky([SinkBackpressureError(0.0)])
    policy(time).call(call)
    assert (call.calls, time.sleeps) == (2, [0.0])


def test_backoff_without_jitter_doubles(time: FakeTime) -> None:
    policy(time, initial_backoff=0.5).call(Flaky([retryable() for _ in range(4)]))
    assert time.sleeps == [0.5, 1.0, 2.0, 4.0]


def test_backoff_is_capped_at_max_backoff(time: FakeTime) -> None:
    policy(time, initial_backoff=1.0, max_backoff=3.0).call(Flaky([retryable() for _ in range(4)]))
    assert time.sleeps == [1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize("retry", [1, 2, 3, 8])
def test_jittered_backoff_is_drawn_between_zero_and_the_ceiling(retry: int) -> None:
    jittered = RetryPolicy(initial_backoff=0.5, max_backoff=10.0, jitter=True)
    ceiling = min(10.0, 0.5 * 2 ** (retry - 1))
    pauses = [jittered.backoff(retry, None) for _ in range(200)]
    assert all(0.0 <= pause <= ceiling for pause in pauses)
    assert len(set(pauses)) > 1


def test_jitter_does_not_apply_to_retry_after() -> None:
    assert RetryPolicy(jitter=True).backoff(1, 2.0) == 2.0


def test_gives_up_after_max_attempts(time: FakeTime) -> None:
    call = Always(retryable)
    with pytest.raises(RetryableError, match=r"gave up after 3 attempt\(s\)"):
        policy(time, max_attempts=3).call(call)
    assert (call.calls, len(time.sleeps)) == (3, 2)


def test_giving_up_keeps_the_original_message(time: FakeTime) -> None:
    with pytest.raises(RetryableError, match=r"^flaky "):
        policy(time, max_attempts=2).call(Always(retryable))


def test_giving_up_chains_the_last_error(time: FakeTime) -> None:
    last = RetryableError("last one")
    with pytest.raises(RetryableError) as info:
        policy(time, max_attempts=2).call(Flaky([retryable(), last, retryable()]))
    assert info.value.__cause__ is last


def test_giving_up_on_backpressure_raises_backpressure(time: FakeTime) -> None:
    with pytest.raises(SinkBackpressureError) as info:
        policy(time, max_attempts=2).call(Always(lambda: SinkBackpressureError(1.5)))
    assert info.value.retry_after == 1.5
    assert "gave up after 2 attempt(s)" in str(info.value)


def test_giving_up_keeps_retry_after_of_a_retryable_error(time: FakeTime) -> None:
    with pytest.raises(RetryableError) as info:
        policy(time, max_attempts=1).call(Always(lambda: RetryableError("x", retry_after=4.0)))
    assert info.value.retry_after == 4.0


class ThrottledError(RetryableError):
    """A sink's own retryable error."""


def test_giving_up_keeps_the_class_of_the_sinks_error(time: FakeTime) -> None:
    with pytest.raises(ThrottledError):
        policy(time, max_attempts=2).call(Always(lambda: ThrottledError("throttled")))


def test_one_attempt_never_retries(time: FakeTime) -> None:
    call = Always(retryable)
    with pytest.raises(RetryableError):
        policy(time, max_attempts=1).call(call)
    assert (call.calls, time.sleeps) == (1, [])


def test_gives_up_when_the_next_pause_would_pass_the_deadline(time: FakeTime) -> None:
    call = Always(retryable)
    with pytest.raises(RetryableError, match="gave up after 2"):
        policy(time, initial_backoff=1.0, deadline=2.0, max_attempts=10).call(call)
    assert time.sleeps == [1.0]


def test_retry_after_beyond_the_deadline_gives_up_without_waiting(time: FakeTime) -> None:
    with pytest.raises(SinkBackpressureError):
        policy(time, deadline=5.0).call(Always(lambda: SinkBackpressureError(10.0)))
    assert time.sleeps == []


def test_time_spent_in_calls_counts_towards_the_deadline(time: FakeTime) -> None:
    call = Always(retryable, time=time, takes=3.0)
    with pytest.raises(RetryableError):
        policy(time, initial_backoff=0.5, deadline=5.0, max_attempts=10).call(call)
    assert call.calls == 2


@pytest.mark.parametrize(
    "error", [ValueError("bug"), DestinationError("refused"), KeyboardInterrupt()]
)
def test_non_retryable_error_propagates_at_once(time: FakeTime, error: BaseException) -> None:
    def call() -> None:
        raise error

    with pytest.raises(type(error)) as info:
        policy(time).call(call)
    assert info.value is error
    assert time.sleeps == []


def test_stats_count_retries_and_waited_seconds(time: FakeTime) -> None:
    stats = RetryStats()
    policy(time).call(Flaky([SinkBackpressureError(1.0), SinkBackpressureError(2.0)]), stats=stats)
    assert (stats.retries, stats.waited_seconds) == (2, 3.0)


def test_stats_accumulate_over_calls(time: FakeTime) -> None:
    stats = RetryStats()
    retrying = policy(time)
    retrying.call(Flaky([SinkBackpressureError(1.0)]), stats=stats)
    retrying.call(Flaky([SinkBackpressureError(0.5)]), stats=stats)
    assert (stats.retries, stats.waited_seconds) == (2, 1.5)


def test_stats_stay_zero_without_retries(time: FakeTime) -> None:
    stats = RetryStats()
    policy(time).call(Flaky([]), stats=stats)
    assert stats == RetryStats(0, 0.0)


def test_each_retry_is_logged_as_a_warning(
    time: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="quixsinks.retry"):
        policy(time).call(Flaky([retryable(), retryable()]), what="upload")
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]
    assert all("upload" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "settings",
    [
        {"max_attempts": 0},
        {"initial_backoff": -0.1},
        {"max_backoff": -1.0},
        {"deadline": -1.0},
    ],
)
def test_invalid_policy_is_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=">= "):
        RetryPolicy(**settings)


def test_policy_compares_without_its_clock() -> None:
    assert RetryPolicy(sleep=lambda s: None) == RetryPolicy()
