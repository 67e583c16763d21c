"""Tests for envckpt.participant.restored_attempts: a restore's attempts, a flag byte each."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.restored_attempts import RestoredAttempts
from envckpt.participant.scope_table import ScopeTable

from helpers.examples import examples
from helpers.participant_doubles import ep

episodes = st.builds(ep, st.sampled_from(("a", "b", "c", "d")), st.integers(0, 3))


def restored(scope: list[EnvironmentEpisode], installed: list[int]) -> RestoredAttempts:
    return RestoredAttempts.installed(ScopeTable.of(scope), bytearray(installed))


def test_installed_must_be_one_zero_or_one_per_episode() -> None:
    """A flag vector of the wrong length or with other bytes is a caller's bug: refused."""
    for wrong in ([1], [1, 0, 1], [1, 2]):
        with pytest.raises(ValueError, match="one 0 or 1 per episode"):
            restored([ep("a"), ep("b")], wrong)


def test_latest_is_the_next_attempt_of_the_newest_active_episode() -> None:
    """Installed or not, every scope episode's next attempt counts, until forget."""
    attempts = restored([ep("a", 0), ep("a", 2), ep("b", 1)], [1, 0, 0])
    assert (attempts.latest("a"), attempts.latest("b"), attempts.latest("z")) == (3, 2, None)
    assert list(attempts.latests(["b", "a", "z", "a"])) == [2, 3, None, 3]
    attempts.forget("a")
    assert attempts.latest("a") is None and attempts.latest("b") == 2
    assert not attempts.empty  # a's first next attempt is still unstarted


def test_started_and_dropped_attempts_are_no_longer_unstarted() -> None:
    """A call starts a restored attempt; a commit drops those it leaves out, once each."""
    attempts = restored([ep("a"), ep("b"), ep("c"), ep("d")], [1, 1, 1, 0])
    assert attempts.unstarted == 3
    attempts.started(ep("a", 1))
    attempts.started(ep("b", 0))  # not a restored attempt: nothing changes
    attempts.started(ep("d", 1))  # never installed: nothing changes
    assert attempts.unstarted == 2
    assert attempts.unstarted_outside([ep("c", 1)]) == (ep("b", 1),)
    assert attempts.unstarted_outside([]) == (ep("c", 1),)
    assert attempts.unstarted_outside([]) == () and attempts.unstarted == 0


@settings(max_examples=examples(200), deadline=None)
@given(
    first=st.lists(episodes, max_size=5),
    second=st.lists(episodes, max_size=5),
    forgotten=st.sets(st.sampled_from(("a", "b", "c", "d"))),
    data=st.data(),
)
def test_merged_answers_as_both_did(
    first: list[EnvironmentEpisode],
    second: list[EnvironmentEpisode],
    forgotten: set[str],
    data: st.DataObject,
) -> None:
    """A later restore merged into one table: latest is the newer of both, unstarted the union,
    and episodes whose flags are all clear are gone."""

    def draw(scope: list[EnvironmentEpisode]) -> RestoredAttempts:
        size = len(set(scope))
        flags = data.draw(st.lists(st.integers(0, 1), min_size=size, max_size=size))
        return restored(scope, flags)

    older, newer = draw(first), draw(second)
    for rollout_id in forgotten:
        older.forget(rollout_id)
    both = older.merged(newer)
    assert all(both.flags)
    for rollout_id in ("a", "b", "c", "d"):
        answers = [a for a in (older.latest(rollout_id), newer.latest(rollout_id)) if a is not None]
        assert both.latest(rollout_id) == (max(answers) if answers else None)
    assert set(both.unstarted_outside([])) == set(older.unstarted_outside([])) | set(
        newer.unstarted_outside([])
    )


def test_a_restored_episode_costs_its_flag_byte_beside_the_table() -> None:
    """The fence's record of 20,000 restored attempts is one byte each, not an object each
    (the table's lists are the restore's own, shared)."""
    table = ScopeTable.of(ep(f"task-{index:06d}") for index in range(20_000))
    installed = bytearray([1]) * len(table)
    tracemalloc.start()
    try:
        attempts = RestoredAttempts.installed(table, installed)
        size, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert attempts.unstarted == 20_000
    assert size < 2 * len(table) + 4096
