"""Backpressure and retries: one :class:`RetryPolicy` for every sink.

A sink signals a transient failure by raising a :class:`RetryableError` (or its
subclass :class:`SinkBackpressureError`, Quix's way of saying "slow down"). The policy
retries the call: it waits ``retry_after`` when the destination said how long,
exponential backoff with full jitter otherwise, and gives up after ``max_attempts``
or when the ``deadline`` would be passed, raising the last error with a message
that says how long it tried. Any other exception is not retried.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from .errors import RetryableError, SinkBackpressureError

__all__ = ["RetryPolicy", "RetryStats", "SinkBackpressureError"]

logger = logging.getLogger("quixsinks.retry")
R = TypeVar("R")


@dataclass
class RetryStats:
    """What retrying cost; accumulated into a task's receipt."""

    retries: int = 0
    waited_seconds: float = 0.0


@dataclass(frozen=True)
class RetryPolicy:
    """How a sink retries transient failures.

    Attributes:
        max_attempts: attempts in all, the first included (1 = never retry).
        initial_backoff: seconds before the first retry without a ``retry_after``.
        max_backoff: cap on one backoff pause, also on a destination's ``retry_after``.
        deadline: seconds after the first attempt beyond which no retry is started.
        jitter: draw each backoff uniformly from [0, backoff] ("full jitter").
    """

    max_attempts: int = 5
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    deadline: float = 300.0
    jitter: bool = True
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.deadline < 0:
            raise ValueError("backoff and deadline must be >= 0")

    def backoff(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        ceiling = min(self.max_backoff, self.initial_backoff * (2 ** (retry - 1)))
        return random.uniform(0, ceiling) if self.jitter else ceiling

    def call(
        self,
        fn: Callable[[], R],
        *,
        stats: RetryStats | None = None,
        what: str = "write",
    ) -> R:
        """Run ``fn``, retrying on :class:`RetryableError` as the policy allows."""
        start = self.clock()
        attempt = 1
        while True:
            try:
                return fn()
            except RetryableError as error:
                elapsed = self.clock() - start
                pause = self.backoff(attempt, error.retry_after)
                if attempt >= self.max_attempts or elapsed + pause > self.deadline:
                    raise _give_up(error, attempt, elapsed) from error
                logger.warning(
                    "%s failed (attempt %d of %d): %s; retrying in %.2f s",
                    what,
                    attempt,
                    self.max_attempts,
                    error.message,
                    pause,
                )
                self.sleep(pause)
                if stats is not None:
                    stats.retries += 1
                    stats.waited_seconds += pause
                attempt += 1


def _give_up(error: RetryableError, attempts: int, elapsed: float) -> RetryableError:
    """The error raised when retries are exhausted: the same class, with the history."""
    message = (
        f"{error.message} (gave up after {attempts} attempt(s) in {elapsed:.1f} s; "
        "raise retry_max_attempts or retry_deadline_seconds to wait longer)"
    )
    final = copy.copy(error)
    final.args = (message, *error.args[1:])
    return final
