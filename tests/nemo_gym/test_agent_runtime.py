"""Tests of the phased /run runtime: boundaries, parking, restore, retire, tampered states."""

from __future__ import annotations

import asyncio
import copy
import time
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("responses_api_agents.simple_agent.app")

from responses_api_agents.simple_agent.app import SimpleAgentConfig, SimpleAgentRunRequest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.ids import mint_checkpoint_id
from envckpt.nemo_gym.agent_runtime import AgentRuntime, episode_of
from envckpt.nemo_gym.run_state import RunState
from envckpt.nemo_gym.simple_agent import SimpleAgentRecipe

BODY = {
    "responses_create_params": {"input": [{"role": "user", "content": "add 1 then get the count"}]},
    "initial_count": 0,
    "expected_count": 1,
    "_ng_rollout_id": "r1",
}


def deadline() -> float:
    return time.time() + 30


class CountingRecipe:
    """A recipe of three turns whose turns wait on a gate (no servers involved)."""

    flavor = "counting"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.turns_started = 0

    def start(self, body: dict[str, Any]) -> RunState:
        return RunState(flavor=self.flavor, body=body, loop={"step": 0})

    async def seed(self, run: RunState, calls: Any) -> None:
        run.phase = "loop"

    async def turn(self, run: RunState, calls: Any) -> None:
        self.turns_started += 1
        await self.gate.wait()
        run.loop["step"] += 1
        if run.loop["step"] == 3:
            run.phase = "verify"

    async def verify(self, run: RunState, calls: Any) -> None:
        run.phase = "return"

    async def close(self, run: RunState, calls: Any) -> None:
        return None

    def result(self, run: RunState) -> dict[str, Any]:
        return {"steps": run.loop["step"]}

    def validate_loop(self, run: RunState) -> None:
        if run.loop.get("step", -1) < 0:
            raise ValueError("bad step")

    def step_of(self, run: RunState) -> int:
        step: int = run.loop["step"]
        return step


class NoCalls:
    async def release_model(self) -> list[str]:
        return ["r1/x"]


def runtime(recipe: Any) -> AgentRuntime:
    return AgentRuntime(
        server=None, recipe=recipe, server_name="agent", calls=lambda s, e: NoCalls()
    )


async def a_run_inside_its_first_turn() -> tuple[
    CountingRecipe, AgentRuntime, asyncio.Task[dict[str, Any]]
]:
    """A counting run of BODY started and held inside its first turn (the gate closed)."""
    recipe = CountingRecipe()
    agent = runtime(recipe)
    recipe.gate.clear()
    running = asyncio.create_task(agent.run(dict(BODY)))
    while recipe.turns_started < 1:
        await asyncio.sleep(0.01)
    return recipe, agent, running


async def test_a_run_parks_at_a_boundary_and_continues_after_resume() -> None:
    """Closing admission mid-turn lets the turn finish, then the run waits; resume finishes it."""
    recipe, agent, running = await a_run_inside_its_first_turn()
    cid = mint_checkpoint_id("p")
    preparing = asyncio.create_task(agent.core.prepare(cid, deadline_ts=deadline()))
    await asyncio.sleep(0.05)
    assert not preparing.done()  # the turn in flight blocks the boundary
    recipe.gate.set()
    assert (await preparing)["report"]["ready"]
    await asyncio.sleep(0.1)
    assert agent.parked() == {EnvironmentEpisode("r1", 0)}
    assert agent.runs()["r1"]["loop"] == {"step": 1}
    await agent.core.resume(cid, deadline_ts=deadline())
    result = await asyncio.wait_for(running, 10)
    assert result["steps"] == 3
    assert result["staging_keys"] == ["r1/x"]
    assert result["envckpt"] == {
        "capture_key": "r1",
        "attempt": 0,
        "continued": [],
        "applications": [],
        "steps": 3,
        "model_calls_refused": 0,
    }
    assert agent.live_episodes() == frozenset()


async def test_a_restored_run_continues_as_the_next_attempt() -> None:
    """An exported run installs as attempt 1 with a continued marker and runs from its step."""
    recipe = CountingRecipe()
    source = runtime(recipe)
    saved = RunState(flavor="counting", body=dict(BODY), phase="loop", loop={"step": 2}).to_json()
    restored = runtime(CountingRecipe())
    state = restored.validate(EnvironmentEpisode("r1", 0), saved)
    restored.install([(EnvironmentEpisode("r1", 1), state)])
    assert source.live_episodes() == frozenset()
    result = await restored.run({**BODY, "_ng_attempt_index": 1})
    assert result["steps"] == 3
    assert result["envckpt"]["continued"] == [{"attempt": 1, "phase": "loop", "step": 2}]
    assert result["envckpt"]["capture_key"] == "r1-a1"


async def test_retire_stops_a_running_attempt() -> None:
    """A retired attempt's run is cancelled and answered stale_attempt; its state is gone."""
    _, agent, running = await a_run_inside_its_first_turn()
    await agent.core.retire(
        mint_checkpoint_id("r"), deadline_ts=deadline(), episode_ids=[EnvironmentEpisode("r1", 0)]
    )
    with pytest.raises(ParticipantError) as caught:
        await running
    assert caught.value.code == "stale_attempt"
    assert agent.live_episodes() == frozenset()


async def test_two_runs_of_one_attempt_are_refused() -> None:
    """A second /run of an attempt already running is invalid; a task change too."""
    recipe, agent, running = await a_run_inside_its_first_turn()
    with pytest.raises(ParticipantError, match="already running"):
        await agent.run(dict(BODY))
    with pytest.raises(ParticipantError, match="another task"):
        await agent.run({**BODY, "expected_count": 9})
    recipe.gate.set()
    await running


def test_rollout_identity_of_a_body() -> None:
    """The body names its attempt; without a rollout id it is refused."""
    assert episode_of({"_ng_rollout_id": "r1", "_ng_attempt_index": 2}) == EnvironmentEpisode(
        "r1", 2
    )
    with pytest.raises(ParticipantError, match="rollout_id_required"):
        episode_of({})
    with pytest.raises(ParticipantError, match="invalid_request"):
        episode_of({"_ng_rollout_id": "r1-a1"})  # the suffix is reserved


def simple_runtime() -> AgentRuntime:
    config = SimpleAgentConfig(
        host="127.0.0.1",
        port=1,
        entrypoint="app.py",
        name="agent",
        resources_server={"type": "resources_servers", "name": "counter"},
        model_server={"type": "responses_api_models", "name": "policy_model"},
    )
    server = SimpleNamespace(config=config)
    return AgentRuntime(
        server=server, recipe=SimpleAgentRecipe(server, SimpleAgentRunRequest), server_name="agent"
    )


def simple_state() -> dict[str, Any]:
    run = SimpleAgentRecipe(SimpleNamespace(config=None), SimpleAgentRunRequest).start(dict(BODY))
    run.phase, run.loop["step"] = "loop", 1
    run.resources_cookies = {"StatefulCounterResourcesServer___counter": "signed"}
    return run.to_json()


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s.update(flavor="gymnasium_agent"),
        lambda s: s["body"].update(_ng_rollout_id="r2"),
        lambda s: s.update(phase="verify"),  # no final response yet
        lambda s: s.update(phase="sleeping"),
        lambda s: s["loop"].update(step=-1),
        lambda s: s["loop"].pop("outputs"),
        lambda s: s.update(resources_cookies={"a": 1}),
        lambda s: s["body"].pop("responses_create_params"),
        lambda s: s.pop("continued"),
    ],
)
def test_tampered_run_states_are_refused(tamper: Any) -> None:
    """A state of another flavor, rollout or shape is refused before anything is installed."""
    agent = simple_runtime()
    state = simple_state()
    agent.validate(EnvironmentEpisode("r1", 0), copy.deepcopy(state))  # the untouched one is fine
    tamper(state)
    with pytest.raises((ValueError, TypeError)):
        agent.validate(EnvironmentEpisode("r1", 0), state)
