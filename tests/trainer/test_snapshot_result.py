"""Tests for envckpt.trainer.snapshot_result: the attempt, and what it reports when it ends."""

from __future__ import annotations

from envckpt.trainer.snapshot_result import SnapshotAttempt, exported_episodes
from envckpt.trainer.snapshot_telemetry import SnapshotStamps


class Exported:
    exported_episodes = 3


def test_exported_episodes_reads_what_a_backend_says_or_zero() -> None:
    """A Gym snapshot says how many it exported; anything else counts none."""
    assert exported_episodes(Exported()) == 3
    assert exported_episodes(None) == 0


def test_an_attempt_reports_its_record_with_its_own_phase_and_files() -> None:
    """Failed in its current phase; published with the files it wrote."""
    attempt = SnapshotAttempt(SnapshotStamps("rollouts-0123456789ab", "timer", paused_at=10.0))
    attempt.phase = "save"
    failed = attempt.failed_record(failed_at=11.0, error=RuntimeError("no"))
    assert (failed.failed_phase, failed.paused_seconds) == ("save", 1.0)
    attempt.metrics["snapshot_bytes"] = 42.0
    published = attempt.published_record(attempt.metrics, resumed_at=12.0, error="boom")
    assert (published.bytes, published.resume_error, published.paused_seconds) == (42, "boom", 2.0)
    assert attempt.checkpoint_id == "rollouts-0123456789ab" and attempt.paused_at == 10.0
