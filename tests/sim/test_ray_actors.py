"""Tests for envckpt.sim.ray_actors: Gym instances in Ray actors behind the facade."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import DeadlineExceeded, GymCheckpointUnavailable, IllegalTransition
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.inventory import InMemoryInventory
from envckpt.sim.gym import GymConfig, SimulatedGym
from envckpt.sim.ray_actors import SimRayInstance, actor_name, spawn_instances

from helpers.facade_world import LiveCut
from helpers.local_ray import local_ray

# envckpt.sim.ray_actors imports ray only when used, so the module imports without it.
ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

Ep = EnvironmentEpisode
A = GymCheckpointInstance("shard", 0)
B = GymCheckpointInstance("shard", 1)
TURNS = 40
TASK: dict[str, Any] = {"prompt": "cross the river", "turns": TURNS}
# Tool latency keeps rollouts mid-flight when the snapshot arrives.
CONFIG = GymConfig(seed=13, tool_latency=0.01, park_poll_seconds=0.002)
TIMEOUTS = CheckpointTimeouts(
    prepare_seconds=10,
    commit_seconds=10,
    control_seconds=10,
    restore_seconds=10,
    renew_interval_seconds=1e6,
)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """One quiet local Ray cluster for the whole module (no dashboard, loopback only)."""
    with local_ray("envckpt-tests"):
        yield


async def wait_until(predicate: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < end, "condition not reached in time"
        await asyncio.sleep(0.01)


async def mid_flight(client: SimRayInstance, episodes: tuple[EnvironmentEpisode, ...]) -> bool:
    sessions = await client.agent_sessions()
    return all(len(sessions.get(e.capture_key, {}).get("turns", ())) >= 2 for e in episodes)


def kill(clients: list[SimRayInstance]) -> None:
    for client in clients:
        ray.kill(client.handle, no_restart=True)


async def first_refusal(client: SimRayInstance) -> GymCheckpointUnavailable:
    """The first ``state()`` refused once ``ray.kill`` has landed.

    ``ray.kill`` returns before the actor is gone: under load a call made at
    once can still be served by it.
    """
    deadline = time.monotonic() + 30
    while True:
        try:
            await client.state()
        except GymCheckpointUnavailable as refused:
            return refused
        assert time.monotonic() < deadline, "the killed actor still answers after 30 s"
        await asyncio.sleep(0.05)


def expected(rollout_id: str) -> list[str]:
    return SimulatedGym.from_config(CONFIG).expected_transcript(rollout_id, TASK)


async def test_rollouts_snapshotted_in_actors_continue_in_replacement_actors(
    tmp_path: Path,
) -> None:
    """Snapshot two actors mid-rollout, replace both, restore: rollouts finish as attempt N+1."""
    clients = spawn_instances([A, B], CONFIG, slack_seconds=2.0)
    inventory = InMemoryInventory()
    facade = GymEnvironmentCheckpoint(clients, inventory, timeouts=TIMEOUTS)
    await facade.check_startup()
    episodes = {A.instance_id: (Ep("a0", 0), Ep("a1", 0)), B.instance_id: (Ep("b0", 0),)}
    for client in clients:
        for episode in episodes[client.instance_id]:
            await client.start_rollout(episode, TASK)
            inventory.add(client.instance_id, episode)
    for client in clients:
        await wait_until(lambda c=client: mid_flight(c, episodes[c.instance_id]))

    path = tmp_path / "snapshot"
    async with facade.snapshot(path) as snap:
        assert snap is not None
        await snap.check_against_cut(LiveCut())
        # Paused at a turn boundary: the sessions now are what was saved.
        saved = {
            key: len(session["turns"])
            for client in clients
            for key, session in (await client.agent_sessions()).items()
        }
        assert snap.contents.exported == episodes
    assert {await client.state() for client in clients} == {"resumed"}
    assert all(0 < turns < TURNS for turns in saved.values())

    kill(clients)  # the actors' processes die mid-rollout
    fresh = spawn_instances([A, B], CONFIG, slack_seconds=2.0)
    restarted = GymEnvironmentCheckpoint(fresh, inventory, timeouts=TIMEOUTS)
    await restarted.check_startup()
    async with restarted.restored(path) as restored:
        continued = restored.continued_attempts
    assert continued == {
        (iid, e.rollout_id, e.attempt) for iid, eps in episodes.items() for e in eps
    }

    by_id = {client.instance_id: client for client in fresh}
    for iid, rollout_id, attempt in sorted(continued):
        await by_id[iid].start_rollout(Ep(rollout_id, attempt + 1), TASK)
    for iid, rollout_id, attempt in sorted(continued):
        result = await by_id[iid].wait_rollout(Ep(rollout_id, attempt + 1), 30.0)
        assert result["status"] == "completed"
        assert result["capture_key"] == f"{rollout_id}-a{attempt + 1}"
        assert result["transcript"] == expected(rollout_id)
        assert result["resumed_from_turn"] == saved[rollout_id] > 0
    kill(fresh)


async def test_errors_raised_in_the_actor_arrive_typed_with_their_fields(tmp_path: Path) -> None:
    """IllegalTransition, DeadlineExceeded and ValueError cross the actor boundary as themselves."""
    [client] = spawn_instances([A], CONFIG)
    await client.discover()
    with pytest.raises(IllegalTransition) as caught:
        await client.commit("ck-1", str(tmp_path), (), deadline_ts=time.time() + 10)
    error = caught.value
    assert type(error) is IllegalTransition
    assert (error.machine, error.instance, error.state, error.trigger) == (
        "instance_lifecycle",
        A.instance_id,
        "discovered",
        "commit",
    )
    assert str(error) == error.message and "Traceback" not in str(error)
    assert not isinstance(error, ray.exceptions.RayError)

    # A DeadlineExceeded is also a TimeoutError: still the actor's error, not a silent actor.
    await client.start_rollout(Ep("slow", 0), TASK)
    with pytest.raises(DeadlineExceeded) as late:
        await client.wait_rollout(Ep("slow", 0), 0.05)
    assert type(late.value) is DeadlineExceeded and late.value.deadline_ts > 0
    assert await client.rollout_result(Ep("slow", 0)) is None  # still running

    # A rollout stopped by shutdown reports as stopped, not as a cancelled call.
    await client.shutdown()
    with pytest.raises(GymCheckpointUnavailable) as stopped:
        await client.rollout_result(Ep("slow", 0))
    assert stopped.value.operation == "rollout"
    with pytest.raises(ValueError, match="no rollout"):
        await client.wait_rollout(Ep("never", 0), 1.0)
    kill([client])


async def test_a_silent_actor_is_cancelled_and_the_others_are_resumed(tmp_path: Path) -> None:
    """A prepare that outlives its deadline is cancelled; the snapshot fails retryably."""
    clients = spawn_instances([A, B], CONFIG, slack_seconds=0.2)
    silent, healthy = clients
    inventory = InMemoryInventory()
    facade = GymEnvironmentCheckpoint(
        clients, inventory, timeouts=CheckpointTimeouts(prepare_seconds=0.5, control_seconds=10)
    )
    await facade.check_startup()
    episode = Ep("b0", 0)
    await healthy.start_rollout(episode, TASK)
    inventory.add(B.instance_id, episode)
    await wait_until(lambda: mid_flight(healthy, (episode,)))
    await silent.stall(30.0, "prepare")

    started = time.monotonic()
    with pytest.raises(GymCheckpointUnavailable) as caught:
        async with facade.snapshot(tmp_path / "snapshot"):
            pytest.fail("the snapshot must not be taken")
    assert time.monotonic() - started < 10
    assert facade.is_unavailable(caught.value)
    assert caught.value.operation == "prepare"
    assert set(caught.value.failures) == {A.instance_id}
    assert "cancelled" in caught.value.failures[A.instance_id]

    await wait_until(lambda: _equals(silent.cancelled_calls(), 1))
    assert await silent.state() == "discovered"  # the cancelled call changed nothing
    assert await healthy.state() == "resumed"  # prepared, then resumed by the abort
    result = await healthy.wait_rollout(episode, 30.0)
    assert result["transcript"] == expected("b0")
    assert result["resumed_from_turn"] == 0
    kill(clients)


async def test_a_killed_actor_is_unavailable() -> None:
    """Every call to a dead actor raises GymCheckpointUnavailable naming operation and instance."""
    [client] = spawn_instances([A], CONFIG)
    await client.discover()
    kill([client])
    dead = await first_refusal(client)
    assert dead.operation == "state"
    assert set(dead.failures) == {A.instance_id}
    assert "Actor" in dead.failures[A.instance_id]
    with pytest.raises(GymCheckpointUnavailable) as caught:
        await client.prepare("ck-1", deadline_ts=time.time() + 10)
    assert caught.value.operation == "prepare"

    facade = GymEnvironmentCheckpoint([client], InMemoryInventory(), timeouts=TIMEOUTS)
    with pytest.raises(GymCheckpointUnavailable):
        await facade.check_startup()


async def test_a_call_past_its_deadline_is_not_sent() -> None:
    """A deadline already behind (beyond the slack) fails at once, without touching the actor."""
    [client] = spawn_instances([A], CONFIG, slack_seconds=0.0)
    await client.discover()
    with pytest.raises(GymCheckpointUnavailable) as caught:
        await client.prepare("ck-1", deadline_ts=time.time() - 1)
    assert caught.value.operation == "prepare"
    assert await client.state() == "discovered"
    kill([client])


async def test_named_actors_live_in_the_given_namespace() -> None:
    """With a namespace, each actor is found by its instance's name."""
    [client] = spawn_instances([B], CONFIG, namespace="envckpt-named")
    found = ray.get_actor(actor_name(B), namespace="envckpt-named")
    assert await found.call.remote("state") == "undiscovered"
    # The actor's own GymCheckpointUnavailable passes through as itself.
    with pytest.raises(GymCheckpointUnavailable) as caught:
        await client.participant_names()
    assert caught.value.operation == "discover"
    assert not isinstance(caught.value, ray.exceptions.RayError)
    kill([client])


def test_importing_the_module_does_not_import_ray() -> None:
    """ray stays an optional extra: importing envckpt.sim.ray_actors leaves it unimported."""
    code = "import sys, envckpt.sim.ray_actors; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


async def _equals(value: Awaitable[object], wanted: object) -> bool:
    return await value == wanted
