"""Tests for envckpt.clock: the fake clock and deadline validation."""

from __future__ import annotations

import asyncio
import math

import pytest

from envckpt.clock import SYSTEM_CLOCK, FakeClock, SystemClock, remaining, validate_deadline


async def test_fake_sleep_waits_for_advance() -> None:
    """A sleeper wakes only once time is advanced past its wake-up time."""
    clock = FakeClock(100.0)
    sleeper = asyncio.create_task(clock.sleep(5))
    await asyncio.sleep(0)
    clock.advance(4)
    await asyncio.sleep(0)
    assert not sleeper.done()
    clock.advance(1)
    await asyncio.wait_for(sleeper, 1)
    assert clock.now() == 105.0


async def test_deadline_jump_wakes_due_sleepers_only() -> None:
    """Jumping to a deadline wakes sleepers due by then and no others."""
    clock = FakeClock(0.0)
    early = asyncio.create_task(clock.sleep(5))
    late = asyncio.create_task(clock.sleep(50))
    await asyncio.sleep(0)
    assert not await clock.wait_for_event(asyncio.Event(), 10.0)
    await asyncio.wait_for(early, 1)
    assert not late.done()
    late.cancel()


async def test_fake_wait_returns_true_when_event_is_set_by_another_task() -> None:
    """A task that sets the event within a few loop turns wins over the deadline."""
    clock = FakeClock(0.0)
    event = asyncio.Event()

    async def setter() -> None:
        await asyncio.sleep(0)
        event.set()

    task = asyncio.create_task(setter())
    assert await clock.wait_for_event(event, 10.0)
    await task
    assert clock.now() == 0.0


async def test_fake_wait_jumps_to_the_deadline_when_nothing_happens() -> None:
    """With nobody to set the event, fake time jumps to the deadline."""
    clock = FakeClock(0.0)
    assert not await clock.wait_for_event(asyncio.Event(), 10.0)
    assert clock.now() == 10.0


async def test_system_wait_times_out() -> None:
    """The real clock waits at most until the deadline."""
    clock = SystemClock()
    assert not await clock.wait_for_event(asyncio.Event(), clock.now() + 0.01)


def test_remaining_is_never_negative() -> None:
    """A passed deadline leaves zero seconds, not a negative number."""
    assert remaining(5.0, FakeClock(10.0)) == 0.0
    assert remaining(15.0, FakeClock(10.0)) == 5.0


def test_deadlines_must_be_finite_numbers() -> None:
    """NaN, infinities, bools and strings are refused."""
    assert validate_deadline(3) == 3.0
    for bad in (math.nan, math.inf, -math.inf, True, "1", None):
        with pytest.raises(ValueError):
            validate_deadline(bad)


def test_the_shared_system_clock_is_a_system_clock_on_wall_time() -> None:
    """SYSTEM_CLOCK, the clock of callers given none, reads the same wall time as a new one."""
    import time

    assert type(SYSTEM_CLOCK) is SystemClock
    assert abs(SYSTEM_CLOCK.now() - time.time()) < 5
