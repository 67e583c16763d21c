"""Tests for envckpt.sim.http_gym: the trainer's two pools to one Gym served over HTTP."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pytest

from envckpt.coordination.transport import TransportFailure
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CoordinationError
from envckpt.sim.data_clients import DataPlaneUnavailable
from envckpt.sim.gym import AGENT_SERVER, MODEL_SERVER, expected_transcript
from envckpt.sim.http_gym import HttpBackend, HttpGym
from envckpt.sim.server import GymServers

# Checkpoints go under pytest's temporary directories.
ROOT = tempfile.gettempdir()
TOKEN = "http-gym-token-5c1d"
SEED = 4
TASK: dict[str, Any] = {"prompt": "sort the shelves", "turns": 4}
E1, E2 = EnvironmentEpisode("r1", 0), EnvironmentEpisode("r2", 0)


def test_an_unknown_agent_server_is_refused() -> None:
    """Without the agent server among the URLs nothing is built: ValueError naming the servers."""
    with pytest.raises(ValueError, match=rf"no agent server '{AGENT_SERVER}'.*{MODEL_SERVER}"):
        HttpGym({MODEL_SERVER: "http://127.0.0.1:9"}, token=TOKEN)


def test_the_token_stays_out_of_the_repr() -> None:
    """repr shows the URLs, never the bearer token."""
    gym = HttpGym({AGENT_SERVER: "http://127.0.0.1:9"}, token=TOKEN)
    assert TOKEN not in repr(gym) and "127.0.0.1:9" in repr(gym)
    asyncio.run(gym.aclose())


async def test_run_and_start_drive_rollouts_through_the_agent() -> None:
    """run returns the scripted result; start runs another in a named background task."""
    async with (
        GymServers(seed=SEED, token=TOKEN, checkpoint_root=ROOT, judge=False) as servers,
        HttpGym(servers.urls, token=TOKEN) as gym,
    ):
        background = gym.start(E2, TASK)
        assert background.get_name() == "rollout r2"
        first = await gym.run(E1, TASK)
        second = await background
    assert first["transcript"] == expected_transcript("r1", TASK, seed=SEED)
    assert second["transcript"] == expected_transcript("r2", TASK, seed=SEED)
    assert second["capture_key"] == "r2"


async def test_a_snapshot_pauses_a_started_rollout_which_then_finishes() -> None:
    """The control pool prepares and resumes while the data pool's rollout waits, then ends."""
    long_task = {**TASK, "turns": 40}
    async with (
        GymServers(
            seed=SEED, token=TOKEN, checkpoint_root=ROOT, judge=False, tool_latency=0.02
        ) as servers,
        HttpGym(servers.urls, token=TOKEN) as gym,
    ):
        rollout = gym.start(E1, long_task)
        await until(lambda: turns_of(servers, "r1") >= 2)
        participants = await gym.coordinator.discover()
        assert {m.server_name for m in participants.members} == set(servers.urls)
        deadline = time.time() + 30
        result = await gym.coordinator.prepare(participants, "ck-http", deadline_ts=deadline)
        assert result.prepared
        paused_at = turns_of(servers, "r1")
        await asyncio.sleep(0.1)
        assert turns_of(servers, "r1") == paused_at < 40 and not rollout.done()
        await gym.coordinator.resume(participants, "ck-http", deadline_ts=deadline)
        outcome = await asyncio.wait_for(rollout, 60)
    assert outcome["transcript"] == expected_transcript("r1", long_task, seed=SEED)


def turns_of(servers: GymServers, capture_key: str) -> int:
    return len(servers.agent.sessions().get(capture_key, {}).get("turns", ()))


async def until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    give_up = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < give_up, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_the_token_authenticates_only_the_control_pool() -> None:
    """With a wrong token control calls are refused, while rollouts (no token) still run."""
    async with (
        GymServers(seed=SEED, token=TOKEN, checkpoint_root=ROOT, judge=False) as servers,
        HttpGym(servers.urls, token="not-the-token") as gym,
    ):
        with pytest.raises(CoordinationError):
            await gym.coordinator.discover()
        result = await gym.run(E1, TASK)
    assert result["transcript"] == expected_transcript("r1", TASK, seed=SEED)


async def test_a_run_timeout_bounds_one_rollout() -> None:
    """A rollout slower than its timeout raises DataPlaneUnavailable; the pools stay usable."""
    async with (
        GymServers(
            seed=SEED, token=TOKEN, checkpoint_root=ROOT, judge=False, tool_latency=0.2
        ) as servers,
        HttpGym(servers.urls, token=TOKEN) as gym,
    ):
        with pytest.raises(DataPlaneUnavailable):
            await gym.run(E1, TASK, timeout=0.05)
        participants = await gym.coordinator.discover()
        assert participants.members


async def test_closing_closes_both_pools_even_if_the_agents_close_fails() -> None:
    """aclose closes the control transport after the agent client, whatever the agent did."""
    gym = HttpGym({AGENT_SERVER: "http://127.0.0.1:9"}, token=TOKEN)
    real_close = gym.agent.aclose

    async def failing_close() -> None:
        await real_close()
        raise OSError("agent pool would not close")

    gym.agent.aclose = failing_close  # type: ignore[method-assign]
    with pytest.raises(OSError, match="would not close"):
        await gym.aclose()
    with pytest.raises(TransportFailure, match="closed"):
        await gym.transport.request(AGENT_SERVER, "GET", "status", None, timeout=1.0)
    assert gym.agent._client.is_closed


async def test_the_backend_runs_each_rollout_on_its_instances_gym() -> None:
    """HttpBackend.run goes to the Gym of the instance named, with that Gym's result."""
    async with (
        GymServers(seed=SEED, token=TOKEN, checkpoint_root=ROOT, judge=False) as servers,
        HttpGym(servers.urls, token=TOKEN) as gym,
    ):
        backend = HttpBackend({"shard/replica-0": gym})
        result = await backend.run("shard/replica-0", E1, TASK)
        with pytest.raises(KeyError):
            await backend.run("shard/replica-1", E2, TASK)
    assert result["transcript"] == expected_transcript("r1", TASK, seed=SEED)
