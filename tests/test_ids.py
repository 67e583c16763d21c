"""Tests for envckpt.ids: the identifier grammar."""

from __future__ import annotations

import pytest

from envckpt.ids import (
    validate_attempt,
    validate_checkpoint_id,
    validate_path_component,
    validate_rollout_id,
)


def test_checkpoint_ids_follow_the_grammar() -> None:
    """1 to 128 characters of the safe alphabet, starting alphanumeric."""
    assert validate_checkpoint_id("snap-1.x_y") == "snap-1.x_y"
    assert validate_checkpoint_id("a" * 128) == "a" * 128
    for bad in ("", "a" * 129, "../x", "a/b", ".hidden", "-x", "sp ace", "c\n", None, 5):
        with pytest.raises(ValueError):
            validate_checkpoint_id(bad)


def test_rollout_ids_refuse_the_reserved_suffix() -> None:
    """A rollout id may not end in -a<N> with N >= 1."""
    assert validate_rollout_id("r-a0") == "r-a0"
    assert validate_rollout_id("r-ab1") == "r-ab1"
    for bad in ("r-a1", "r-a10", "", "a/b", "task-1\n", "r-a1\n"):
        with pytest.raises(ValueError):
            validate_rollout_id(bad)


def test_attempts_are_non_negative_ints() -> None:
    """Negative numbers, bools and floats are refused."""
    assert validate_attempt(0) == 0
    for bad in (-1, True, 1.0, "1"):
        with pytest.raises(ValueError):
            validate_attempt(bad)


def test_path_components_are_single_and_safe() -> None:
    """Separators, dot names and NUL are refused."""
    assert validate_path_component("shard", what="x") == "shard"
    for bad in ("", ".", "..", "a/b", "a\\b", "a\x00", 3):
        with pytest.raises(ValueError):
            validate_path_component(bad, what="x")
