"""The checkpointable agent ``/run``: explicit phases, steps admitted, state saved at boundaries.

nemo-gym's agents run a rollout as one long handler (``/run`` calls its own
``/v1/responses`` over HTTP), which no process can save. Here ``/run``
drives a ``RunState`` through the phases ``seed -> loop -> verify ->
return``; every step (the seed, one pass of the turn loop, the verify, the
return) runs inside ``core.admit`` on a copy of the state, which replaces the
saved one only when the step completed, so the saved state is always at a
boundary::

    runtime = AgentRuntime(server=agent, recipe=SimpleAgentRecipe(agent, SimpleAgentRunRequest),
                           server_name="agent")
    result = await runtime.run(body_json)      # the /run handler; ParticipantError on refusal

A step refused with ``admission_closed`` (this agent is closed, or the model
it calls closed first, per the staged prepare order, or the model refused a
generation already running for a checkpoint) leaves the state where it was
and **parks**: it waits until this agent is open again, then retries, so a
refused model call is issued again from the same turn. The saved state
counts those refusals (``refused_model_calls``); nothing else records them.
``stale_attempt`` ends the run. A restore installs each saved state as the
next attempt; that attempt's ``/run`` continues from the saved phase.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from envckpt.episodes import EnvironmentEpisode, capture_keys, retired_by
from envckpt.errors import ParticipantError
from envckpt.nemo_gym.calls import EpisodeCalls
from envckpt.nemo_gym.run_state import (
    ATTEMPT_KEY,
    ROLLOUT_ID_KEY,
    RunState,
    task_of,
)
from envckpt.participant.agent_steps import (
    cancel_and_wait,
    run_own_task,
    step_until_done,
    wait_until_open,
)
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import HookDefaults

PARK_FIRST_SECONDS = 0.02
PARK_MAX_SECONDS = 0.25


class Recipe(Protocol):
    """One agent's rollout, cut into steps that each end at a boundary."""

    flavor: str

    def start(self, body: dict[str, Any]) -> RunState: ...

    async def seed(self, run: RunState, calls: EpisodeCalls) -> None: ...

    async def turn(self, run: RunState, calls: EpisodeCalls) -> None: ...

    async def verify(self, run: RunState, calls: EpisodeCalls) -> None: ...

    async def close(self, run: RunState, calls: EpisodeCalls) -> None: ...

    def result(self, run: RunState) -> dict[str, Any]: ...

    def validate_loop(self, run: RunState) -> None: ...

    def step_of(self, run: RunState) -> int: ...


def episode_of(body: Mapping[str, Any]) -> EnvironmentEpisode:
    """The attempt a ``/run`` body names (``_ng_rollout_id``, ``_ng_attempt_index``)."""
    rollout_id = body.get(ROLLOUT_ID_KEY)
    if rollout_id is None:
        raise ParticipantError("rollout_id_required", f"/run needs {ROLLOUT_ID_KEY}")
    attempt = body.get(ATTEMPT_KEY, 0)
    try:
        return EnvironmentEpisode(rollout_id, int(attempt))
    except (TypeError, ValueError) as error:
        raise ParticipantError("invalid_request", f"rollout identity: {error}") from None


class AgentRuntime(HookDefaults):
    """The ``/run`` driver and ``StateHooks`` of one checkpointable agent server."""

    def __init__(
        self,
        *,
        server: Any,
        recipe: Recipe,
        server_name: str,
        calls: Callable[[Any, EnvironmentEpisode], EpisodeCalls] = EpisodeCalls.for_agent,
    ) -> None:
        self.server = server
        self.recipe = recipe
        self._calls = calls
        self._runs: dict[EnvironmentEpisode, RunState] = {}
        self._tasks: dict[EnvironmentEpisode, asyncio.Task[dict[str, Any]]] = {}
        self._parked: set[EnvironmentEpisode] = set()
        self.parks = 0
        self.model_calls_refused = 0
        self.core = ParticipantCore(server_name=server_name, kind="agent", hooks=self)

    # ---------------------------------------------------------------- /run

    async def run(self, body: dict[str, Any]) -> dict[str, Any]:
        """Run (or continue) one attempt to its end; refusals raise ``ParticipantError``."""
        episode = episode_of(body)
        held = self._runs.get(episode)
        if held is not None and task_of(held.body) != task_of(body):
            raise ParticipantError("invalid_request", f"{episode.capture_key} holds another task")
        if episode in self._tasks:
            raise ParticipantError("invalid_request", f"{episode.capture_key} is already running")
        work = step_until_done(
            lambda: self._step(episode, body),
            park=lambda: self._park(episode),
            on_refused_call=lambda: self._count_refused(episode),
        )
        return await run_own_task(episode, work, running=self._tasks, fence=self.core.fence)

    async def _step(
        self, episode: EnvironmentEpisode, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        async with self.core.admit(episode):
            run = self._runs.get(episode)
            if run is None:  # the boundary before the seed
                run = self._runs[episode] = self.recipe.start(dict(body))
            calls = self._calls(self.server, episode)
            work = run.copy()
            work.body = dict(body)  # a continued attempt carries its own attempt index
            if work.phase == "return":
                await self.recipe.close(work, calls)
                staging_keys = await calls.release_model()
                del self._runs[episode]
                return self._result(episode, work, staging_keys)
            step = self._phase_step(work.phase)
            await step(work, calls)
            if not self.core.fence.is_current(episode):
                raise ParticipantError("stale_attempt", f"{episode.capture_key} was retired")
            self._runs[episode] = work
            return None

    def _count_refused(self, episode: EnvironmentEpisode) -> None:
        """The model refused this step's call: the saved state counts it (still a boundary).

        Nothing awaits between the step leaving admission and this, so a
        commit of this agent never sees the step left without its count.
        """
        self.model_calls_refused += 1
        run = self._runs.get(episode)
        if run is not None:
            run.refused_model_calls += 1

    def _phase_step(self, phase: str) -> Callable[[RunState, EpisodeCalls], Awaitable[None]]:
        steps = {"seed": self.recipe.seed, "loop": self.recipe.turn, "verify": self.recipe.verify}
        return steps[phase]

    def _result(
        self, episode: EnvironmentEpisode, run: RunState, staging_keys: list[str]
    ) -> dict[str, Any]:
        result = self.recipe.result(run)
        result["staging_keys"] = staging_keys
        result["envckpt"] = {
            "capture_key": episode.capture_key,
            "attempt": episode.attempt,
            "continued": run.continued,
            "applications": run.applications,
            "steps": self.recipe.step_of(run),
            "model_calls_refused": run.refused_model_calls,
        }
        return result

    async def _park(self, episode: EnvironmentEpisode) -> None:
        """Wait until this agent is open again (polled with backoff), then let the step be
        retried."""
        self.parks += 1
        self._parked.add(episode)
        try:
            await wait_until_open(
                self.core, first_seconds=PARK_FIRST_SECONDS, max_seconds=PARK_MAX_SECONDS
            )
        finally:
            self._parked.discard(episode)

    # ---------------------------------------------------------- inspection

    def runs(self) -> dict[str, dict[str, Any]]:
        return {episode.capture_key: run.to_json() for episode, run in self._runs.items()}

    def parked(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self._parked)

    async def shutdown(self) -> None:
        """Stop every running ``/run`` as if the process died."""
        await cancel_and_wait(self._tasks.values())

    # --------------------------------------------------------- state hooks

    def live_episodes(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self._runs)

    async def close_admission(self) -> None:
        return None  # running steps finish at their boundary; new ones park

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        for episode in sorted(scope & self._runs.keys()):
            yield episode, self._runs[episode].to_json()

    def commit_extras(self, exported: tuple[EnvironmentEpisode, ...]) -> dict[str, Any]:
        return {"run_episode_ids": capture_keys(exported)}  # every run started in this /run

    def validate(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> RunState:
        run = RunState.from_json(state)
        if run.flavor != self.recipe.flavor:
            raise ValueError(f"a {run.flavor} run cannot continue on a {self.recipe.flavor} agent")
        if episode_of(run.body) != episode:
            raise ValueError(f"the saved run is not {episode.capture_key}'s")
        self.recipe.validate_loop(run)
        return run

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        plans = [(episode, _as_run(run)) for episode, run in restored]
        for episode, run in plans:
            marker = {
                "attempt": episode.attempt,
                "phase": run.phase,
                "step": self.recipe.step_of(run),
            }
            run.continued.append(marker)
            run.body[ATTEMPT_KEY] = episode.attempt
            self._runs[episode] = run

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        await cancel_and_wait(task for e, task in self._tasks.items() if retired_by(e, episodes))
        for held in [e for e in self._runs if retired_by(e, episodes)]:
            del self._runs[held]


def _as_run(run: object) -> RunState:
    if not isinstance(run, RunState):
        raise TypeError(f"expected a validated RunState, got {type(run).__name__}")
    return run
