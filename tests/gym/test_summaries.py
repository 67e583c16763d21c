"""Tests for envckpt.gym.summaries: the picklable prepare and commit summaries of one instance.

``GymCheckpointPrepareSummary.from_result`` is tested on a ``PrepareResult``
as it takes one today (another engineer is widening it to duck-typed results).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.coordination.types import PrepareResult
from envckpt.episodes import EnvironmentEpisode
from envckpt.gym.summaries import (
    GymCheckpointCommitSummary,
    GymCheckpointEpisode,
    GymCheckpointPrepareSummary,
)


def ep(rollout_id: str, attempt: int = 0) -> EnvironmentEpisode:
    return EnvironmentEpisode(rollout_id, attempt)


episodes = st.builds(ep, st.sampled_from(("a", "b", "c", "d")), st.integers(0, 2))


def summary(
    staging_keys: tuple[str, ...], by_episode: dict[EnvironmentEpisode, tuple[str, ...]]
) -> GymCheckpointCommitSummary:
    return GymCheckpointCommitSummary(
        exported_episodes=tuple(sorted(by_episode)),
        staging_keys=staging_keys,
        participants=("agent", "policy"),
        staging_keys_by_episode=by_episode,
    )


def test_gym_episodes_are_the_ledgers_episodes() -> None:
    """Gym's episode identity is the backend-neutral EnvironmentEpisode."""
    assert GymCheckpointEpisode is EnvironmentEpisode


def test_a_commit_summary_with_exact_attribution_is_accepted() -> None:
    """Every committed key attributed, a shared row belonging to two episodes: accepted."""
    done = summary(("k1", "k2"), {ep("a"): ("k1",), ep("a", 1): ("k1", "k2")})
    assert done.staging_keys == ("k1", "k2")
    assert done.unowned_live_episodes == ()


def test_a_commit_summary_refuses_a_committed_key_nobody_owns() -> None:
    """A staging key no episode is attributed is refused, naming it."""
    with pytest.raises(ValueError, match=r"unattributed=\['k2'\]"):
        summary(("k1", "k2"), {ep("a"): ("k1",)})


def test_a_commit_summary_refuses_an_attribution_of_an_uncommitted_key() -> None:
    """An attributed key that was not committed is refused, naming it."""
    with pytest.raises(ValueError, match=r"unlisted=\['k9'\]"):
        summary(("k1",), {ep("a"): ("k1", "k9")})


keys = st.frozensets(st.sampled_from(("k1", "k2", "k3", "k4")), max_size=4)


@settings(max_examples=300, deadline=None)
@given(committed=keys, by_episode=st.dictionaries(episodes, keys.map(tuple), max_size=4))
def test_a_commit_summary_is_accepted_exactly_when_the_attribution_covers_the_keys(
    committed: frozenset[str], by_episode: dict[EnvironmentEpisode, tuple[str, ...]]
) -> None:
    """Accepted iff the union of the attributions is the set of committed keys."""
    attributed = {key for values in by_episode.values() for key in values}
    if attributed == committed:
        summary(tuple(sorted(committed)), by_episode)
    else:
        with pytest.raises(ValueError, match="attribute exactly"):
            summary(tuple(sorted(committed)), by_episode)


def prepare_result(prepared: bool, replies: dict[str, dict[str, Any]]) -> PrepareResult:
    return PrepareResult(prepared=prepared, replies=replies)


def test_from_result_keeps_prepared_blockers_and_sorted_restarts() -> None:
    """The summary carries the result's verdict, blockers per server and restarts, sorted."""
    result = prepare_result(
        False,
        {
            "policy": {"phase": "prepared", "report": {"restarts": ["b", "a-a1"]}},
            "agent": {"phase": "preparing", "report": {"blockers": ["c"], "restarts": ["b"]}},
        },
    )
    prepared = GymCheckpointPrepareSummary.from_result(result)
    assert prepared.prepared is False
    assert prepared.blockers == {"agent": ("c",)}
    assert prepared.restarts == (ep("a", 1), ep("b"))


@settings(max_examples=200, deadline=None)
@given(
    restarts=st.lists(episodes, max_size=4),
    scope=st.lists(episodes, max_size=6, unique=True),
)
def test_continued_is_the_scope_minus_the_restarts_in_scope_order(
    restarts: list[EnvironmentEpisode], scope: list[EnvironmentEpisode]
) -> None:
    """continued drops every restart and keeps the rest in the order given."""
    report = {"restarts": [e.capture_key for e in restarts]}
    result = prepare_result(True, {"policy": {"phase": "prepared", "report": report}})
    prepared = GymCheckpointPrepareSummary.from_result(result)
    assert prepared.continued(tuple(scope)) == tuple(e for e in scope if e not in set(restarts))
    assert prepared.continued(tuple(scope)) == result.continued(scope)


def test_both_summaries_cross_a_process_boundary_intact() -> None:
    """They pickle (Ray ships them between actors) and come back equal."""
    committed = summary(("k1",), {ep("a", 1): ("k1",)})
    prepared = GymCheckpointPrepareSummary(True, {"agent": ("x",)}, (ep("b"),))
    for value in (committed, prepared):
        copy = pickle.loads(pickle.dumps(value))
        assert copy == value and type(copy) is type(value)
