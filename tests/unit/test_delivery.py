"""core.delivery: deterministic dedupe ids and partial-failure resends."""

from __future__ import annotations

import pickle
import threading
import tracemalloc
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quixsinks.core.backpressure import RetryPolicy, RetryStats
from quixsinks.core.delivery import MAX_RUN_PAYLOADS, Coordinates, DedupeIds, deliver
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


def test_positions_carry_over_between_chunks() -> None:
    payloads = [b"a", b"a", b"b", b"a"]
    chunked = DedupeIds("s", 1, 2)
    assert chunked.ids(payloads[:2]) + chunked.ids(payloads[2:]) == DedupeIds("s", 1, 2).ids(
        payloads
    )


def test_position_ids_depend_on_the_row_position_and_its_payload() -> None:
    ids = DedupeIds("s", 1, 0).ids([b"a", b"b"])
    # a replay that moves a row gives it another id (a duplicate at worst)...
    assert ids[1] != DedupeIds("s", 1, 0).ids([b"b"])[0]
    # ...and never the id another record had at that position (which would drop it)
    assert DedupeIds("s", 1, 0).ids([b"b", b"a"])[0] not in ids


def kafka(offset: int, topic: str = "t", partition: int = 0) -> Coordinates:
    return (topic, partition, offset)


def test_kafka_ids_do_not_depend_on_scope_position_or_chunks() -> None:
    rows = [b"a", b"b", b"c"]
    where = [kafka(5), kafka(6), kafka(9, partition=1)]
    ids = DedupeIds("s", 1, 0).ids(rows, where)
    # another Spark partition, other rows before, topic partition 1's record first
    moved = DedupeIds("s", 1, 7)
    moved.ids([b"x", b"y"])
    assert moved.ids(rows[2:], where[2:]) + moved.ids(rows[:2], where[:2]) == [*ids[2:], *ids[:2]]
    assert set(ids).isdisjoint(DedupeIds("s", 2, 0).ids(rows, where))  # another batch


def test_rows_of_one_kafka_record_get_distinct_ids_identical_payloads_included() -> None:
    # one record exploded into four rows (consecutive, as explode gives them)
    ids = DedupeIds("s", 1, 0).ids([b"x", b"x", b"y", b"x"], [kafka(5)] * 4)
    assert len(set(ids)) == 4
    assert ids == DedupeIds("s", 1, 3).ids([b"x", b"x", b"y", b"x"], [kafka(5)] * 4)


def test_kafka_rows_met_again_or_out_of_offset_order_get_position_ids() -> None:
    rows = [b"x", b"y", b"x", b"z"]
    where = [kafka(5), kafka(6), kafka(5), kafka(4)]  # offset 5 again, not adjacent; then 4
    ids = DedupeIds("s", 1, 0).ids(rows, where)
    assert len(set(ids)) == 4  # the second (5, "x") is not the first one's duplicate
    assert ids[2] == DedupeIds("s", 1, 0).ids(rows)[2]  # position ids
    assert ids[3] == DedupeIds("s", 1, 0).ids(rows)[3]


def test_rows_without_kafka_coordinates_get_position_ids() -> None:
    rows = [b"x", b"x"]
    assert DedupeIds("s", 1, 0).ids(rows, [None, ("t", None, 3)]) == DedupeIds("s", 1, 0).ids(rows)


def test_a_run_past_its_payload_bound_goes_on_with_position_ids() -> None:
    rows = [b"%d" % i for i in range(MAX_RUN_PAYLOADS + 10)] + [b"0", b"0"]
    ids = DedupeIds("s", 1, 0).ids(rows, [kafka(5)] * len(rows))
    assert len(set(ids)) == len(rows)
    positions = DedupeIds("s", 1, 0).ids(rows)
    assert ids[MAX_RUN_PAYLOADS] == positions[MAX_RUN_PAYLOADS]
    assert ids[-1] != positions[-1]  # "0" is remembered: still counted in the run


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"a", b"b", b""]),
            st.one_of(
                st.none(),
                st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 1), st.integers(0, 5)),
            ),
        ),
        max_size=60,
    ),
    st.integers(1, 7),
)
def test_no_two_rows_of_a_task_share_an_id(rows: list[tuple[bytes, Any]], chunk: int) -> None:
    dedupe = DedupeIds("s", 1, 0)
    ids: list[str] = []
    for start in range(0, len(rows), chunk):
        part = rows[start : start + chunk]
        ids += dedupe.ids([p for p, _ in part], [c for _, c in part])
    assert len(set(ids)) == len(rows)


def test_the_state_does_not_grow_with_the_rows() -> None:
    dedupe = DedupeIds("s", 1, 0)
    offsets = iter(range(10**9))
    tracemalloc.start()
    try:
        for chunk in range(40):
            rows = [b"row %d of chunk %d" % (i, chunk) for i in range(5_000)]
            where = [kafka(next(offsets), partition=i % 3) for i in range(5_000)]
            dedupe.ids(rows, where if chunk % 2 else None)
            if chunk == 1:
                after_two = tracemalloc.get_traced_memory()[0]
        grown = tracemalloc.get_traced_memory()[0] - after_two
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024  # 190,000 more rows; the old dict grew by about 20 MB


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
