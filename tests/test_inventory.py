"""Tests for envckpt.inventory: the in-memory inventory and the three checks under the cut."""

from __future__ import annotations

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import GymCheckpointUnavailable, ProtocolViolation
from envckpt.inventory import InMemoryInventory, SnapshotContents, verify_contents

from helpers.facade_world import LiveCut

A, B = "shard/replica-0", "shard/replica-1"
E1, E2, E3 = EnvironmentEpisode("r1", 0), EnvironmentEpisode("r2", 1), EnvironmentEpisode("r3", 0)


def contents(
    exported: dict[str, tuple[EnvironmentEpisode, ...]],
    restarts: dict[str, tuple[EnvironmentEpisode, ...]] | None = None,
    staging_keys: dict[str, tuple[str, ...]] | None = None,
) -> SnapshotContents:
    return SnapshotContents(
        checkpoint_id="ck-1",
        exported=exported,
        restarts=restarts or {},
        staging_keys=staging_keys or {},
    )


def test_inventory_lists_live_episodes_sorted_per_instance() -> None:
    """add/finish keep each instance's live set; an unknown instance has none."""
    inventory = InMemoryInventory()
    inventory.add(A, E3)
    inventory.add(A, E1)
    inventory.add(B, E2)
    inventory.finish(A, E3)
    inventory.finish(B, E1)  # not there: nothing happens
    assert inventory.inventory(A) == (E1,)
    assert inventory.inventory(B) == (E2,)
    assert inventory.inventory("other/replica-0") == ()


def test_live_and_dropped_episodes_come_in_episode_order() -> None:
    """Both lists are sorted by rollout id, then attempt, whatever order they were added in."""
    inventory = InMemoryInventory()
    episodes = [
        EnvironmentEpisode(f"r-{index:03d}", attempt) for index in range(40) for attempt in (1, 0)
    ]
    for episode in reversed(episodes[::3] + episodes[1::3] + episodes[2::3]):
        inventory.add(A, episode)
        inventory.drop(B, episode)
    assert inventory.inventory(A) == tuple(sorted(episodes))
    assert inventory.dropped_attempts(B) == tuple(sorted(episodes))


def test_drop_moves_an_episode_to_dropped_until_retired() -> None:
    """A dropped attempt leaves the inventory and is reported until the instance retires it."""
    inventory = InMemoryInventory()
    inventory.add(A, E1)
    inventory.add(A, E3)
    inventory.drop(A, E1)
    inventory.drop(A, E3)
    assert inventory.inventory(A) == ()
    assert inventory.dropped_attempts(A) == (E1, E3)
    inventory.retired(A, (E1,))
    assert inventory.dropped_attempts(A) == (E3,)
    inventory.retired(B, (E3,))  # another instance's retire changes nothing here
    assert inventory.dropped_attempts(A) == (E3,)


def test_contents_union_their_staging_keys() -> None:
    """all_staging_keys is the set of every instance's keys."""
    snapshot = contents({}, staging_keys={A: ("r1/t0", "r1/t1"), B: ("r1/t1", "r2-a1/t0")})
    assert snapshot.all_staging_keys() == {"r1/t0", "r1/t1", "r2-a1/t0"}


def test_agreeing_contents_pass_every_check() -> None:
    """Exported or restarted live episodes, with every staging key present, pass."""
    verify_contents(
        contents({A: (E1,), B: ()}, restarts={B: (E2,)}, staging_keys={A: ("r1/t0",)}),
        live={A: {E1}, B: {E2}},
        staging_rows={"r1/t0", "unrelated"},
    )


def test_an_exported_episode_no_longer_live_is_a_violation() -> None:
    """Check 1: the snapshot exported an attempt the ledger no longer holds."""
    with pytest.raises(ProtocolViolation, match="no longer a live attempt"):
        verify_contents(contents({A: (E1, E3)}), live={A: {E1}}, staging_rows=None)


def test_an_episode_exported_by_the_wrong_instance_is_a_violation() -> None:
    """Check 1: the ledger places the attempt on another instance."""
    with pytest.raises(ProtocolViolation, match=f"places on {B}"):
        verify_contents(contents({A: (E1,)}), live={B: {E1}}, staging_rows=None)


def test_a_live_episode_neither_exported_nor_restarted_is_retryable() -> None:
    """Check 2: a reply may still be on the wire; the error names instance and episodes."""
    with pytest.raises(GymCheckpointUnavailable) as info:
        verify_contents(contents({A: (E1,)}), live={A: {E1, E2, E3}}, staging_rows=None)
    assert info.value.operation == "check_against_cut"
    assert info.value.failures == {A: "r2-a1, r3"}


def test_a_missing_staging_row_is_a_violation() -> None:
    """Check 3: a kept staging key absent from the data plane is refused."""
    snapshot = contents({A: (E1,)}, staging_keys={A: ("r1/t0", "r1/t1")})
    with pytest.raises(ProtocolViolation, match=r"\['r1/t1'\]"):
        verify_contents(snapshot, live={A: {E1}}, staging_rows={"r1/t0"})
    # Without a data plane to check, the same contents pass.
    verify_contents(snapshot, live={A: {E1}}, staging_rows=None)


async def test_verify_against_cut_uses_the_live_state_and_the_data_plane() -> None:
    """The in-memory inventory runs the three checks against its own live set and rows."""
    inventory = InMemoryInventory(staging_rows={"r1/t0"})
    inventory.add(A, E1)
    await inventory.verify_against_cut(
        LiveCut(), contents({A: (E1,)}, staging_keys={A: ("r1/t0",)})
    )
    inventory.add(B, E2)
    with pytest.raises(GymCheckpointUnavailable):
        await inventory.verify_against_cut(
            LiveCut(), contents({A: (E1,)}, staging_keys={A: ("r1/t0",)})
        )
    inventory.finish(B, E2)
    with pytest.raises(ProtocolViolation):
        await inventory.verify_against_cut(
            LiveCut(), contents({A: (E1,)}, staging_keys={A: ("r1/t9",)})
        )


async def test_verify_against_an_expired_cut_is_refused_first() -> None:
    """An expired cut is refused before any check (even for agreeing contents)."""
    inventory = InMemoryInventory()
    inventory.add(A, E1)
    cut = LiveCut()
    cut.close()
    with pytest.raises(RuntimeError, match="cut expired"):
        await inventory.verify_against_cut(cut, contents({A: (E1,)}))
