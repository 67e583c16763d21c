"""Tests for envckpt.facade.ray_instance: the actor host's generic call and its bounded client."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envckpt.errors import GymCheckpointUnavailable, ProtocolViolation
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import InstanceClient
from envckpt.facade.ray_instance import INSTANCE_OPERATIONS, RayInstance
from envckpt.gym.summaries import GymCheckpointPrepareSummary
from envckpt.inventory import InMemoryInventory

from helpers.facade_world import E1, A, LiveCut
from helpers.local_ray import local_ray
from helpers.ray_hosts import DictInstanceActor

TIMEOUTS = CheckpointTimeouts(
    prepare_seconds=10, commit_seconds=10, control_seconds=10, renew_interval_seconds=1e6
)


# ----------------------------------------------------- in process, without Ray


def test_the_actor_forwards_exactly_the_interfaces_operations() -> None:
    """INSTANCE_OPERATIONS is InstanceClient's operations: none missing, none extra."""
    operations = {
        name
        for name, member in vars(InstanceClient).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }
    assert operations == INSTANCE_OPERATIONS


async def test_call_runs_an_operation_on_the_hosted_instance() -> None:
    """The generic call reaches the LocalInstance: discover, then its participants."""
    actor = DictInstanceActor("shard", 0)
    assert await actor.instance_id() == A.instance_id
    assert await actor.call("state") == "undiscovered"
    await actor.call("discover")
    assert await actor.call("participant_names") == ("agent", "policy", "tools")


@pytest.mark.parametrize("name", ["aclose", "adapter", "__init__", "stall", "instance_id"])
async def test_call_refuses_anything_but_an_instance_operation(name: str) -> None:
    """A name outside INSTANCE_OPERATIONS is a ValueError; nothing reaches the deployment."""
    actor = DictInstanceActor("shard", 0)
    with pytest.raises(ValueError, match="is not an instance operation"):
        await actor.call(name)
    assert actor.deployment.transport.requests == 0


async def test_a_stall_delays_only_the_named_operation_once() -> None:
    """stall(s, op) makes the next ``op`` sleep first; other operations and later calls do not."""
    actor = DictInstanceActor("shard", 0)
    with pytest.raises(ValueError):
        await actor.stall(-1)
    await actor.stall(30.0, "discover")
    assert await asyncio.wait_for(actor.call("state"), 5) == "undiscovered"
    stalled = asyncio.ensure_future(actor.call("discover"))
    await asyncio.sleep(0.05)
    assert not stalled.done()
    stalled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stalled
    assert await actor.cancelled_calls() == 1
    await asyncio.wait_for(actor.call("discover"), 5)  # the stall was used up
    assert await actor.call("state") == "discovered"


def test_the_client_refuses_a_negative_slack_or_no_control_timeout() -> None:
    """slack_seconds < 0 or control_timeout_seconds <= 0 is a ValueError."""
    with pytest.raises(ValueError):
        RayInstance(object(), A.instance_id, slack_seconds=-1)
    with pytest.raises(ValueError):
        RayInstance(object(), A.instance_id, control_timeout_seconds=0)
    client = RayInstance(object(), A.instance_id)
    assert client.instance_id == A.instance_id and repr(client) == f"RayInstance({A.instance_id!r})"


async def test_a_call_past_its_deadline_never_touches_the_handle() -> None:
    """A deadline already behind by more than the slack is refused before anything is sent."""
    pytest.importorskip("ray")

    class Untouchable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the handle was used: {name}")

    client = RayInstance(Untouchable(), A.instance_id, slack_seconds=1.0)
    with pytest.raises(GymCheckpointUnavailable) as info:
        await client.prepare("ck-1", deadline_ts=time.time() - 2)
    assert info.value.operation == "prepare"
    assert "deadline passed before the call was sent" in info.value.failures[A.instance_id]


def test_importing_the_module_does_not_import_ray() -> None:
    """ray is an optional extra: importing envckpt.facade.ray_instance leaves it unimported."""
    code = "import sys, envckpt.facade.ray_instance; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------- a local Ray cluster


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """One quiet local Ray cluster (no dashboard, loopback) whose workers import helpers."""
    with local_ray("envckpt-tests-ray-instance") as ray:
        yield ray


async def hosted(ray: Any, **options: Any) -> RayInstance:
    """A client of a new DictInstanceActor, once the actor's process is up."""
    actor = ray.remote(DictInstanceActor).options(max_restarts=0).remote("shard", 0)
    assert await actor.instance_id.remote() == A.instance_id
    return RayInstance(actor, A.instance_id, **options)


async def wait_for_cancelled_calls(client: RayInstance, count: int) -> None:
    give_up = time.monotonic() + 20
    while await client.cancelled_calls() != count:
        assert time.monotonic() < give_up, "the actor never saw the call cancelled"
        await asyncio.sleep(0.02)


@pytest.mark.ray
async def test_a_snapshot_runs_through_the_actor(ray_cluster: Any, tmp_path: Path) -> None:
    """The facade snapshots a RayInstance; results cross the actor boundary with their types."""
    client = await hosted(ray_cluster)
    await client.handle.start.remote(E1)
    inventory = InMemoryInventory()
    inventory.add(A.instance_id, E1)
    facade = GymEnvironmentCheckpoint([client], inventory, timeouts=TIMEOUTS)
    await facade.check_startup()
    assert await client.participant_names() == ("agent", "policy", "tools")
    assert await client.restart_only_servers() == []
    async with facade.snapshot(tmp_path) as snap:
        assert snap is not None
        assert await client.state() == "committed"
        await snap.check_against_cut(LiveCut())
        assert snap.contents.exported == {A.instance_id: (E1,)}
    assert await client.state() == "resumed"
    assert set((await client.handle.phases.remote()).values()) == {"idle"}
    ray_cluster.kill(client.handle, no_restart=True)


@pytest.mark.ray
async def test_a_reply_of_the_wrong_type_is_a_protocol_violation(ray_cluster: Any) -> None:
    """A host answering an int for state, or a dict for prepare, is refused by type."""
    client = await hosted(ray_cluster)
    await client.handle.reply_wrongly.remote("state", 7)
    with pytest.raises(ProtocolViolation, match="state returned int, expected str"):
        await client.state()
    await client.discover()
    await client.handle.reply_wrongly.remote("prepare", {"prepared": True})
    with pytest.raises(ProtocolViolation, match=A.instance_id):
        await client.prepare("ck-1", deadline_ts=time.time() + 10)
    # The host's own answer of the right type still passes.
    summary = await client.prepare("ck-1", deadline_ts=time.time() + 10)
    assert type(summary) is GymCheckpointPrepareSummary and summary.prepared
    ray_cluster.kill(client.handle, no_restart=True)


@pytest.mark.ray
async def test_no_reply_within_the_control_timeout_cancels_the_call(ray_cluster: Any) -> None:
    """A call without a deadline gives up at the control timeout and cancels the actor's task."""
    client = await hosted(ray_cluster, control_timeout_seconds=0.5)
    await client.stall(30.0, "state")
    started = time.monotonic()
    with pytest.raises(GymCheckpointUnavailable) as info:
        await client.state()
    assert time.monotonic() - started < 10
    assert info.value.operation == "state"
    assert "no reply in 0.5 s; the call was cancelled" in info.value.failures[A.instance_id]
    await wait_for_cancelled_calls(client, 1)
    assert await client.state() == "undiscovered"
    ray_cluster.kill(client.handle, no_restart=True)


@pytest.mark.ray
async def test_a_caller_giving_up_cancels_the_actors_call(ray_cluster: Any) -> None:
    """Cancelling the awaiting task cancels the remote call too, and the actor stays usable."""
    client = await hosted(ray_cluster)
    await client.stall(30.0, "discover")
    waiting = asyncio.ensure_future(client.discover())
    give_up = time.monotonic() + 20
    while "discover" not in await client.handle.started_calls.remote():
        assert time.monotonic() < give_up, "the call never reached the actor"
        await asyncio.sleep(0.02)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await wait_for_cancelled_calls(client, 1)
    assert await client.state() == "undiscovered"
    await client.discover()
    assert await client.state() == "discovered"
    ray_cluster.kill(client.handle, no_restart=True)
