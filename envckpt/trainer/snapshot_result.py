"""``SnapshotResult``, what a published snapshot gives the trainer, and the attempt it grew from.

The snapshotter (``snapshotter.py``) carries one ``SnapshotAttempt`` through
its phases; once published it becomes the ``SnapshotResult`` the caller
gets, and its stamps become the snapshot's telemetry record::

    attempt = SnapshotAttempt(SnapshotStamps(cid, reason="timer", paused_at=now))
    attempt.metrics["snapshot_cut_seconds"] = ...        # as phases end
    result = SnapshotResult(cid, path, exported_episodes(env), ..., metrics=attempt.metrics)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envckpt.interfaces import EnvironmentSnapshot
from envckpt.telemetry.snapshot_record import SnapshotTelemetry
from envckpt.trainer.snapshot_telemetry import SnapshotStamps, failed_record, published_record


@dataclass
class SnapshotResult:
    """One published snapshot. ``metrics`` gains the pause time when the context exits."""

    checkpoint_id: str
    path: Path
    exported_episodes: int
    restarted_rollouts: int
    metrics: dict[str, float] = field(default_factory=dict)
    # Set by ``take`` when the snapshot was published but resuming failed.
    resume_error: str = ""
    step: int | None = None
    policy_version: str | None = None


@dataclass
class SnapshotAttempt:
    """One snapshot on its way: where it is, and the times of its phases."""

    stamps: SnapshotStamps
    phase: str = "begin"
    temporary: Path | None = None
    published: SnapshotResult | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    # The published files (name -> digest, size), for the record's bytes per instance.
    files: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    env_snapshot: EnvironmentSnapshot | None = None
    resume_started_at: float | None = None

    @property
    def checkpoint_id(self) -> str:
        return self.stamps.checkpoint_id

    @property
    def paused_at(self) -> float:
        return self.stamps.paused_at

    def published_record(
        self, metrics: Mapping[str, float], *, resumed_at: float, error: str = ""
    ) -> SnapshotTelemetry:
        """This snapshot's record once published (``error``: the resume after it failed)."""
        return published_record(
            self.stamps,
            metrics=metrics,
            env_snapshot=self.env_snapshot,
            files=self.files,
            resume_started_at=self.resume_started_at,
            resumed_at=resumed_at,
            resume_error=error,
        )

    def failed_record(self, *, failed_at: float, error: BaseException) -> SnapshotTelemetry:
        """This snapshot's record after it failed in its current phase."""
        return failed_record(
            self.stamps, metrics=self.metrics, failed_at=failed_at, phase=self.phase, error=error
        )


def exported_episodes(env_snapshot: object) -> int:
    """Episodes the environment's snapshot exported (0 for a backend that does not say)."""
    count = getattr(env_snapshot, "exported_episodes", None)
    return int(count) if isinstance(count, int) else 0
