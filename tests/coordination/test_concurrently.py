"""Tests for envckpt.coordination.concurrently: several calls at once, n - 1 tasks."""

from __future__ import annotations

import asyncio

import pytest

from envckpt.coordination.concurrently import all_at_once


async def answer(value: int) -> int:
    await asyncio.sleep(0)
    return value


async def fail(message: str) -> int:
    await asyncio.sleep(0)
    raise ValueError(message)


async def test_nothing_to_call_is_an_empty_list() -> None:
    """No calls, no results."""
    assert await all_at_once([]) == []


async def test_results_and_errors_come_back_in_call_order() -> None:
    """Each call's result or Exception sits at its own index, whatever finished first."""

    async def late(value: int) -> int:
        for _ in range(5):
            await asyncio.sleep(0)
        return value

    results = await all_at_once([late(1), fail("two"), answer(3)])
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], ValueError) and str(results[1]) == "two"


async def test_the_calls_overlap() -> None:
    """Every call is under way before any has finished: each waits for all to have started."""
    started = 0
    everyone = asyncio.Event()

    async def meet(value: int) -> int:
        nonlocal started
        started += 1
        if started == 3:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 5)  # one at a time would time out here
        return value

    assert await all_at_once([meet(1), meet(2), meet(3)]) == [1, 2, 3]


async def test_the_first_call_runs_in_the_callers_task_and_only_the_others_get_one() -> None:
    """n calls make n - 1 tasks: the first is awaited in place."""
    caller = asyncio.current_task()
    ran_in: list[asyncio.Task[object] | None] = []

    async def where() -> None:
        ran_in.append(asyncio.current_task())

    await all_at_once([where(), where(), where()])
    assert ran_in[0] is caller
    assert caller not in ran_in[1:] and len(set(map(id, ran_in[1:]))) == 2


async def test_cancelling_the_caller_cancels_the_calls_still_running() -> None:
    """A cancelled caller leaves no call running: each is cancelled and has ended."""
    calls_started = asyncio.Event()
    ended: list[str] = []

    async def forever(name: str) -> None:
        calls_started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    caller = asyncio.ensure_future(all_at_once([forever("a"), forever("b"), forever("c")]))
    await calls_started.wait()
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert sorted(ended) == ["a", "b", "c"]


class Stop(BaseException):
    """Not an Exception: goes on instead of becoming a result."""


async def test_a_base_exception_in_one_call_cancels_the_others_and_goes_on() -> None:
    """A call raising a BaseException (not an Exception) goes on; no call is left running."""
    ended: list[str] = []

    async def stop() -> None:
        await asyncio.sleep(0)
        raise Stop

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("forever")

    with pytest.raises(Stop):
        await all_at_once([answer(1), stop(), forever(), forever()])
    assert ended == ["forever", "forever"]
