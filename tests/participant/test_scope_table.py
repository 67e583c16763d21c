"""Tests for envckpt.participant.scope_table: a restore's scope as sorted ids and attempts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.episodes import EnvironmentEpisode, capture_keys
from envckpt.participant.scope_table import ScopeTable

from helpers.examples import examples
from helpers.participant_doubles import ep

episodes = st.builds(ep, st.sampled_from(("a", "b", "b-1", "c")), st.integers(0, 3))


@settings(max_examples=examples(200), deadline=None)
@given(scope=st.lists(episodes, max_size=8))
def test_the_table_is_the_scope_sorted_each_once(scope: list[EnvironmentEpisode]) -> None:
    """Any order, any repeats: the episodes in protocol order, each once, each found."""
    table = ScopeTable.of(scope)
    assert list(table.episodes()) == sorted(set(scope))
    assert len(table) == len(set(scope))
    for at, episode in enumerate(table.episodes()):
        assert table.index(episode.rollout_id, episode.attempt) == at
        assert table.index(episode.rollout_id, episode.attempt, hint=at) == at
        assert at in table.positions(episode.rollout_id)
    assert table == ScopeTable.of(reversed(scope))


@settings(max_examples=examples(200), deadline=None)
@given(scope=st.lists(episodes, max_size=6), probe=episodes, hint=st.integers(-1, 8))
def test_an_episode_outside_is_never_found_whatever_the_hint(
    scope: list[EnvironmentEpisode], probe: EnvironmentEpisode, hint: int
) -> None:
    """A wrong or out-of-range hint only costs a bisection: the answer is the same."""
    table = ScopeTable.of(scope)
    found = table.index(probe.rollout_id, probe.attempt, hint=hint)
    if probe in scope:
        assert table.episode(found) == probe
    else:
        assert found == -1


@settings(max_examples=examples(200), deadline=None)
@given(scope=st.lists(episodes, max_size=8), data=st.data())
def test_next_keys_are_the_protocols_sorted_keys_of_the_flagged_next_attempts(
    scope: list[EnvironmentEpisode], data: st.DataObject
) -> None:
    """What a restore replies: capture_keys of the flagged episodes' next attempts."""
    table = ScopeTable.of(scope)
    flags = bytearray(
        data.draw(st.lists(st.integers(0, 1), min_size=len(table), max_size=len(table)))
    )
    chosen = [e for e, flag in zip(table.episodes(), flags, strict=True) if flag]
    assert table.next_attempts(flags) == [e.next_attempt() for e in chosen]
    assert table.next_keys(flags) == capture_keys(e.next_attempt() for e in chosen)


def test_tables_of_other_scopes_differ_and_are_unhashable() -> None:
    """Equality is the replay's test: another attempt or rollout is another scope."""
    table = ScopeTable.of([ep("a"), ep("b")])
    assert table != ScopeTable.of([ep("a"), ep("b", 1)])
    assert table != ScopeTable.of([ep("a")])
    assert table != ("a", "b")
    assert repr(table) == "ScopeTable(2 episodes)"
    assert ScopeTable.__hash__ is None


@settings(max_examples=examples(200), deadline=None)
@given(scope=st.lists(episodes, max_size=8), rollouts=st.lists(st.sampled_from(("a", "b", "z"))))
def test_of_rollouts_is_the_table_filtered_to_those_rollouts(
    scope: list[EnvironmentEpisode], rollouts: list[str]
) -> None:
    """What the restore's held-rollout checks read instead of every scope episode."""
    table = ScopeTable.of(scope)
    expected = [e for e in table.episodes() if e.rollout_id in rollouts]
    assert table.of_rollouts(rollouts) == expected
