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

    async def wait_for_event(self, event: asyncio.Event, deadline_ts: float) -> bool:
        """Wait until ``event`` is set (True) or ``deadline_ts`` passes (False)."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def wait_for_event(self, event: asyncio.Event, deadline_ts: float) -> bool:
        timeout = deadline_ts - self.now()
        if event.is_set():
            return True
        if timeout <= 0:
            return False
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return event.is_set()
        return True


# The real clock holds no state, so one serves every caller that was given
# none: a trainer with 100k Gym instances makes no 100k clocks.
SYSTEM_CLOCK = SystemClock()


class FakeClock:
    """A clock that only moves when told to.

    ``sleep`` parks the caller until ``advance`` (or a deadline jump) moves
    time past its wake-up time, so a background loop sleeping on the clock
    never drags time forward for everyone else. ``wait_for_event`` gives the
    other tasks a few loop turns to set the event and otherwise jumps straight
    to the deadline, so code that waits on a deadline finishes at once.
    """

    def __init__(self, start: float = 1_800_000_000.0, *, settle_rounds: int = 20) -> None:
        self._now = start
        self.settle_rounds = settle_rounds
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._jump(self._now + max(0.0, seconds))

    def _jump(self, to: float) -> None:
        self._now = max(self._now, to)
        due = [(when, f) for when, f in self._sleepers if when <= self._now]
        self._sleepers = [(when, f) for when, f in self._sleepers if when > self._now]
        for _, future in due:
            if not future.done():
                future.set_result(None)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + seconds, future))
        try:
            await future
        finally:
            self._sleepers = [(when, f) for when, f in self._sleepers if f is not future]

    async def wait_for_event(self, event: asyncio.Event, deadline_ts: float) -> bool:
        for _ in range(self.settle_rounds):
            if event.is_set():
                return True
            await asyncio.sleep(0)
        if event.is_set():
            return True
        # Nobody set it in a world where time only moves when asked: the
        # deadline is the next thing that can happen.
        self._jump(deadline_ts)
        return False


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
