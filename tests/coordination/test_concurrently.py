"""Tests for envckpt.coordination.concurrently: calls at once, a task only where one waits."""

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


class Stop(BaseException):
    """Not an Exception: goes on instead of becoming a result."""


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


async def test_calls_that_never_wait_run_in_the_callers_task_without_a_task() -> None:
    """No call waits, so each runs in the caller's own task in turn; an error is its result."""
    caller = asyncio.current_task()
    ran_in: list[asyncio.Task[object] | None] = []

    async def where(value: int) -> int:
        ran_in.append(asyncio.current_task())
        return value

    async def refuse() -> int:
        ran_in.append(asyncio.current_task())
        raise ValueError("at once")

    tasks_before = len(asyncio.all_tasks())
    results = await all_at_once([where(1), refuse(), where(3)])
    assert results[0] == 1 and results[2] == 3 and isinstance(results[1], ValueError)
    assert ran_in == [caller, caller, caller]
    assert len(asyncio.all_tasks()) == tasks_before


async def test_from_the_first_call_that_waits_the_rest_run_as_tasks() -> None:
    """Calls before the first wait run in the caller's task; the waiting one stays there too."""
    caller = asyncio.current_task()
    ran_in: dict[str, asyncio.Task[object] | None] = {}

    async def quick(name: str) -> str:
        ran_in[name] = asyncio.current_task()
        return name

    async def waits(name: str) -> str:
        await asyncio.sleep(0)
        ran_in[name] = asyncio.current_task()
        return name

    results = await all_at_once([quick("a"), waits("b"), quick("c"), quick("d")])
    assert results == ["a", "b", "c", "d"]
    assert ran_in["a"] is caller and ran_in["b"] is caller
    assert ran_in["c"] is not caller and ran_in["d"] is not caller
    assert ran_in["c"] is not ran_in["d"]


async def test_a_timeout_inside_the_waiting_call_ends_that_call_not_the_caller() -> None:
    """asyncio.timeout in a call that waits cancels that call only: its TimeoutError is a result."""

    async def stuck() -> None:
        async with asyncio.timeout(0.01):
            await asyncio.Event().wait()

    results = await all_at_once([stuck(), answer(2), stuck()])
    assert isinstance(results[0], TimeoutError) and isinstance(results[2], TimeoutError)
    assert results[1] == 2
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_base_exception_before_any_wait_closes_the_calls_not_started() -> None:
    """A call raising a BaseException at once goes on; the later calls are closed, never run."""
    ran: list[str] = []

    async def stop() -> None:
        raise Stop

    async def later() -> None:
        ran.append("later")

    unstarted = later()
    with pytest.raises(Stop):
        await all_at_once([stop(), unstarted])
    assert ran == [] and unstarted.cr_frame is None  # closed: no "never awaited" warning


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


async def test_closing_the_caller_while_a_call_waits_closes_it_and_cancels_the_rest() -> None:
    """A caller closed mid-wait (never resumed) ends its waiting call and cancels the others."""
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    caller = all_at_once([forever("first"), forever("second")])
    caller.send(None)  # runs until the first call waits, the second now a task
    await asyncio.sleep(0)
    caller.close()  # no RuntimeError: nothing is awaited while closing
    assert ended == ["first"]
    await asyncio.sleep(0)
    assert ended == ["first", "second"]
