"""Tests for envckpt.gym.summaries: picklable results, and Gym's episode objects made ours."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from envckpt.coordination.types import PrepareResult
from envckpt.episodes import EnvironmentEpisode
from envckpt.gym.summaries import (
    GymCheckpointCommitSummary,
    GymCheckpointPrepareSummary,
    as_episode,
    as_episodes,
)

E1 = EnvironmentEpisode("r1", 0)
E2 = EnvironmentEpisode("r2", 3)


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
    assert as_episode(E2) is E2
    assert as_episode(SimpleNamespace(rollout_id="r2", attempt=3)) == E2
    assert as_episode({"rollout_id": "r2", "attempt": 3}) == E2
    assert as_episodes([SimpleNamespace(rollout_id="r1", attempt=0), E2]) == (E1, E2)
    for bad in ("r1", 7, SimpleNamespace(rollout_id="r1")):
        with pytest.raises(TypeError, match="rollout_id and attempt"):
            as_episode(bad)
    with pytest.raises(ValueError):
        as_episode(SimpleNamespace(rollout_id="r-a1", attempt=0))


def test_nemo_gyms_own_episode_id_is_accepted() -> None:
    """nemo-gym's EpisodeId (a pydantic model, unhashable with ours) converts exactly."""
    episode_types = pytest.importorskip("nemo_gym.episode_types")
    gym_id = episode_types.EpisodeId(rollout_id="r2", attempt=3)
    assert as_episode(gym_id) == E2 and as_episode(gym_id).capture_key == gym_id.capture_key


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
    assert summary.restarts == (E1, E2)
    assert summary.continued([SimpleNamespace(rollout_id="r5", attempt=1), E1]) == (
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
    assert summary == GymCheckpointPrepareSummary(False, {"agent": ("r1",)}, (E2,))


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
    ours = GymCheckpointCommitSummary((E1,), ("k1",), ("agent",), {E1: ("k1",)}, (E2,))
    assert theirs == ours
    with pytest.raises(ValueError, match="attribute exactly"):
        GymCheckpointCommitSummary((E1,), ("k1", "k2"), ("agent",), {E1: ("k1",)})
