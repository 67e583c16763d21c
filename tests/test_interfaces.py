"""Tests for envckpt.interfaces: the trainer-facing protocols and the no-state backend."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from envckpt.errors import GymCheckpointUnavailable, IncompatibleCheckpoint
from envckpt.interfaces import (
    EnvironmentCheckpoint,
    NoEnvironmentCheckpoint,
    RestoredEnvironmentRollouts,
)


def test_no_environment_checkpoint_is_an_environment_checkpoint() -> None:
    """The no-state backend satisfies the protocol and says it holds no rollout state."""
    backend = NoEnvironmentCheckpoint()
    assert isinstance(backend, EnvironmentCheckpoint)
    assert backend.holds_rollout_state is False


def test_an_object_missing_an_operation_is_not_an_environment_checkpoint() -> None:
    """The runtime check refuses a backend without ``restored``."""

    class SnapshotOnly:
        holds_rollout_state = True

        async def check_startup(self) -> None:
            return None

        def snapshot(self, checkpoint_path: Path) -> object:
            return None

        def is_unavailable(self, error: BaseException) -> bool:
            return False

    assert not isinstance(SnapshotOnly(), EnvironmentCheckpoint)


async def test_no_state_snapshot_yields_none_and_writes_nothing(tmp_path: Path) -> None:
    """Startup passes and a snapshot yields None without touching its directory."""
    backend = NoEnvironmentCheckpoint()
    await backend.check_startup()
    target = tmp_path / "snapshot"
    async with backend.snapshot(target) as snapshot:
        assert snapshot is None
    assert not target.exists()


async def test_no_state_restore_is_refused_before_the_body_runs(tmp_path: Path) -> None:
    """A checkpoint with environment state cannot be honoured: IncompatibleCheckpoint, no body."""
    backend = NoEnvironmentCheckpoint()
    entered = False
    with pytest.raises(IncompatibleCheckpoint, match=str(tmp_path)):
        async with backend.restored(tmp_path):
            entered = True
    assert not entered


def test_no_state_backend_never_calls_an_error_unavailable() -> None:
    """Nothing is retryable for a backend that has nothing to be unavailable."""
    backend = NoEnvironmentCheckpoint()
    assert not backend.is_unavailable(GymCheckpointUnavailable("down", operation="prepare"))
    assert not backend.is_unavailable(RuntimeError("boom"))


def test_restored_rollouts_default_to_nothing_and_are_frozen() -> None:
    """An empty restore continues nothing; the value cannot be changed after the fact."""
    restored = RestoredEnvironmentRollouts()
    assert restored.continued_attempts == frozenset()
    assert restored.staging_keys == frozenset()
    with pytest.raises(dataclasses.FrozenInstanceError):
        restored.staging_keys = frozenset({"k"})  # type: ignore[misc]
    same = RestoredEnvironmentRollouts(
        continued_attempts=frozenset({("shard/replica-0", "r1", 0)}),
        staging_keys=frozenset({"r1/t0"}),
    )
    assert same == RestoredEnvironmentRollouts(
        continued_attempts=frozenset({("shard/replica-0", "r1", 0)}),
        staging_keys=frozenset({"r1/t0"}),
    )
    assert hash(same) == hash(dataclasses.replace(same))
