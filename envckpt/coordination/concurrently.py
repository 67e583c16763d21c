"""Several control calls at once, for less than ``asyncio.gather`` costs.

The coordinator sends every participant of a deployment its call at the same
time (protocol.md 5). ``asyncio.gather`` makes a task per call, a gathering
future, and a done callback per task, each callback one more loop turn; at
100k instances times three participants that bookkeeping was a third of
discovery. Here the first call runs in the caller's own task and only the
others get tasks, which are then awaited in order (awaiting a task that has
already finished does not suspend): n calls cost n - 1 tasks and nothing else.
The calls still overlap: every task is scheduled before the first call starts,
so while the first one waits on its reply the others are sent.

    results = await all_at_once([call(member) for member in members])
    # results[i] is call i's result, or the Exception it raised

A cancellation of the caller (or any other BaseException) cancels the calls
still running, waits until they have ended, and goes on, as ``gather`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


async def all_at_once(calls: Sequence[Coroutine[Any, Any, T]]) -> list[T | Exception]:
    """Run ``calls`` concurrently; each one's result or Exception, in order."""
    if not calls:
        return []
    loop = asyncio.get_running_loop()
    others = [loop.create_task(call) for call in calls[1:]]
    results: list[T | Exception] = []
    try:
        try:
            results.append(await calls[0])
        except Exception as error:
            results.append(error)
        for task in others:
            try:
                results.append(await task)
            except Exception as error:
                results.append(error)
    except BaseException:
        await _cancel(others)
        raise
    return results


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel the tasks still running and wait for them; their outcomes are dropped."""
    for task in tasks:
        task.cancel()
    pending = [task for task in tasks if not task.done()]
    if pending:
        await asyncio.wait(pending)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: the caller's own error is what goes on
