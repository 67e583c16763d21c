"""Time as an injectable dependency.

Every effectful call takes an absolute ``deadline_ts`` (Unix seconds); code
asks its ``Clock`` for ``now()`` and ``sleep()`` so tests can run leases and
deadlines on a fake clock without waiting.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time in Unix seconds and a way to wait."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that only moves when told to, or when someone sleeps on it.

    ``sleep`` advances time by the requested amount at once (and yields to the
    event loop), so code that polls until a deadline finishes instantly.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += max(0.0, seconds)

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)


def remaining(deadline_ts: float, clock: Clock) -> float:
    """Seconds left until ``deadline_ts`` (never negative)."""
    return max(0.0, deadline_ts - clock.now())


def validate_deadline(deadline_ts: object) -> float:
    """Return ``deadline_ts`` as a float if it is a finite number, else raise ValueError."""
    if isinstance(deadline_ts, bool) or not isinstance(deadline_ts, int | float):
        raise ValueError(f"deadline_ts must be a number, got {deadline_ts!r}")
    value = float(deadline_ts)
    if not math.isfinite(value):
        raise ValueError(f"deadline_ts must be finite, got {deadline_ts!r}")
    return value
