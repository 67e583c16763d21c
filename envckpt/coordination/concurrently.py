"""Several control calls at once, paying for a task only where a call waits.

The coordinator sends every participant of a deployment its call at the same
time (protocol.md 5). ``asyncio.gather`` makes a task per call, a gathering
future, and a done callback per task, each one more loop turn; at 100k
instances times three participants that bookkeeping was most of discovery,
though an in-process call never waits at all. Here the calls run one after
another in the caller's own task until one has to wait (for a reply, a
connection, a lock); from then on the calls not yet started run as tasks,
while the waiting one goes on in the caller's task:

* no call waits (in process): no task at all;
* the first call waits (HTTP): n - 1 tasks, all of them under way while it waits.

No concurrency is lost: a call that finished before the next one started
never waited, so nothing could have overlapped with it.

    results = await all_at_once([call(member) for member in members])
    # results[i] is call i's result, or the Exception it raised

The call that waits keeps running in the caller's task, exactly as if the
caller had awaited it (``asyncio.current_task()``, ``asyncio.timeout`` and
cancellation all see the caller). A cancellation of the caller (or any other
BaseException) cancels the calls still running, waits until they have ended,
and goes on, as ``gather`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


async def all_at_once(calls: Sequence[Coroutine[Any, Any, T]]) -> list[T | Exception]:
    """Run ``calls`` concurrently; each one's result or Exception, in order."""
    results: list[T | Exception] = []
    for index, call in enumerate(calls):
        try:
            blocked_on = call.send(None)
        except StopIteration as returned:
            results.append(returned.value)
        except Exception as error:
            results.append(error)
        except BaseException:
            for unstarted in calls[index + 1 :]:
                unstarted.close()
            raise
        else:
            # ``call`` waits: start the rest, then finish it here meanwhile.
            return results + await _finish(call, blocked_on, calls[index + 1 :])
    return results


async def _finish(
    waiting: Coroutine[Any, Any, T], blocked_on: Any, rest: Sequence[Coroutine[Any, Any, T]]
) -> list[T | Exception]:
    loop = asyncio.get_running_loop()
    others = [loop.create_task(call) for call in rest]
    results: list[T | Exception] = []
    try:
        try:
            results.append(await _Resumed(waiting, blocked_on))
        except Exception as error:
            results.append(error)
        for task in others:
            try:
                results.append(await task)
            except Exception as error:
                results.append(error)
    except GeneratorExit:
        # The caller's coroutine is being closed: no more waiting is allowed.
        for task in others:
            task.cancel()
        raise
    except BaseException:
        await _cancel(others)
        raise
    return results


class _Resumed:
    """A started coroutine that yielded ``blocked_on``, awaitable from where it stopped.

    Awaiting it is what ``await coroutine`` would have been from that point:
    the awaiting task waits on what the coroutine yields, then sends (or
    throws, a cancellation) into it, until it returns or raises.
    """

    __slots__ = ("_blocked_on", "_coroutine")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], blocked_on: Any) -> None:
        self._coroutine = coroutine
        self._blocked_on = blocked_on

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine, yielded = self._coroutine, self._blocked_on
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as error:
                try:
                    yielded = coroutine.throw(error)
                except StopIteration as returned:
                    return returned.value
            else:
                try:
                    yielded = coroutine.send(sent)
                except StopIteration as returned:
                    return returned.value


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
