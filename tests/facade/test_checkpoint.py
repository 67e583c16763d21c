"""Tests for envckpt.facade.checkpoint: snapshots and restores over N instances."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from envckpt.clock import FakeClock
from envckpt.errors import (
    CorruptCheckpoint,
    GymCheckpointUnavailable,
    IllegalTransition,
    ProtocolViolation,
    SnapshotNotReady,
)
from envckpt.facade.checkpoint import GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.facade.manifest import MANIFEST_NAME
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.interfaces import EnvironmentCheckpoint

from helpers.dict_deployment import Deployment
from helpers.facade_world import (
    E1,
    E2,
    E3,
    A,
    B,
    FacadeWorld,
    LiveCut,
    restarted_after_snapshot,
    take_snapshot,
)


def test_facade_satisfies_the_interface() -> None:
    """GymEnvironmentCheckpoint is an EnvironmentCheckpoint and holds rollout state."""
    world = FacadeWorld()
    assert isinstance(world.facade, EnvironmentCheckpoint)
    assert world.facade.holds_rollout_state


async def test_snapshot_commits_every_instance_and_resumes(tmp_path: Path) -> None:
    """A snapshot writes gym_checkpoint.json, exports the inventory and resumes all."""
    world = FacadeWorld()
    await world.start(A, E1)
    await world.start(B, E2)
    async with world.facade.snapshot(tmp_path) as snap:
        assert snap is not None
        assert all(
            core.phase == "committed"
            for d in world.deployments.values()
            for core in d.cores.values()
        )
        await snap.check_against_cut(LiveCut())
        metrics = snap.metrics(1.5)
    assert metrics["env_exported_episodes"] == 2.0
    assert metrics["env_paused_seconds"] == 1.5
    document = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert set(document["instances"]) == {A.instance_id, B.instance_id}
    assert document["instances"][A.instance_id]["episodes"] == [E1.to_wire()]
    assert world.all_idle()


async def test_not_ready_aborts_everything_and_is_retryable(tmp_path: Path) -> None:
    """A blocked instance makes the snapshot raise SnapshotNotReady after resuming all."""
    world = FacadeWorld()
    await world.start(A, E1)
    agent = world.deployments[A].cores["agent"]
    async with agent.admit(E1):
        with pytest.raises(SnapshotNotReady) as info:
            async with world.facade.snapshot(tmp_path):
                pytest.fail("the snapshot must not be yielded")
    assert info.value.blockers == {A.instance_id: {"agent": ("r1",)}}
    assert world.facade.is_unavailable(info.value)
    assert not (tmp_path / MANIFEST_NAME).exists()
    assert world.all_idle()
    await take_snapshot(world, tmp_path / "again")


async def test_commit_failure_aborts_and_leaves_nothing_restorable(tmp_path: Path) -> None:
    """A participant failing its commit aborts the snapshot; no manifest is written."""
    world = FacadeWorld()
    await world.start(A, E1)
    world.deployments[B].faults.add("crash_before_publish", server="agent")
    with pytest.raises(GymCheckpointUnavailable):
        async with world.facade.snapshot(tmp_path):
            pytest.fail("the snapshot must not be yielded")
    assert not (tmp_path / MANIFEST_NAME).exists()
    with pytest.raises(CorruptCheckpoint):
        async with world.restarted().facade.restored(tmp_path):
            pass


async def test_error_inside_the_context_aborts(tmp_path: Path) -> None:
    """An exception in the trainer's body resumes everyone and propagates."""
    world = FacadeWorld()
    await world.start(A, E1)
    with pytest.raises(KeyError):
        async with world.facade.snapshot(tmp_path):
            raise KeyError("trainer failed")
    assert world.all_idle()


async def test_dropped_attempts_are_retired_before_prepare(tmp_path: Path) -> None:
    """Attempts the inventory dropped are retired everywhere first."""
    world = FacadeWorld()
    await world.start(A, E1)
    await world.start(A, E3)
    world.inventory.drop(A.instance_id, E3)
    await take_snapshot(world, tmp_path)
    assert world.inventory.dropped_attempts(A.instance_id) == ()
    for core in world.deployments[A].cores.values():
        assert core.fence.mark("r3") == 0
    document = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert document["instances"][A.instance_id]["episodes"] == [E1.to_wire()]


async def test_concurrent_snapshots_are_refused(tmp_path: Path) -> None:
    """A second snapshot while one is open is a caller bug."""
    world = FacadeWorld()
    async with world.facade.snapshot(tmp_path / "one"):
        with pytest.raises(IllegalTransition):
            async with world.facade.snapshot(tmp_path / "two"):
                pass


async def test_restore_continues_every_saved_rollout(tmp_path: Path) -> None:
    """A restarted job restores each instance's rollouts as attempt N+1."""
    after = await restarted_after_snapshot(tmp_path)
    async with after.facade.restored(tmp_path) as restored:
        assert restored.continued_attempts == {
            (A.instance_id, "r1", 0),
            (B.instance_id, "r2", 1),
        }
        assert "r1/t1" in restored.staging_keys
    agent_b = after.deployments[B].hooks["agent"]
    assert set(agent_b.state) == {E2.next_attempt()}
    assert after.all_idle()


async def test_restore_is_all_or_nothing_across_instances(tmp_path: Path) -> None:
    """One instance failing its restore drops the restore on every instance."""
    after = await restarted_after_snapshot(tmp_path)
    after.deployments[B].faults.add("error", server="tools", route="restore")
    with pytest.raises(GymCheckpointUnavailable):
        async with after.facade.restored(tmp_path):
            pytest.fail("must not be yielded")
    for deployment in after.deployments.values():
        assert all(core.phase == "idle" for core in deployment.cores.values())
    assert after.deployments[A].cores["agent"].fence.mark("r1") == 1
    assert after.deployments[A].hooks["agent"].state == {}


async def test_error_inside_restored_drops_what_was_restored(tmp_path: Path) -> None:
    """An exception in the restored context retires the replacement attempts."""
    after = await restarted_after_snapshot(tmp_path, (A, E1))
    with pytest.raises(ValueError):
        async with after.facade.restored(tmp_path):
            raise ValueError("ledger refused")
    assert after.deployments[A].hooks["agent"].state == {}
    assert after.deployments[A].cores["agent"].fence.mark("r1") == 1


async def test_corrupt_records_refuse_the_whole_restore(tmp_path: Path) -> None:
    """A flipped byte in one participant's records makes the restore fail, nothing kept."""
    world = FacadeWorld()
    await world.start(A, E1)
    await world.start(B, E2)
    world.deployments[B].faults.add("corrupt_records", server="agent")
    await take_snapshot(world, tmp_path)
    after = world.restarted()
    with pytest.raises(CorruptCheckpoint):
        async with after.facade.restored(tmp_path):
            pass
    assert after.deployments[A].hooks["agent"].state == {}


async def test_restore_from_a_wrong_source_is_refused(tmp_path: Path) -> None:
    """Participant replies must name the snapshot's own checkpoint id."""
    world = FacadeWorld()
    await world.start(A, E1)
    await take_snapshot(world, tmp_path / "one")
    await take_snapshot(world, tmp_path / "two")
    # Splice instance A's participant state of snapshot one into snapshot two.
    import shutil

    target = tmp_path / "two" / "gym-instances"
    shutil.rmtree(target)
    shutil.copytree(tmp_path / "one" / "gym-instances", target)
    with pytest.raises(ProtocolViolation):
        async with world.restarted().facade.restored(tmp_path / "two"):
            pass


def test_two_instances_with_one_id_are_refused() -> None:
    """A facade over two instances that share an id is a ValueError naming the ids."""
    world = FacadeWorld()
    deployment = world.deployments[A]
    twins = [
        LocalInstance(GymCheckpointAdapter(instance=A, coordination=deployment.coordinator))
        for _ in range(2)
    ]
    duplicate = r"duplicate Gym instance ids: \['shard/replica-0', 'shard/replica-0'\]"
    with pytest.raises(ValueError, match=duplicate):
        GymEnvironmentCheckpoint(twins)


def with_restart_only_tools_on_a() -> FacadeWorld:
    """A world whose instance A has a model and restart-only tools (no agent)."""
    clock = FakeClock()
    kinds = (("policy", "model", "export_restore"), ("tools", "resources", "restart_only"))
    return FacadeWorld(
        clock=clock,
        deployments={A: Deployment(clock=clock, kinds=kinds), B: Deployment(clock=clock)},
    )


async def test_check_startup_warns_about_restart_only() -> None:
    """Restart-only participants are reported with a warning, not refused."""
    from structlog.testing import capture_logs

    world = with_restart_only_tools_on_a()
    with capture_logs() as logs:
        await world.facade.check_startup()
    assert any(e.get("servers") == ["tools"] for e in logs)


async def test_check_startup_fails_on_an_undiscoverable_instance_and_warns_nobody() -> None:
    """One instance failing discovery fails startup as unavailable; no restart-only warning."""
    from structlog.testing import capture_logs

    world = with_restart_only_tools_on_a()
    world.deployments[B].faults.add("unreachable", server="agent", route="status")
    with capture_logs() as logs, pytest.raises(GymCheckpointUnavailable) as caught:
        await world.facade.check_startup()
    assert caught.value.operation == "discover" and set(caught.value.failures) == {B.instance_id}
    assert not any("servers" in e for e in logs)


async def test_forget_reaches_the_named_instance(tmp_path: Path) -> None:
    """forget clears marks on the instance it names."""
    world = FacadeWorld()
    await world.start(A, E1)
    world.inventory.drop(A.instance_id, E1)
    await world.facade.check_startup()
    async with world.facade.snapshot(tmp_path):
        pass
    await world.facade.forget({A.instance_id: ["r1"]})
    assert world.deployments[A].cores["agent"].fence.mark("r1") is None


async def test_a_slow_participant_fails_the_snapshot_and_everyone_resumes(tmp_path: Path) -> None:
    """A participant slower than the prepare deadline fails the snapshot; nothing stays open."""
    world = FacadeWorld()
    await world.start(A, E1)
    world.deployments[B].faults.add("slow", server="agent", route="prepare")
    with pytest.raises(GymCheckpointUnavailable) as info:
        async with world.facade.snapshot(tmp_path):
            pytest.fail("the snapshot must not be yielded")
    assert "no reply" in str(info.value)
    for _ in range(50):  # let the late request land, then settle
        await asyncio.sleep(0)
    world.clock.advance(10_000)  # past every lease
    for deployment in world.deployments.values():
        for core in deployment.cores.values():
            assert (await core.status())["phase"] == "idle"
    await take_snapshot(world, tmp_path / "again")
