"""What every sink that talks to a service shares: the optional client import and the
server's ``Retry-After`` hint."""

from __future__ import annotations

import email.utils
import importlib
import math
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..errors import MissingDependencyError

__all__ = ["import_client", "retry_after_seconds"]

# the names servers use: the standard header (RFC 9110: delta-seconds or an HTTP date), and
# Azure's millisecond variants
_HEADERS = (("retry-after", 1.0), ("retry-after-ms", 0.001), ("x-ms-retry-after-ms", 0.001))


def import_client(module: str, *, package: str, extra: str, hint: str | None = None) -> ModuleType:
    """Import a sink's optional client library, or say which extra installs it.

    Args:
        module: the module to import, e.g. ``"psycopg2"``.
        package: the distribution a user would install, e.g. ``"psycopg2-binary"``.
        extra: the quixsinks extra that brings it, e.g. ``"postgresql"``.
        hint: advice replacing ``pip install 'quixsinks[<extra>]'``.

    Raises:
        MissingDependencyError: the module cannot be imported.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(package, extra, hint=hint) from exc


def retry_after_seconds(source: Any, *, now: float | None = None) -> float | None:
    """Seconds a server asked the client to wait before trying again, or None.

    ``source`` is a response's headers (any mapping; names are matched without case:
    ``Retry-After``, ``retry-after-ms``, ``x-ms-retry-after-ms``) or one header value as an
    SDK hands it over. A value is delta-seconds or an HTTP date (RFC 9110); a date in the
    past, a negative number or anything unreadable gives 0 or None, never an error.
    """
    if source is None:
        return None
    if isinstance(source, Mapping) or hasattr(source, "items"):
        items = {str(k).lower(): v for k, v in source.items()}
        for name, unit in _HEADERS:
            if items.get(name) not in (None, ""):
                seconds = _value_seconds(items[name], now=now, dates=unit == 1.0)
                return None if seconds is None else seconds * unit
        return None
    return _value_seconds(source, now=now, dates=True)


def _value_seconds(value: Any, *, now: float | None, dates: bool) -> float | None:
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0.0, float(value)) if math.isfinite(value) else None
    text = str(value).strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    if not dates:
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
