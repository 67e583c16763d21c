"""Tests for envckpt.participant.agent_steps: an attempt's own task, its steps, its parking."""

from __future__ import annotations

import asyncio

import pytest

from envckpt.clock import SystemClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant.agent_steps import (
    cancel_and_wait,
    run_own_task,
    step_until_done,
    wait_until_open,
)
from envckpt.participant.core import ParticipantCore
from envckpt.participant.fence import AttemptFence
from envckpt.participant.hooks import NoState
from envckpt.participant.model_calls import REFUSED_CALL
from envckpt.protocol import ErrorCode, Phase

E1 = EnvironmentEpisode("r1", 0)


async def test_the_work_runs_in_a_task_held_while_it_runs() -> None:
    """The result comes back; the task is in ``running`` during the work, gone after."""
    running: dict[EnvironmentEpisode, asyncio.Task[str]] = {}

    async def work() -> str:
        assert E1 in running
        return "done"

    assert await run_own_task(E1, work(), running=running, fence=AttemptFence()) == "done"
    assert running == {}


async def test_work_a_retire_cancelled_is_a_stale_attempt() -> None:
    """Cancelled from outside (not by its caller) with the attempt retired: stale_attempt."""
    running: dict[EnvironmentEpisode, asyncio.Task[None]] = {}
    fence = AttemptFence()
    fence.retire((E1,))
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    caller = asyncio.create_task(run_own_task(E1, work(), running=running, fence=fence))
    await started.wait()
    running[E1].cancel()
    with pytest.raises(ParticipantError) as caught:
        await caller
    assert caught.value.code == "stale_attempt" and running == {}


async def test_a_closed_step_parks_and_runs_again_counting_a_refused_call() -> None:
    """admission_closed parks then retries the same step; a refused running model call is
    counted first; another error passes through."""
    refusals = [
        ParticipantError(ErrorCode.ADMISSION_CLOSED, "closed"),
        ParticipantError(ErrorCode.ADMISSION_CLOSED, f"{REFUSED_CALL} for checkpoint c1"),
    ]
    seen: list[str] = []

    async def step() -> str | None:
        if refusals:
            raise refusals.pop(0)
        seen.append("step")
        return None if seen.count("step") == 1 else "result"  # the first step is no result

    async def park() -> None:
        seen.append("park")

    counted = step_until_done(step, park=park, on_refused_call=lambda: seen.append("refused"))
    assert await counted == "result"
    assert seen == ["park", "refused", "park", "step", "step"]

    async def broken() -> None:
        raise ParticipantError(ErrorCode.INVALID_REQUEST, "no")

    with pytest.raises(ParticipantError, match="no"):
        await step_until_done(broken, park=park, on_refused_call=lambda: None)


async def test_waiting_ends_once_the_core_is_idle_again() -> None:
    """Parked while a checkpoint is prepared; resume reopens it and the wait ends."""
    core = ParticipantCore(server_name="agent", kind="agent", hooks=NoState(), clock=SystemClock())
    await core.prepare("c1", deadline_ts=core.clock.now() + 30)
    assert core.phase is not Phase.IDLE
    waiting = asyncio.create_task(wait_until_open(core, first_seconds=0.001, max_seconds=0.01))
    await asyncio.sleep(0.02)
    assert not waiting.done()
    await core.resume("c1", deadline_ts=core.clock.now() + 30)
    await asyncio.wait_for(waiting, 5)


async def test_cancel_and_wait_ends_every_run_even_those_that_remove_themselves() -> None:
    """Runs held in a dict they leave as they end: each is cancelled, all have ended on
    return (a cleanup awaited in one of them finished too), and no run is left out."""
    running: dict[EnvironmentEpisode, asyncio.Task[None]] = {}
    cleaned: list[EnvironmentEpisode] = []

    async def run(episode: EnvironmentEpisode) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # a cleanup that itself awaits
            cleaned.append(episode)
            del running[episode]

    episodes = [EnvironmentEpisode(f"r{n}", 0) for n in range(3)]
    for episode in episodes:
        running[episode] = asyncio.create_task(run(episode))
    tasks = list(running.values())
    await asyncio.sleep(0)
    await cancel_and_wait(running.values())
    assert all(task.cancelled() for task in tasks)
    assert sorted(cleaned) == episodes and running == {}
    await cancel_and_wait([])  # nothing to end: returns at once
