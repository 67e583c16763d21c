"""Tests for envckpt.gym.summaries: the picklable prepare and commit summaries of one instance.

``GymCheckpointPrepareSummary.from_result`` is tested on a ``PrepareResult``
as it takes one today (another engineer is widening it to duck-typed results).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from types import SimpleNamespace
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
    as_episode,
    as_episodes,
)

from helpers.examples import examples
from helpers.participant_doubles import ep

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


@settings(max_examples=examples(300), deadline=None)
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


@settings(max_examples=examples(200), deadline=None)
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


G1 = EnvironmentEpisode("r1", 0)
G2 = EnvironmentEpisode("r2", 3)


@dataclass
class GymLikePrepareResult:
    """Gym's prepare result as the seeds receive it: lists of blockers, Gym episode objects."""

    prepared: bool
    blocked: dict[str, list[str]] = field(default_factory=dict)
    restarting: list[Any] = field(default_factory=list)

    def blockers(self) -> dict[str, list[str]]:
        return self.blocked

    def restarts(self) -> list[Any]:
        return self.restarting


def test_anything_with_rollout_id_and_attempt_becomes_an_episode() -> None:
    """Ours, a duck-typed object and the wire form convert; other values are a TypeError."""
    assert as_episode(G2) is G2
    assert as_episode(SimpleNamespace(rollout_id="r2", attempt=3)) == G2
    assert as_episode({"rollout_id": "r2", "attempt": 3}) == G2
    assert as_episodes([SimpleNamespace(rollout_id="r1", attempt=0), G2]) == (G1, G2)
    for bad in ("r1", 7, SimpleNamespace(rollout_id="r1")):
        with pytest.raises(TypeError, match="rollout_id and attempt"):
            as_episode(bad)
    with pytest.raises(ValueError):
        as_episode(SimpleNamespace(rollout_id="r-a1", attempt=0))


def test_nemo_gyms_own_episode_id_is_accepted() -> None:
    """nemo-gym's EpisodeId (a pydantic model, unhashable with ours) converts exactly."""
    episode_types = pytest.importorskip("nemo_gym.episode_types")
    gym_id = episode_types.EpisodeId(rollout_id="r2", attempt=3)
    assert as_episode(gym_id) == G2 and as_episode(gym_id).capture_key == gym_id.capture_key


def test_from_result_takes_gyms_result_as_the_seeds_do() -> None:
    """Gym objects in restarts become sorted episodes; blockers become tuples."""
    result = GymLikePrepareResult(
        prepared=False,
        blocked={"agent": ["r9", "r8"]},
        restarting=[
            SimpleNamespace(rollout_id="r2", attempt=3),
            {"rollout_id": "r1", "attempt": 0},
        ],
    )
    summary = GymCheckpointPrepareSummary.from_result(result)
    assert summary.prepared is False
    assert summary.blockers == {"agent": ("r9", "r8")}
    assert summary.restarts == (G1, G2)
    assert summary.continued([SimpleNamespace(rollout_id="r5", attempt=1), G1]) == (
        EnvironmentEpisode("r5", 1),
    )
    assert pickle.loads(pickle.dumps(summary)) == summary


def test_from_result_of_envckpts_own_result_is_unchanged() -> None:
    """envckpt's PrepareResult gives the same summary it always did."""
    result = PrepareResult(
        prepared=False,
        replies={
            "agent": {"phase": "preparing", "report": {"blockers": ["r1"], "restarts": ["r2-a3"]}},
            "policy": {"phase": "prepared", "report": {}},
        },
    )
    summary = GymCheckpointPrepareSummary.from_result(result)
    assert summary == GymCheckpointPrepareSummary(False, {"agent": ("r1",)}, (G2,))


def test_a_commit_summary_of_gym_objects_equals_one_of_ours() -> None:
    """Gym episode objects as exported episodes and as attribution keys are converted."""
    gym_e1 = SimpleNamespace(rollout_id="r1", attempt=0)
    theirs = GymCheckpointCommitSummary(
        exported_episodes=(gym_e1,),  # type: ignore[arg-type]
        staging_keys=("k1",),
        participants=("agent",),
        staging_keys_by_episode={
            EnvironmentEpisode.from_wire({"rollout_id": "r1", "attempt": 0}): ("k1",)
        },
        unowned_live_episodes=({"rollout_id": "r2", "attempt": 3},),  # type: ignore[arg-type]
    )
    ours = GymCheckpointCommitSummary((G1,), ("k1",), ("agent",), {G1: ("k1",)}, (G2,))
    assert theirs == ours
    with pytest.raises(ValueError, match="attribute exactly"):
        GymCheckpointCommitSummary((G1,), ("k1", "k2"), ("agent",), {G1: ("k1",)})


def test_summaries_carry_each_participant_s_seconds_and_records_across_a_pickle() -> None:
    """from_result keeps a PrepareResult's timings (Gym's own result has none); a commit
    summary keeps its participants' seconds and records through pickle (a Ray actor)."""
    timed = PrepareResult(
        prepared=True, replies={"agent": {"phase": "prepared"}}, seconds={"agent": 0.3}
    )
    assert GymCheckpointPrepareSummary.from_result(timed).participant_seconds == {"agent": 0.3}
    untimed = SimpleNamespace(prepared=True, blockers=dict, restarts=tuple)
    assert GymCheckpointPrepareSummary.from_result(untimed).participant_seconds == {}
    commit = GymCheckpointCommitSummary(
        exported_episodes=(),
        staging_keys=(),
        participants=("agent",),
        participant_seconds={"agent": 0.2},
        participant_records={"agent": 4},
    )
    copy = pickle.loads(pickle.dumps(commit))
    assert (copy.participant_seconds, copy.participant_records) == ({"agent": 0.2}, {"agent": 4})
