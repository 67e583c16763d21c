"""Tests for envckpt.facade.snapshot: the paused backend's snapshot the trainer holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import GymCheckpointUnavailable, IllegalTransition
from envckpt.facade.snapshot import SESSION, GymEnvironmentSnapshot, SnapshotTimings
from envckpt.interfaces import EnvironmentSnapshot
from envckpt.inventory import InMemoryInventory, SnapshotContents
from envckpt.machines.tables import SessionState

from helpers.facade_world import E1, E2, E3, A, B, FacadeWorld, LiveCut

R4 = EnvironmentEpisode("r4", 0)
TIMINGS = SnapshotTimings(
    retire_seconds=0.25, prepare_seconds=1.5, commit_seconds=2.0, manifest_bytes=4096
)
CONTENTS = SnapshotContents(
    checkpoint_id="ck-1",
    exported={A.instance_id: (E1, E3), B.instance_id: (E2,)},
    # The same rollout restarting on two instances is one restarted rollout.
    restarts={A.instance_id: (R4,), B.instance_id: (R4,)},
    staging_keys={A.instance_id: ("r1/t0", "r1/t1"), B.instance_id: ("r1/t1", "r2-a1/t0")},
)


def agreeing_inventory() -> InMemoryInventory:
    inventory = InMemoryInventory()
    for instance, episodes in CONTENTS.exported.items():
        for episode in episodes:
            inventory.add(instance, episode)
    return inventory


def snapshot_in(
    state: SessionState, inventory: InMemoryInventory | None = None
) -> GymEnvironmentSnapshot:
    """A snapshot whose session went through the real triggers up to ``state``."""
    session = SESSION.new("ck-1")
    path = {
        SessionState.OPENED: (),
        SessionState.PREPARED: ("prepare",),
        SessionState.COMMITTED: ("prepare", "commit"),
        SessionState.RESUMED: ("prepare", "commit", "resume"),
        SessionState.ABORTED: ("prepare", "commit", "abort"),
    }[state]
    for trigger in path:
        SESSION.fire(session, trigger, checkpoint_id="ck-1")
    return GymEnvironmentSnapshot(
        contents=CONTENTS,
        inventory=inventory if inventory is not None else agreeing_inventory(),
        session=session,
        timings=TIMINGS,
        unowned_live_episodes=2,
    )


def test_it_is_an_environment_snapshot_with_its_counts() -> None:
    """The snapshot satisfies the protocol and counts exports and restarted rollouts."""
    snapshot = snapshot_in(SessionState.COMMITTED)
    assert isinstance(snapshot, EnvironmentSnapshot)
    assert snapshot.checkpoint_id == "ck-1"
    assert snapshot.state is SessionState.COMMITTED
    assert snapshot.exported_episodes == 3
    assert snapshot.restarted_rollouts == 1


def test_metrics_report_every_figure() -> None:
    """metrics() carries the pause, the phase timings and the snapshot's counts."""
    assert snapshot_in(SessionState.COMMITTED).metrics(3) == {
        "env_paused_seconds": 3.0,
        "env_retire_seconds": 0.25,
        "env_prepare_seconds": 1.5,
        "env_commit_seconds": 2.0,
        "env_manifest_bytes": 4096.0,
        "env_instances": 2.0,
        "env_exported_episodes": 3.0,
        "env_restarted_rollouts": 1.0,
        "env_unowned_live_episodes": 2.0,
        "env_staging_keys": 3.0,
    }


async def test_check_against_cut_verifies_once() -> None:
    """A passing check moves the session to verified; a second check is refused unchecked."""
    inventory = agreeing_inventory()
    snapshot = snapshot_in(SessionState.COMMITTED, inventory)
    await snapshot.check_against_cut(LiveCut())
    assert snapshot.state is SessionState.VERIFIED
    inventory.add(B.instance_id, EnvironmentEpisode("late", 0))  # would now disagree
    with pytest.raises(IllegalTransition) as info:
        await snapshot.check_against_cut(LiveCut())
    assert (info.value.state, info.value.trigger) == ("verified", "check_cut")
    assert snapshot.state is SessionState.VERIFIED


@pytest.mark.parametrize(
    "state",
    [SessionState.OPENED, SessionState.PREPARED, SessionState.RESUMED, SessionState.ABORTED],
)
async def test_check_outside_a_committed_snapshot_is_refused_first(state: SessionState) -> None:
    """Before commit or after the context, the check is refused before the cut is looked at."""
    snapshot = snapshot_in(state)
    expired = LiveCut()
    expired.close()
    with pytest.raises(IllegalTransition):
        await snapshot.check_against_cut(expired)
    assert snapshot.state is state


async def test_an_expired_cut_is_refused_and_the_check_may_be_retried() -> None:
    """A cut that ended is refused; the session stays committed, so a live cut still passes."""
    snapshot = snapshot_in(SessionState.COMMITTED)
    expired = LiveCut()
    expired.close()
    with pytest.raises(RuntimeError, match="cut expired"):
        await snapshot.check_against_cut(expired)
    assert snapshot.state is SessionState.COMMITTED
    await snapshot.check_against_cut(LiveCut())
    assert snapshot.state is SessionState.VERIFIED


async def test_a_ledger_disagreement_raises_and_leaves_the_session_committed() -> None:
    """The inventory's refusal propagates; the snapshot is not marked verified."""
    inventory = agreeing_inventory()
    inventory.add(B.instance_id, EnvironmentEpisode("unseen", 0))
    snapshot = snapshot_in(SessionState.COMMITTED, inventory)
    with pytest.raises(GymCheckpointUnavailable):
        await snapshot.check_against_cut(LiveCut())
    assert snapshot.state is SessionState.COMMITTED


async def test_the_facades_snapshot_is_checked_against_the_ledger(tmp_path: Path) -> None:
    """An inventory episode the facade's snapshot did not export is caught under the cut."""
    world = FacadeWorld()
    await world.start(A, E1)
    async with world.facade.snapshot(tmp_path) as snap:
        assert snap is not None
        world.inventory.add(B.instance_id, E3)  # a dispatch the snapshot never saw
        with pytest.raises(GymCheckpointUnavailable):
            await snap.check_against_cut(LiveCut())
        world.inventory.finish(B.instance_id, E3)


async def test_the_facades_snapshot_is_checked_only_once(tmp_path: Path) -> None:
    """The session machine refuses a second check of the facade's snapshot."""
    world = FacadeWorld()
    async with world.facade.snapshot(tmp_path) as snap:
        assert snap is not None
        await snap.check_against_cut(LiveCut())
        with pytest.raises(IllegalTransition):
            await snap.check_against_cut(LiveCut())
    assert snap.state is SessionState.RESUMED
