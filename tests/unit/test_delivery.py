"""core.delivery: deterministic dedupe ids and partial-failure resends."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from quixsinks.core.backpressure import RetryPolicy, RetryStats
from quixsinks.core.delivery import DedupeIds, deliver
from quixsinks.core.errors import (
    DeliveryError,
    DestinationError,
    RetryableError,
    SinkBackpressureError,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def policy(clock: FakeClock, **kw: float) -> RetryPolicy:
    args = {"max_attempts": 5, "initial_backoff": 1.0, "deadline": 60.0, "jitter": False, **kw}
    return RetryPolicy(**args, sleep=clock.sleep, clock=clock.clock)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- DedupeIds


def test_ids_are_deterministic_and_short_hex() -> None:
    payloads = [b"a", b"b", b"a", b""]
    first = DedupeIds("sink", 3, 0).ids(payloads)
    assert first == DedupeIds("sink", 3, 0).ids(payloads)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in first)


def test_identical_payloads_get_distinct_ids() -> None:
    ids = DedupeIds("sink", 0, 0).ids([b"x"] * 100)
    assert len(set(ids)) == 100


@pytest.mark.parametrize(
    "other", [("other", 3, 0), ("sink", 4, 0), ("sink", 3, 1), ("sink", 3, "0x")]
)
def test_ids_depend_on_sink_batch_and_scope(other: tuple[str, int, int | str]) -> None:
    payloads = [b"a", b"b"]
    assert set(DedupeIds("sink", 3, 0).ids(payloads)).isdisjoint(DedupeIds(*other).ids(payloads))


def test_occurrence_counts_carry_over_between_chunks() -> None:
    payloads = [b"a", b"a", b"b", b"a"]
    chunked = DedupeIds("s", 1, 2)
    assert chunked.ids(payloads[:2]) + chunked.ids(payloads[2:]) == DedupeIds("s", 1, 2).ids(
        payloads
    )


def test_ids_do_not_depend_on_other_payloads_positions() -> None:
    # a payload's id depends on its content and how often it was seen before, not its index
    assert DedupeIds("s", 1, 0).ids([b"a", b"b"])[1] == DedupeIds("s", 1, 0).ids([b"b"])[0]


def test_digest_size() -> None:
    assert len(DedupeIds("s", 1, 0, digest_size=8).ids([b"a"])[0]) == 16
    with pytest.raises(ValueError, match="digest_size"):
        DedupeIds("s", 1, 0, digest_size=2)


# ----------------------------------------------------------------------------- deliver


class Service:
    """Refuses the items listed in ``refuse_rounds[n]`` (by value) in round n."""

    def __init__(self, refuse: Sequence[set[int]] = (), raise_rounds: Sequence[int] = ()):
        self.refuse = list(refuse)
        self.raise_rounds = set(raise_rounds)
        self.calls: list[list[int]] = []
        self.accepted: list[int] = []
        self.round = 0
        self.lock = threading.Lock()

    def send(self, chunk: Sequence[int]) -> list[int]:
        with self.lock:
            self.calls.append(list(chunk))
            if self.round in self.raise_rounds:
                raise SinkBackpressureError(2.0)
            refuse = self.refuse[self.round] if self.round < len(self.refuse) else set()
            failed = [j for j, v in enumerate(chunk) if v in refuse]
            self.accepted.extend(v for v in chunk if v not in refuse)
            return failed


def run_rounds(service: Service, items: list[int], pol: RetryPolicy, **kw: Any) -> int:
    """deliver with the service's round counter advanced between rounds (via sleep)."""
    sleep = pol.sleep

    def advancing_sleep(seconds: float) -> None:
        service.round += 1
        sleep(seconds)

    object.__setattr__(pol, "sleep", advancing_sleep)
    return deliver(items, service.send, pol, what="test", **kw)


def test_everything_accepted_in_one_round() -> None:
    clock = FakeClock()
    service = Service()
    assert run_rounds(service, list(range(10)), policy(clock), chunk_size=4) == 10
    assert service.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert clock.pauses == []


def test_only_refused_items_are_resent_in_order() -> None:
    clock = FakeClock()
    service = Service(refuse=[{1, 3, 5, 8}, {5}])
    stats = RetryStats()
    run_rounds(service, list(range(10)), policy(clock), chunk_size=4, stats=stats)
    assert service.calls[3:] == [[1, 3, 5, 8], [5]]
    assert sorted(service.accepted) == list(range(10))
    assert stats.retries == 2


def test_whole_call_errors_resend_the_chunk_after_retry_after() -> None:
    clock = FakeClock()
    service = Service(raise_rounds=[0])
    run_rounds(service, [1, 2, 3], policy(clock))
    assert service.calls == [[1, 2, 3], [1, 2, 3]]
    assert clock.pauses == [2.0]


def test_permanent_errors_propagate_at_once() -> None:
    def send(chunk: Sequence[int]) -> list[int]:
        raise KeyError("bad")

    with pytest.raises(KeyError):
        deliver([1], send, policy(FakeClock()), what="test")


def test_deadline_raises_delivery_error_with_counts() -> None:
    clock = FakeClock()
    service = Service(refuse=[{1, 2}] * 1000)
    with pytest.raises(DeliveryError) as info:
        run_rounds(service, list(range(5)), policy(clock, deadline=10.0, max_attempts=100))
    error = info.value
    assert (error.undelivered, error.total) == (2, 5)
    assert "2 of 5 item(s) not delivered" in str(error)
    assert "refused" in error.reason
    assert clock.now <= 10.0
    assert isinstance(error, DestinationError)
    again = pickle.loads(pickle.dumps(error))
    assert (again.undelivered, again.total, again.reason) == (2, 5, error.reason)


def test_rounds_without_progress_count_against_max_attempts() -> None:
    clock = FakeClock()
    service = Service(refuse=[{0}] * 1000)
    with pytest.raises(DeliveryError):
        run_rounds(service, [0], policy(clock, max_attempts=3))
    assert len(service.calls) == 3


def test_rounds_with_progress_do_not_use_up_attempts() -> None:
    clock = FakeClock()
    items = list(range(6))
    service = Service(refuse=[set(items[i:]) for i in range(1, 7)])
    assert run_rounds(service, items, policy(clock, max_attempts=2)) == 6
    assert sorted(service.accepted) == items


def test_whole_call_error_reason_is_reported() -> None:
    def send(chunk: Sequence[int]) -> list[int]:
        raise RetryableError("throttled hard")

    with pytest.raises(DeliveryError, match="throttled hard"):
        deliver([1, 2], send, policy(FakeClock(), max_attempts=2), what="put")


def test_max_inflight_delivers_everything() -> None:
    service = Service(refuse=[set(range(0, 100, 7))])
    run_rounds(service, list(range(100)), policy(FakeClock()), chunk_size=10, max_inflight=4)
    assert sorted(service.accepted) == list(range(100))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        deliver([1], lambda c: [], policy(FakeClock()), what="x", chunk_size=0)
    with pytest.raises(ValueError, match="max_inflight"):
        deliver([1], lambda c: [], policy(FakeClock()), what="x", max_inflight=0)


def test_chunks_are_bounded_by_size_too() -> None:
    service = Service()
    items = [3, 3, 3, 9, 1, 1, 1, 1]
    deliver(
        items,
        service.send,
        policy(FakeClock()),
        what="x",
        chunk_size=3,
        size_of=lambda v: v,
        max_chunk_size=7,
    )
    assert service.calls == [[3, 3], [3], [9], [1, 1, 1], [1]]
