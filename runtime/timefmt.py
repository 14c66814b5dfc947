"""ISO 8601 times of UNIX timestamps, in UTC, as every wire format and log of Conduit writes them.

``iso(ts)`` is exactly ``datetime.fromtimestamp(ts, UTC).isoformat()`` (microseconds shown only when
not zero), and ``iso_millis(ts)`` exactly ``isoformat(timespec='milliseconds')``, which the message
archive writes. Both format the seconds part once per second: a delivery carries three times and
the messages of one second share their prefix.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime

__all__ = ['iso', 'iso_millis', 'iso_or_none']


@functools.lru_cache(maxsize=4096)
def _iso_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime('%Y-%m-%dT%H:%M:%S')


def _split(ts: float) -> tuple[int, int]:
    """Whole seconds and microseconds, the microseconds rounded as datetime rounds them."""
    second = math.floor(ts)
    micros = round((ts - second) * 1e6)
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    return second, micros


def iso(ts: float) -> str:
    """``datetime.fromtimestamp(ts, UTC).isoformat()``."""
    second, micros = _split(ts)
    if not micros:
        return f'{_iso_second(second)}+00:00'
    return f'{_iso_second(second)}.{micros:06d}+00:00'


def iso_millis(ts: float) -> str:
    """``datetime.fromtimestamp(ts, UTC).isoformat(timespec='milliseconds')``."""
    second, micros = _split(ts)
    return f'{_iso_second(second)}.{micros // 1000:03d}+00:00'


def iso_or_none(ts: float | None) -> str | None:
    """``iso(ts)``, None kept (a time not set yet)."""
    return iso(ts) if ts is not None else None
