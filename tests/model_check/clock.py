"""A clock for the explorer: time moves only when the explorer ticks.

Every wait on this clock (``sleep``, ``wait_for_event`` past its event, a
transport's timeout) is a timer the explorer can see. ``tick`` is one of the
explorer's actions: it moves time to the earliest timer (or a lease expiry)
and wakes whoever was waiting for it, so "time passes" is a choice explored
like any delivery, and a run never depends on the wall clock.

    clock = ExplorerClock()
    await clock.sleep(15)               # parked until clock.advance_to(now + 15)
    clock.next_wakeup()                 # 1_800_000_015.0
    clock.advance_to(clock.next_wakeup())
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(eq=False)
class Timer:
    """One wait on the clock: wakes ``future`` at ``when``."""

    when: float
    future: asyncio.Future[None]


class ExplorerClock:
    """``envckpt.clock.Clock`` whose time only moves in ``advance_to``."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._timers: list[Timer] = []

    def now(self) -> float:
        return self._now

    def timers(self) -> tuple[float, ...]:
        """When every live timer fires, sorted."""
        return tuple(sorted(t.when for t in self._timers if not t.future.done()))

    def next_wakeup(self) -> float | None:
        pending = self.timers()
        return pending[0] if pending else None

    def advance_to(self, when: float) -> None:
        """Move time to ``when`` (never backwards) and wake the timers due by then."""
        self._now = max(self._now, when)
        for timer in list(self._timers):
            if timer.when <= self._now and not timer.future.done():
                timer.future.set_result(None)

    async def until(self, when: float) -> None:
        """Wait until the clock reaches ``when``."""
        if when <= self._now:
            await asyncio.sleep(0)
            return
        timer = Timer(when, asyncio.get_running_loop().create_future())
        self._timers.append(timer)
        try:
            await timer.future
        finally:
            self._timers.remove(timer)

    async def sleep(self, seconds: float) -> None:
        await self.until(self._now + max(0.0, seconds))

    async def wait_for_event(self, event: asyncio.Event, deadline_ts: float) -> bool:
        if event.is_set():
            return True
        if deadline_ts <= self._now:
            return False
        waiter = asyncio.ensure_future(event.wait())
        timeout = asyncio.ensure_future(self.until(deadline_ts))
        try:
            await asyncio.wait({waiter, timeout}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            timeout.cancel()
        return event.is_set()
