"""What every vendor's error map asks of the service it translates for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import DestinationAccessDeniedError, QuixSinksError, timed_out

__all__ = ["ServiceHook"]


def _denied(message: str, location: str) -> QuixSinksError:
    return DestinationAccessDeniedError(message, location=location)


@dataclass(frozen=True)
class ServiceHook:
    """The part of a vendor error map that one service fills in.

    Attributes:
        location: what the messages name (a bucket URL, a stream) and errors carry.
        denied: makes the access-denied error of this service from a message and location.
        denied_advice: what the message says to check when access is refused.
        timeout: the request timeout in force, and ``timeout_option`` the option setting it.
        secrets: values to scrub from every message.
    """

    location: str
    denied: Callable[[str, str], QuixSinksError] = _denied
    denied_advice: str = "check the credentials and their permissions"
    timeout: float | None = None
    timeout_option: str = "request_timeout_seconds"
    secrets: tuple[Any, ...] = field(default=(), repr=False)

    def timed_out(self) -> str:
        """``timed out (no answer in 2 s; option '...')``, or ``timed out`` when no limit
        is known."""
        if self.timeout is None:
            return "timed out"
        return timed_out(self.timeout, self.timeout_option)
