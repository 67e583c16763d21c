"""Tests for envckpt.sim.kinds.agent: multi-turn sessions, parking and recovery."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.sim.gym import expected_transcript
from envckpt.sim.kinds.agent import (
    AgentServer,
    InProcessModelClient,
    InProcessToolClient,
)
from envckpt.sim.kinds.model import PolicyModelServer
from envckpt.sim.kinds.resources import ToolServer

Ep = EnvironmentEpisode
TASK = {"prompt": "solve it", "turns": 4}
LONG_TASK = {"prompt": "keep going", "turns": 40}


@dataclass
class Servers:
    agent: AgentServer
    model: PolicyModelServer
    tool: ToolServer


def servers(*, latency: float = 0.0, seed: int = 0) -> Servers:
    model = PolicyModelServer(seed=seed, latency=latency)
    tool = ToolServer(seed=seed)
    agent = AgentServer(
        model=InProcessModelClient(model), tools=InProcessToolClient(tool), park_poll_seconds=0.002
    )
    return Servers(agent, model, tool)


def run_request(episode: Ep, task: dict[str, Any]) -> dict[str, Any]:
    return {"episode": episode.to_wire(), "task": task}


def deadline() -> float:
    return time.time() + 10


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        await asyncio.sleep(0.001)


def turns_of(agent: AgentServer, key: str) -> int:
    return len(agent.sessions().get(key, {}).get("turns", []))


async def test_run_completes_with_the_expected_transcript() -> None:
    """A run finishes every turn and answers the transcript a pure replay predicts."""
    s = servers(seed=9)
    result = await s.agent.run(run_request(Ep("r", 0), TASK))
    assert result["status"] == "completed" and result["capture_key"] == "r"
    assert result["transcript"] == expected_transcript("r", TASK, seed=9)
    assert [t["turn"] for t in result["turns"]] == [0, 1, 2, 3]
    assert result["total"] == sum(t["value"] for t in result["turns"])
    assert result["staging_keys"] == ["r/t0", "r/t1", "r/t2", "r/t3"]
    assert result["resumed_from_turn"] == 0


async def test_a_finished_run_frees_its_state_everywhere() -> None:
    """After finishing, neither the agent, the model nor the tool holds the episode."""
    s = servers()
    await s.agent.run(run_request(Ep("r", 0), TASK))
    assert s.agent.sessions() == {} and s.agent.running() == frozenset()
    assert s.model.staging_ledger() == {} and s.tool.sessions() == {}


@pytest.mark.parametrize(
    ("request_body", "code"),
    [
        ({"task": TASK}, "rollout_id_required"),
        ({"episode": {"rollout_id": "r", "attempt": 0}, "task": {"turns": 2}}, "invalid_request"),
        (
            {"episode": {"rollout_id": "r", "attempt": 0}, "task": {"prompt": "p", "turns": 0}},
            "invalid_request",
        ),
        ({"episode": {"rollout_id": "r", "attempt": 0}, "task": TASK, "x": 1}, "invalid_request"),
    ],
)
async def test_run_refuses_malformed_requests(request_body: dict[str, Any], code: str) -> None:
    """Missing identity or a malformed task is refused before any turn runs."""
    s = servers()
    with pytest.raises(ParticipantError) as caught:
        await s.agent.run(request_body)
    assert caught.value.code == code
    assert s.agent.sessions() == {}


async def test_a_second_run_of_a_running_episode_is_refused() -> None:
    """One episode has at most one run at a time."""
    s = servers(latency=0.002)
    first = asyncio.create_task(s.agent.run(run_request(Ep("r", 0), LONG_TASK)))
    await wait_until(lambda: turns_of(s.agent, "r") >= 1)
    with pytest.raises(ParticipantError) as caught:
        await s.agent.run(run_request(Ep("r", 0), LONG_TASK))
    assert caught.value.code == "invalid_request"
    await s.agent.shutdown()
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_run_parks_when_the_model_closes_and_continues_after_resume() -> None:
    """A turn refused by a closed model is discarded; the run parks and later finishes intact."""
    s = servers(latency=0.002)
    running = asyncio.create_task(s.agent.run(run_request(Ep("r", 0), LONG_TASK)))
    await wait_until(lambda: turns_of(s.agent, "r") >= 2)
    reply = await s.model.core.prepare("c1", deadline_ts=deadline())
    assert reply["report"]["ready"]
    await wait_until(lambda: Ep("r", 0) in s.agent.parked())
    parked_at = turns_of(s.agent, "r")
    assert s.agent.core.fence.in_flight() == frozenset()
    await asyncio.sleep(0.02)
    assert turns_of(s.agent, "r") == parked_at  # nothing moves while the model is closed
    await s.model.core.resume("c1", deadline_ts=deadline())
    result = await running
    assert result["transcript"] == expected_transcript("r", LONG_TASK, seed=0)
    assert s.agent.parks >= 1


async def test_run_parks_when_the_agent_itself_is_closed() -> None:
    """A run arriving while the agent is prepared parks without a session until resume."""
    s = servers()
    await s.agent.core.prepare("c1", deadline_ts=deadline())
    running = asyncio.create_task(s.agent.run(run_request(Ep("r", 0), TASK)))
    await wait_until(lambda: Ep("r", 0) in s.agent.parked())
    assert s.agent.sessions() == {}
    await s.agent.core.resume("c1", deadline_ts=deadline())
    assert (await running)["transcript"] == expected_transcript("r", TASK, seed=0)


async def test_agent_prepare_reports_ready_with_runs_parked_at_a_boundary() -> None:
    """With the model closed first (staged order), the agent prepares with every run parked."""
    s = servers(latency=0.002)
    runs = [
        asyncio.create_task(s.agent.run(run_request(Ep(f"r{i}", 0), LONG_TASK))) for i in range(3)
    ]
    await wait_until(lambda: all(turns_of(s.agent, f"r{i}") >= 1 for i in range(3)))
    await s.model.core.prepare("c1", deadline_ts=deadline())
    reply = await s.agent.core.prepare("c1", deadline_ts=deadline())
    assert reply["phase"] == "prepared" and reply["report"]["counts"]["live"] == 3
    exported = dict(s.agent.export(s.agent.live_episodes()))
    for episode, state in exported.items():
        assert s.agent.validate(episode, state).turns == state["turns"]
    await s.agent.core.resume("c1", deadline_ts=deadline())
    await s.model.core.resume("c1", deadline_ts=deadline())
    for i, result in enumerate(await asyncio.gather(*runs)):
        assert result["transcript"] == expected_transcript(f"r{i}", LONG_TASK, seed=0)


async def test_commit_names_every_exported_session_as_its_own_run() -> None:
    """run_episode_ids lists exactly the exported sessions."""
    s = servers()
    assert s.agent.commit_extras((Ep("b", 0), Ep("a", 2))) == {"run_episode_ids": ["a-a2", "b"]}


async def test_an_installed_session_continues_as_the_next_attempt() -> None:
    """A session installed as attempt N+1 resumes at its saved turn and finishes alike."""
    s = servers(latency=0.002)
    running = asyncio.create_task(s.agent.run(run_request(Ep("r", 0), LONG_TASK)))
    await wait_until(lambda: turns_of(s.agent, "r") >= 3)
    await s.model.core.prepare("c1", deadline_ts=deadline())
    await s.agent.core.prepare("c1", deadline_ts=deadline())
    saved = dict(s.agent.export(frozenset({Ep("r", 0)})))[Ep("r", 0)]
    await s.agent.shutdown()
    with pytest.raises(asyncio.CancelledError):
        await running

    fresh = servers()
    fresh.agent.install([(Ep("r", 1), fresh.agent.validate(Ep("r", 0), saved))])
    result = await fresh.agent.run(run_request(Ep("r", 1), LONG_TASK))
    assert result["resumed_from_turn"] == len(saved["turns"])
    assert result["transcript"] == expected_transcript("r", LONG_TASK, seed=0)
    attempts = [turn["attempt"] for turn in result["turns"]]
    assert attempts == [0] * len(saved["turns"]) + [1] * (40 - len(saved["turns"]))


async def test_a_run_with_another_task_than_its_session_is_refused() -> None:
    """An installed session only continues the task it was saved with."""
    s = servers()
    saved = {"task": TASK, "turns": [], "transcript": ["user: solve it"]}
    s.agent.install([(Ep("r", 1), s.agent.validate(Ep("r", 0), saved))])
    with pytest.raises(ParticipantError) as caught:
        await s.agent.run(run_request(Ep("r", 1), {"prompt": "other", "turns": 4}))
    assert caught.value.code == "invalid_request"


@pytest.mark.parametrize(
    "retired_by", ["agent", "model"], ids=["retired-on-the-agent", "stale-at-the-model-callee"]
)
async def test_a_retired_attempt_is_refused_with_stale_attempt(retired_by: str) -> None:
    """A run of an attempt retired on the agent ends with stale_attempt and leaves no
    session; stale_attempt from a callee (the model) ends the run rather than parking it."""
    s = servers()
    core = s.agent.core if retired_by == "agent" else s.model.core
    await core.retire("x1", deadline_ts=deadline(), episode_ids=[Ep("r", 0)])
    with pytest.raises(ParticipantError) as caught:
        await s.agent.run(run_request(Ep("r", 0), TASK))
    assert caught.value.code == "stale_attempt"
    if retired_by == "agent":  # the agent's own retire also drops the session
        assert s.agent.sessions() == {}


async def test_retire_stops_a_running_run_and_frees_its_session() -> None:
    """Retire cancels the run's work; its caller sees stale_attempt; others keep running."""
    s = servers(latency=0.002)
    doomed = asyncio.create_task(s.agent.run(run_request(Ep("r", 0), LONG_TASK)))
    other = asyncio.create_task(s.agent.run(run_request(Ep("s", 0), TASK)))
    await wait_until(lambda: turns_of(s.agent, "r") >= 2)
    await s.agent.core.retire("x1", deadline_ts=deadline(), episode_ids=[Ep("r", 0)])
    with pytest.raises(ParticipantError) as caught:
        await doomed
    assert caught.value.code == "stale_attempt"
    assert "r" not in s.agent.sessions() and Ep("r", 0) not in s.agent.running()
    assert (await other)["status"] == "completed"


def _valid_state() -> dict[str, Any]:
    observation = "solve it"
    turns, transcript = [], ["user: solve it"]
    for turn in range(2):
        action, seen = f"act-{turn}", f"obs{turn}"
        turns.append(
            {
                "turn": turn,
                "attempt": 0,
                "observation": observation,
                "action": action,
                "tool_observation": seen,
                "value": 3,
                "application": f"proc/{turn}",
            }
        )
        transcript += [f"assistant: {action}", f"tool: {seen}"]
        observation = seen
    return {"task": dict(TASK), "turns": turns, "transcript": transcript}


def _corrupt(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    state = copy.deepcopy(_valid_state())
    change(state)
    return state


def test_validate_accepts_a_consistent_session() -> None:
    """A consistent saved session parses back into the same state."""
    state = _valid_state()
    assert servers().agent.validate(Ep("r", 0), state).to_state() == state


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.pop("transcript"),
        lambda s: s.update(extra=1),
        lambda s: s.update(task={"prompt": "p"}),
        lambda s: s.update(task={"prompt": "p", "turns": 1}),
        lambda s: s.update(turns={}),
        lambda s: s["turns"][1].update(turn=5),
        lambda s: s["turns"][1].update(turn=True),
        lambda s: s["turns"][0].update(attempt=1),
        lambda s: s["turns"][0].update(attempt=-1),
        lambda s: s["turns"][1].update(observation="elsewhere"),
        lambda s: s["turns"][0].update(action=7),
        lambda s: s["turns"][0].update(value="3"),
        lambda s: s["turns"][0].pop("value"),
        lambda s: s["turns"][0].update(application=None),
        lambda s: s["transcript"].append("tool: extra"),
        lambda s: s["transcript"].__setitem__(0, "user: other"),
    ],
)
def test_validate_rejects_corrupt_sessions(change: Callable[[dict[str, Any]], object]) -> None:
    """Shape errors and any disagreement between task, turns and transcript raise ValueError."""
    with pytest.raises(ValueError):
        servers().agent.validate(Ep("r", 0), _corrupt(change))
