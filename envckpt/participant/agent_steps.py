"""How an agent runs one rollout attempt: in its own task, step by step, parked while closed.

Both agents (the simulated one, ``sim.kinds.agent``, and nemo-gym's,
``nemo_gym.agent_runtime``) cut a rollout into steps, each inside
``core.admit``, and run it the same way::

    result = await run_own_task(episode, drive(episode), running=tasks, fence=core.fence)
    # where drive loops:
    result = await step_until_done(step, park=park, on_refused_call=count)
    # and park waits:
    await wait_until_open(core, first_seconds=0.02, max_seconds=0.25)
    # and retire (or shutdown) ends the runs it names:
    await cancel_and_wait(tasks_of_the_retired_runs)

A step refused because admission closed (a checkpoint is being taken) parks
until the server is open again, then the same step runs again: a step ends at
a boundary, so nothing of it was kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable, MutableMapping
from typing import Any, TypeVar

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant.core import ParticipantCore
from envckpt.participant.fence import AttemptFence
from envckpt.participant.model_calls import is_refused_call
from envckpt.protocol import Phase

T = TypeVar("T")


async def run_own_task(
    episode: EnvironmentEpisode,
    work: Coroutine[Any, Any, T],
    *,
    running: MutableMapping[EnvironmentEpisode, asyncio.Task[T]],
    fence: AttemptFence,
) -> T:
    """``work``'s result, run in its own task held in ``running`` while it runs.

    Its own task, so retire can cancel the work without cancelling the caller;
    a cancelled caller cancels it too. Work a retire cancelled (the attempt is
    no longer ``fence``'s current one) is ``stale_attempt``.
    """
    task = asyncio.create_task(work)
    running[episode] = task
    try:
        return await task
    except asyncio.CancelledError:
        caller = asyncio.current_task()
        cancelled_by_caller = caller is not None and caller.cancelling() > 0
        if not cancelled_by_caller and not fence.is_current(episode):
            raise ParticipantError(
                "stale_attempt", f"{episode.capture_key} was retired while running"
            ) from None
        raise
    finally:
        if running.get(episode) is task:
            del running[episode]


async def step_until_done(
    step: Callable[[], Awaitable[T | None]],
    *,
    park: Callable[[], Awaitable[None]],
    on_refused_call: Callable[[], None],
) -> T:
    """Run ``step`` until it returns a result; one refused with ``admission_closed`` parks,
    then runs again (``on_refused_call`` first when the model refused a running call)."""
    while True:
        try:
            result = await step()
        except ParticipantError as error:
            if error.code != "admission_closed":
                raise
            if is_refused_call(error):
                on_refused_call()
            await park()
            continue
        if result is not None:
            return result


async def wait_until_open(
    core: ParticipantCore, *, first_seconds: float, max_seconds: float
) -> None:
    """Poll until ``core`` is idle again (a lapsed lease reopens it), waiting
    ``first_seconds`` first and twice as long each time after, up to ``max_seconds``.

    Polls rather than waiting for an event: the server that refused may be the
    model, whose reopening only a retry observes (resume runs in reverse stage
    order, so the agent reopens before the model).
    """
    delay = first_seconds
    while True:
        await asyncio.sleep(delay)
        delay = min(max_seconds, delay * 2)
        await core.expire_if_due()
        if core.phase is Phase.IDLE:
            return


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel every one of ``tasks`` and return once all of them have ended.

    Cancellation lands at each run's next await, so this is quick. ``tasks`` is
    read in full before the first cancel (it may be a view of the runs a task
    removes itself from as it ends).
    """
    doomed = list(tasks)
    for task in doomed:
        task.cancel()
    if doomed:
        await asyncio.wait(doomed)
