"""Tests for envckpt.facade.resumer: retried resumes that remember what they missed."""

from __future__ import annotations

from pathlib import Path

import pytest

from envckpt.clock import FakeClock
from envckpt.errors import GymCheckpointUnavailable
from envckpt.facade.resumer import Resumer
from envckpt.facade.timeouts import CheckpointTimeouts
from envckpt.gym.instance import GymCheckpointInstance

from helpers.facade_world import E1, E2, A, B, FacadeWorld, LiveCut, take_snapshot

# Far enough never to pass, and within the participants' longest lease (1 h) of the
# fake clock's start.
FAR = FakeClock().now() + 3000


def resumer(world: FacadeWorld, attempts: int = 3) -> Resumer:
    return Resumer(
        world.fan_out,
        clock=world.clock,
        timeouts=CheckpointTimeouts(control_seconds=10, resume_attempts=attempts),
    )


async def prepared(world: FacadeWorld, checkpoint_id: str) -> None:
    """Discover and prepare every instance under ``checkpoint_id`` (a checkpoint is open)."""
    await world.fan_out.require("discover", lambda i: i.discover())
    await world.fan_out.require("prepare", lambda i: i.prepare(checkpoint_id, deadline_ts=FAR))


async def failing_resumes(
    instance: GymCheckpointInstance, server: str, *, times: int, attempts: int
) -> tuple[FacadeWorld, Resumer]:
    """A world with ``ck-1`` open everywhere whose ``server`` on ``instance`` is unreachable
    for its next ``times`` resumes (-1: all), and a resumer trying ``attempts`` times."""
    world = FacadeWorld()
    await prepared(world, "ck-1")
    world.deployments[instance].faults.add(
        "unreachable", server=server, route="resume", times=times
    )
    return world, resumer(world, attempts=attempts)


async def test_resume_reopens_every_instance_with_an_open_checkpoint() -> None:
    """Every prepared instance is resumed; its participants are idle again."""
    world = FacadeWorld()
    await world.start(A, E1)
    await prepared(world, "ck-1")
    assert not world.all_idle()
    await resumer(world).resume("ck-1")
    assert world.all_idle()
    assert {await i.state() for i in world.instances.values()} == {"resumed"}


async def test_resume_skips_instances_whose_state_does_not_allow_it() -> None:
    """A discovered instance (nothing open) is not sent a resume at all."""
    world = FacadeWorld()
    await world.fan_out.require("discover", lambda i: i.discover())
    before = world.requests()
    await resumer(world).resume("ck-1")
    assert world.requests() == before
    assert {await i.state() for i in world.instances.values()} == {"discovered"}


async def test_a_failed_resume_is_retried() -> None:
    """A resume that fails once succeeds on the next round; nothing is left over."""
    world, resume = await failing_resumes(B, "agent", times=1, attempts=3)
    await resume.resume("ck-1")
    assert world.all_idle()
    assert resume.unresumed == {}
    assert world.deployments[B].faults.fired == [("unreachable", "agent", "resume")]


async def test_resume_failing_every_retry_is_remembered_and_raised() -> None:
    """After every attempt failed, the instance and its checkpoint id are remembered."""
    world, resume = await failing_resumes(B, "agent", times=-1, attempts=2)
    with pytest.raises(GymCheckpointUnavailable) as info:
        await resume.resume("ck-1")
    assert info.value.operation == "resume"
    assert set(info.value.failures) == {B.instance_id}
    assert resume.unresumed == {B.instance_id: "ck-1"}
    assert len(world.deployments[B].faults.fired) == 2
    # A resumed at once and was not called again; B still holds the checkpoint.
    assert await world.instances[A.instance_id].state() == "resumed"
    assert await world.instances[B.instance_id].state() == "prepared"
    assert world.phases()[B.instance_id]["agent"] == "prepared"


async def test_zero_resume_attempts_still_tries_once() -> None:
    """resume_attempts below one means one attempt, never none."""
    world, resume = await failing_resumes(A, "tools", times=1, attempts=0)
    with pytest.raises(GymCheckpointUnavailable):
        await resume.resume("ck-1")
    assert world.deployments[A].faults.fired == [("unreachable", "tools", "resume")]
    assert resume.unresumed == {A.instance_id: "ck-1"}


async def test_leftovers_are_resumed_with_the_checkpoint_id_they_hold() -> None:
    """resume_leftovers reopens only what an earlier resume missed, under its own id."""
    world, resume = await failing_resumes(B, "agent", times=2, attempts=2)
    with pytest.raises(GymCheckpointUnavailable):
        await resume.resume("ck-1")
    # A is prepared again under a new id: not a leftover, so it must stay open.
    await world.instances[A.instance_id].prepare("ck-2", deadline_ts=FAR)
    await resume.resume_leftovers()
    assert resume.unresumed == {}
    assert await world.instances[B.instance_id].state() == "resumed"
    assert set(world.phases()[B.instance_id].values()) == {"idle"}
    assert await world.instances[A.instance_id].state() == "prepared"
    # A later resume under the new id reaches A (B has nothing left to resume).
    await resume.resume("ck-2")
    assert world.all_idle()


async def test_a_leftover_resumed_elsewhere_is_forgotten() -> None:
    """A leftover whose adapter was resumed by another call since is dropped: a later
    abort of a new checkpoint sends that new id, not the stale one, and closes it."""
    world, resume = await failing_resumes(B, "agent", times=2, attempts=2)
    with pytest.raises(GymCheckpointUnavailable):
        await resume.resume("ck-1")
    b = world.instances[B.instance_id]
    # B is prepared and resumed directly (its participants' leases ran out meanwhile:
    # here, the resume under the old id closes ck-1), outside the resumer.
    await b.resume("ck-1", deadline_ts=FAR)
    assert await b.state() == "resumed"
    await resume.resume_leftovers()
    assert resume.unresumed == {}
    await prepared(world, "ck-2")
    await resume.resume("ck-2")
    assert world.all_idle()
    assert resume.unresumed == {}


async def test_leftovers_with_nothing_left_send_nothing() -> None:
    """Without leftovers, resume_leftovers sends no request."""
    world = FacadeWorld()
    await prepared(world, "ck-1")
    before = world.requests()
    await resumer(world).resume_leftovers()
    assert world.requests() == before
    assert not world.all_idle()


async def test_a_leftover_still_unreachable_stays_remembered() -> None:
    """A leftover whose resume fails again keeps its original checkpoint id."""
    _, resume = await failing_resumes(B, "agent", times=-1, attempts=1)
    with pytest.raises(GymCheckpointUnavailable):
        await resume.resume("ck-1")
    with pytest.raises(GymCheckpointUnavailable):
        await resume.resume_leftovers()
    assert resume.unresumed == {B.instance_id: "ck-1"}


async def test_the_next_snapshot_resumes_the_leftover_first(tmp_path: Path) -> None:
    """A snapshot whose resume failed raises; the next one resumes the leftover, then runs."""
    world = FacadeWorld()
    await world.start(A, E1)
    await world.start(B, E2)
    attempts = world.timeouts.resume_attempts
    world.deployments[B].faults.add("unreachable", server="agent", route="resume", times=attempts)
    with pytest.raises(GymCheckpointUnavailable):
        async with world.facade.snapshot(tmp_path / "one") as snap:
            assert snap is not None
            await snap.check_against_cut(LiveCut())
    assert world.phases()[B.instance_id]["agent"] == "committed"
    await take_snapshot(world, tmp_path / "two")
    assert world.all_idle()
    assert (tmp_path / "two" / "gym_checkpoint.json").exists()
