"""Tests for envckpt.facade.timeouts: budgets in seconds, made absolute deadlines at each step."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from envckpt.errors import SnapshotNotReady
from envckpt.facade.timeouts import CheckpointTimeouts
from envckpt.participant.core import DEFAULT_LEASE_GRACE_SECONDS

from helpers.facade_world import E1, A, FacadeWorld

GRACE = DEFAULT_LEASE_GRACE_SECONDS


def test_timeouts_are_a_frozen_value() -> None:
    """Budgets compare by value and cannot be changed in place."""
    timeouts = CheckpointTimeouts(prepare_seconds=5)
    assert timeouts == CheckpointTimeouts(prepare_seconds=5.0)
    assert timeouts != CheckpointTimeouts()
    with pytest.raises(dataclasses.FrozenInstanceError):
        timeouts.prepare_seconds = 1  # type: ignore[misc]
    assert not hasattr(timeouts, "__dict__")


def test_the_defaults_renew_leases_well_within_a_commit() -> None:
    """By default every budget is positive and a lease is renewed before a commit's budget ends."""
    defaults = CheckpointTimeouts()
    budgets = [getattr(defaults, f.name) for f in dataclasses.fields(defaults)]
    assert all(budget > 0 for budget in budgets)
    assert defaults.renew_interval_seconds < defaults.commit_seconds
    assert defaults.resume_attempts >= 1


def leases(world: FacadeWorld) -> set[float | None]:
    return {core.lease_expires_at for core in world.deployments[A].cores.values()}


@pytest.mark.parametrize(("prepare", "commit"), [(7.0, 50.0), (40.0, 3.0)])
async def test_prepare_and_commit_deadlines_are_now_plus_their_budget(
    tmp_path: Path, prepare: float, commit: float
) -> None:
    """While the snapshot is held, each lease runs to now + the larger budget + the grace."""
    timeouts = CheckpointTimeouts(
        prepare_seconds=prepare, commit_seconds=commit, renew_interval_seconds=1e6
    )
    world = FacadeWorld(timeouts=timeouts)
    await world.start(A, E1)
    started = world.clock.now()
    async with world.facade.snapshot(tmp_path) as snap:
        assert snap is not None
        assert leases(world) == {started + max(prepare, commit) + GRACE}


async def test_leases_are_renewed_every_interval_with_a_commit_budget(tmp_path: Path) -> None:
    """After renew_interval_seconds the renewer pushes each lease to now + commit budget."""
    timeouts = CheckpointTimeouts(prepare_seconds=5, commit_seconds=20, renew_interval_seconds=30)
    world = FacadeWorld(timeouts=timeouts)
    await world.start(A, E1)
    started = world.clock.now()
    async with world.facade.snapshot(tmp_path) as snap:
        assert snap is not None
        assert leases(world) == {started + 20 + GRACE}
        world.clock.advance(30)
        renewed = {started + 30 + 20 + GRACE}
        for _ in range(200):  # the participants of a deployment are renewed one after another
            if leases(world) == renewed:
                break
            await asyncio.sleep(0)
        assert leases(world) == renewed


async def test_a_blocked_prepare_waits_exactly_its_budget(tmp_path: Path) -> None:
    """A rollout that never reaches a boundary fails the snapshot when prepare_seconds ran out."""
    world = FacadeWorld(timeouts=CheckpointTimeouts(prepare_seconds=12.5))
    await world.start(A, E1)
    started = world.clock.now()
    async with world.deployments[A].cores["agent"].admit(E1):
        with pytest.raises(SnapshotNotReady, match=r"in 12\.5 s"):
            async with world.facade.snapshot(tmp_path):
                pytest.fail("the snapshot must not be yielded")
    # The fake clock jumps straight to the deadline a waiter gives up at.
    assert world.clock.now() == started + 12.5
