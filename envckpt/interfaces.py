"""The trainer-facing interface: what a trainer calls to snapshot and restore.

A rollout snapshot uses it in this order::

    async with env_checkpoint.snapshot(path) as snapshot:   # backend paused
        async with barrier.checkpoint() as cut:
            if snapshot is not None:
                await snapshot.check_against_cut(cut)
            ...                                             # trainer saves its state
    # backend resumed

and a restore at startup::

    async with env_checkpoint.restored(path) as restored:
        ledger.prepare_for_restart(cut, restored)           # keep only on clean exit

``NoEnvironmentCheckpoint`` serves backends that keep nothing between turns.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from envckpt.errors import IncompatibleCheckpoint


class MutationCut(Protocol):
    """A capability valid only inside the data plane's checkpoint section."""

    def require_live(self) -> None:
        """Raise if the section that issued this cut has ended."""
        ...


@dataclass(frozen=True, slots=True)
class RestoredEnvironmentRollouts:
    """What an environment restore continued, for the trainer's ledger to match.

    ``continued_attempts`` holds ``(instance_id, rollout_id, attempt)`` of every
    restored rollout (the saved attempt; it continues as attempt + 1).
    ``staging_keys`` are data-plane rows the restored rollouts still reference.
    ``instance_seconds``: ``(instance_id, seconds)`` each instance's restore
    took, when the backend measured it (telemetry only).
    """

    continued_attempts: frozenset[tuple[str, str, int]] = frozenset()
    staging_keys: frozenset[str] = frozenset()
    instance_seconds: tuple[tuple[str, float], ...] = ()


@runtime_checkable
class EnvironmentSnapshot(Protocol):
    """The backend's part of one rollout snapshot, while the backend is paused."""

    @property
    def restarted_rollouts(self) -> int:
        """Rollouts the backend could not capture; they start over after a crash."""
        ...

    async def check_against_cut(self, cut: MutationCut) -> None:
        """Under the cut, raise unless the captured state matches the trainer's ledger."""
        ...

    def metrics(self, paused_seconds: float) -> dict[str, float]:
        """Backend metrics for this snapshot."""
        ...


@runtime_checkable
class EnvironmentCheckpoint(Protocol):
    """Rollout state an environment backend keeps between turns."""

    @property
    def holds_rollout_state(self) -> bool:
        """True when only a rollout snapshot (not a trainer checkpoint) can continue turns."""
        ...

    async def check_startup(self) -> None:
        """Refuse, or warn about, a deployment that cannot recover as configured."""
        ...

    def snapshot(
        self, checkpoint_path: Path
    ) -> contextlib.AbstractAsyncContextManager[EnvironmentSnapshot | None]:
        """Pause the backend and save its rollouts under ``checkpoint_path``."""
        ...

    def restored(
        self, checkpoint_path: Path
    ) -> contextlib.AbstractAsyncContextManager[RestoredEnvironmentRollouts]:
        """Restore rollouts from ``checkpoint_path``; kept only on a clean exit."""
        ...

    def is_unavailable(self, error: BaseException) -> bool:
        """Whether a failed snapshot only met a briefly unreachable backend."""
        ...


class NoEnvironmentCheckpoint:
    """For a backend that keeps no rollout state between turns."""

    @property
    def holds_rollout_state(self) -> bool:
        return False

    async def check_startup(self) -> None:
        return None

    @contextlib.asynccontextmanager
    async def snapshot(self, checkpoint_path: Path) -> AsyncIterator[EnvironmentSnapshot | None]:
        del checkpoint_path  # nothing to save
        yield None

    @contextlib.asynccontextmanager
    async def restored(self, checkpoint_path: Path) -> AsyncIterator[RestoredEnvironmentRollouts]:
        # A checkpoint that holds environment state cannot be honoured by a
        # backend that has none: continuing would silently lose turns.
        raise IncompatibleCheckpoint(
            f"rollout checkpoint {checkpoint_path} holds turn-level environment state, "
            "but this run's environment backend keeps none to restore"
        )
        yield RestoredEnvironmentRollouts()  # pragma: no cover

    def is_unavailable(self, error: BaseException) -> bool:
        del error
        return False
