"""Tests for envckpt.facade.restore: refusals before any restore call, then all or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envckpt.clock import FakeClock
from envckpt.errors import CorruptCheckpoint, IllegalTransition, IncompatibleCheckpoint
from envckpt.facade.manifest import MANIFEST_NAME, read_manifest
from envckpt.facade.restore import abandon_everywhere, check_restorable, restore_everywhere
from envckpt.gym.instance import GymCheckpointInstance

from helpers.dict_deployment import Deployment
from helpers.facade_world import E1, E2, A, B, FacadeWorld, restarted_after_snapshot

# Far enough never to pass, and within the participants' longest lease (1 h) of the
# fake clock's start.
FAR = FakeClock().now() + 3000
RESTORE_ID = "restore-1"


def nothing_installed(world: FacadeWorld) -> bool:
    return all(
        not hooks.installed for d in world.deployments.values() for hooks in d.hooks.values()
    )


# -------------------------------------------------------------- check_restorable


async def test_a_fresh_matching_deployment_is_restorable(tmp_path: Path) -> None:
    """The manifest comes back once topology, state and participants all fit."""
    after = await restarted_after_snapshot(tmp_path)
    manifest = await check_restorable(after.fan_out, tmp_path)
    assert manifest == read_manifest(tmp_path)
    assert manifest.instances[A.instance_id].episodes == (E1,)
    assert nothing_installed(after) and after.all_idle()


@pytest.mark.parametrize("live", [(A,), (A, B, GymCheckpointInstance("shard", 2))])
async def test_another_topology_is_refused_before_any_call(
    tmp_path: Path, live: tuple[GymCheckpointInstance, ...]
) -> None:
    """Fewer or more live instances than saved: IncompatibleCheckpoint, no request sent."""
    await restarted_after_snapshot(tmp_path)
    other = FacadeWorld(deployments={i: Deployment() for i in live})
    with pytest.raises(IncompatibleCheckpoint, match="holds instances"):
        await check_restorable(other.fan_out, tmp_path)
    assert other.requests() == 0


async def test_another_topology_refuses_the_facades_restore(tmp_path: Path) -> None:
    """The facade's restored context refuses another instance set before its body."""
    await restarted_after_snapshot(tmp_path)
    other = FacadeWorld(deployments={A: Deployment()})
    with pytest.raises(IncompatibleCheckpoint):
        async with other.facade.restored(tmp_path):
            pytest.fail("must not be yielded")


@pytest.mark.parametrize("damage", ["missing", "tampered"])
async def test_a_bad_manifest_is_refused_before_any_call(tmp_path: Path, damage: str) -> None:
    """A missing or damaged gym_checkpoint.json is CorruptCheckpoint, no request sent."""
    after = await restarted_after_snapshot(tmp_path)
    path = tmp_path / MANIFEST_NAME
    if damage == "missing":
        path.unlink()
    else:
        path.write_text(path.read_text().replace('"r1"', '"r9"'))
    with pytest.raises(CorruptCheckpoint):
        await check_restorable(after.fan_out, tmp_path)
    assert after.requests() == 0


async def test_a_used_deployment_is_refused_before_any_restore(tmp_path: Path) -> None:
    """An instance past discovery (it took a snapshot) refuses: IllegalTransition, nothing sent."""
    after = await restarted_after_snapshot(tmp_path)
    used = after.instances[B.instance_id]
    await used.discover()
    await used.prepare("ck-used", deadline_ts=FAR)
    await used.resume("ck-used", deadline_ts=FAR)
    with pytest.raises(IllegalTransition) as info:
        await check_restorable(after.fan_out, tmp_path)
    error = info.value
    assert (error.machine, error.instance, error.state, error.trigger) == (
        "instance_lifecycle",
        B.instance_id,
        "resumed",
        "restore",
    )
    # Refused before discovery and before any restore.
    assert await after.instances[A.instance_id].state() == "undiscovered"
    assert nothing_installed(after) and after.all_idle()


async def test_missing_participants_are_refused_before_any_restore(tmp_path: Path) -> None:
    """A live instance lacking a participant that saved state: IncompatibleCheckpoint."""
    await restarted_after_snapshot(tmp_path)
    without_tools = Deployment(
        kinds=(("policy", "model", "export_restore"), ("agent", "agent", "export_restore"))
    )
    after = FacadeWorld(deployments={A: Deployment(), B: without_tools})
    with pytest.raises(IncompatibleCheckpoint, match=r"shard/replica-1 lacks .*\['tools'\]"):
        await check_restorable(after.fan_out, tmp_path)
    assert nothing_installed(after) and after.all_idle()


# ------------------------------------------------------- restore and abandon


async def test_restore_everywhere_restores_every_instance(tmp_path: Path) -> None:
    """No errors: every participant holds the saved rollouts as their next attempts."""
    after = await restarted_after_snapshot(tmp_path)
    manifest = await check_restorable(after.fan_out, tmp_path)
    errors = await restore_everywhere(
        after.fan_out, RESTORE_ID, tmp_path, manifest, deadline_ts=FAR
    )
    assert errors == {}
    assert set(after.deployments[A].hooks["agent"].state) == {E1.next_attempt()}
    assert set(after.deployments[B].hooks["tools"].state) == {E2.next_attempt()}
    assert {phase for p in after.phases().values() for phase in p.values()} == {"restored"}


async def test_restore_everywhere_returns_each_failure_by_instance(tmp_path: Path) -> None:
    """One instance failing leaves the others restored and reports only its own error."""
    after = await restarted_after_snapshot(tmp_path)
    manifest = await check_restorable(after.fan_out, tmp_path)
    after.deployments[B].faults.add("error", server="tools", route="restore")
    errors = await restore_everywhere(
        after.fan_out, RESTORE_ID, tmp_path, manifest, deadline_ts=FAR
    )
    assert set(errors) == {B.instance_id}
    assert await after.instances[A.instance_id].state() == "restored"
    assert await after.instances[B.instance_id].state() == "restore_failed"


async def test_abandon_after_a_partial_failure_drops_every_restore(tmp_path: Path) -> None:
    """Both the restored and the failed instance retire the next attempts and resume."""
    after = await restarted_after_snapshot(tmp_path)
    manifest = await check_restorable(after.fan_out, tmp_path)
    after.deployments[B].faults.add("error", server="tools", route="restore")
    await restore_everywhere(after.fan_out, RESTORE_ID, tmp_path, manifest, deadline_ts=FAR)
    await abandon_everywhere(after.fan_out, RESTORE_ID, manifest, deadline_ts=FAR)
    assert after.all_idle()
    assert {await i.state() for i in after.instances.values()} == {"resumed"}
    for instance, episode in ((A, E1), (B, E2)):
        deployment = after.deployments[instance]
        assert all(hooks.state == {} for hooks in deployment.hooks.values())
        # The restored attempt is fenced: it can never run here again.
        assert deployment.cores["agent"].fence.mark(episode.rollout_id) == episode.attempt + 1


async def test_abandon_leaves_instances_without_a_restore_alone(tmp_path: Path) -> None:
    """An instance that holds no restore (only discovered) gets no retire or resume."""
    after = await restarted_after_snapshot(tmp_path)
    manifest = await check_restorable(after.fan_out, tmp_path)
    before = after.requests()
    await abandon_everywhere(after.fan_out, RESTORE_ID, manifest, deadline_ts=FAR)
    assert after.requests() == before
    assert {await i.state() for i in after.instances.values()} == {"discovered"}


async def test_abandon_never_raises_and_logs_what_it_could_not_drop(tmp_path: Path) -> None:
    """An unreachable instance is logged; the other is still abandoned."""
    after = await restarted_after_snapshot(tmp_path)
    manifest = await check_restorable(after.fan_out, tmp_path)
    await restore_everywhere(after.fan_out, RESTORE_ID, tmp_path, manifest, deadline_ts=FAR)
    after.deployments[B].faults.add("unreachable", times=-1)
    with capture_logs() as logs:
        await abandon_everywhere(after.fan_out, RESTORE_ID, manifest, deadline_ts=FAR)
    [warned] = [e for e in logs if e["event"].startswith("dropping a restore failed")]
    assert warned["log_level"] == "warning"
    assert (warned["instance_id"], warned["checkpoint_id"]) == (B.instance_id, RESTORE_ID)
    assert set(after.phases()[A.instance_id].values()) == {"idle"}
    assert after.deployments[A].hooks["agent"].state == {}
