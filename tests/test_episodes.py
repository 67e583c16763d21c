"""Tests for envckpt.episodes: the episode value and the capture-key codec."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envckpt.episodes import (
    EnvironmentEpisode,
    capture_keys,
    episodes_from_keys,
    sort_key,
    sorted_episodes,
)

rollout_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True).filter(
    lambda s: not re.search(r"-a[1-9][0-9]*$", s)
)
attempts = st.integers(min_value=0, max_value=10_000)


def test_attempt_zero_uses_the_bare_rollout_id() -> None:
    """Attempt 0's capture key is the rollout id itself."""
    assert EnvironmentEpisode("task-7", 0).capture_key == "task-7"


def test_later_attempts_carry_the_suffix() -> None:
    """Attempt N >= 1 is keyed ``<rollout_id>-a<N>``."""
    assert EnvironmentEpisode("task-7", 3).capture_key == "task-7-a3"


def test_next_attempt_increments() -> None:
    """A restore continues attempt N as attempt N + 1."""
    assert EnvironmentEpisode("r", 0).next_attempt() == EnvironmentEpisode("r", 1)


@pytest.mark.parametrize(
    ("rollout_id", "attempt"),
    [("", 0), ("x-a1", 0), ("x-a12", 2), ("../x", 0), ("a/b", 0), ("-x", 0), ("r", -1)],
)
def test_invalid_episodes_are_refused(rollout_id: str, attempt: int) -> None:
    """Empty, path-like, reserved-suffix ids and negative attempts raise ValueError."""
    with pytest.raises(ValueError):
        EnvironmentEpisode(rollout_id, attempt)


def test_bool_attempt_is_refused() -> None:
    """A bool is not an attempt number even though it is an int."""
    with pytest.raises(ValueError):
        EnvironmentEpisode("r", True)


def test_suffix_a0_is_an_ordinary_rollout_id() -> None:
    """Only ``-a<N>`` with N >= 1 is reserved, so ``x-a0`` is a plain id."""
    assert EnvironmentEpisode.from_capture_key("x-a0") == EnvironmentEpisode("x-a0", 0)


@given(rollout_ids, attempts)
def test_capture_key_round_trips(rollout_id: str, attempt: int) -> None:
    """Parsing a capture key gives back the episode that produced it."""
    episode = EnvironmentEpisode(rollout_id, attempt)
    assert EnvironmentEpisode.from_capture_key(episode.capture_key) == episode


@given(rollout_ids, attempts)
def test_wire_form_round_trips(rollout_id: str, attempt: int) -> None:
    """The wire dict always has both keys and parses back."""
    episode = EnvironmentEpisode(rollout_id, attempt)
    assert set(episode.to_wire()) == {"rollout_id", "attempt"}
    assert EnvironmentEpisode.from_wire(episode.to_wire()) == episode


def test_from_wire_refuses_missing_or_extra_keys() -> None:
    """Both keys are required and nothing else is allowed."""
    for bad in ({"rollout_id": "r"}, {"rollout_id": "r", "attempt": 0, "x": 1}, ["r", 0]):
        with pytest.raises(ValueError):
            EnvironmentEpisode.from_wire(bad)


def test_sorted_helpers() -> None:
    """capture_keys sorts and dedups; episodes_from_keys parses and sorts."""
    episodes = [EnvironmentEpisode("b", 1), EnvironmentEpisode("a", 0), EnvironmentEpisode("a", 0)]
    assert capture_keys(episodes) == ["a", "b-a1"]
    assert episodes_from_keys(["b-a1", "a"]) == (
        EnvironmentEpisode("a", 0),
        EnvironmentEpisode("b", 1),
    )


def test_sorted_helpers_agree_with_sorting_a_set() -> None:
    """With and without repeats, in any order, the neighbour check gives what a set gives."""
    rng = random.Random(3)
    pool = [EnvironmentEpisode(f"r{i % 7}", i % 3) for i in range(40)]
    for size in (0, 1, 2, 5, 12, 40):
        for _ in range(50):
            episodes = rng.sample(pool, size) + rng.sample(pool, rng.randint(0, size))
            rng.shuffle(episodes)
            unique = set(episodes)
            assert sorted_episodes(episodes) == tuple(sorted(unique, key=sort_key))
            assert capture_keys(episodes) == sorted({e.capture_key for e in unique})
    # Repeats far apart in the input meet once sorted.
    a, b = EnvironmentEpisode("a", 0), EnvironmentEpisode("b", 0)
    assert sorted_episodes([a, b, a]) == (a, b)
    # Already in order: the same episodes back; in order but repeated, once each.
    assert sorted_episodes(iter([a, b])) == (a, b)
    assert sorted_episodes([a, a, b]) == (a, b)
    assert sorted_episodes([EnvironmentEpisode("a", 1), a]) == (a, EnvironmentEpisode("a", 1))
    assert capture_keys([a, b, a]) == ["a", "b"]
