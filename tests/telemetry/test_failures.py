"""Tests for envckpt.telemetry.failures: failures counted by protocol error code."""

from __future__ import annotations

from envckpt.errors import GymCheckpointUnavailable, ParticipantError, SnapshotNotReady
from envckpt.telemetry.failures import UNREACHABLE, failures_by_code


def test_refusals_count_by_code_and_silence_as_unreachable() -> None:
    """Two servers refused stale_attempt, one never answered."""
    error = GymCheckpointUnavailable(
        "commit failed",
        operation="commit",
        failures={"a": "x", "b": "y", "c": "z"},
        codes={"a": "stale_attempt", "b": "stale_attempt"},
    )
    assert failures_by_code(error) == (("stale_attempt", 2), (UNREACHABLE, 1))


def test_an_error_without_servers_counts_by_its_code_or_type() -> None:
    """A participant error counts under its code; anything else under its type."""
    assert failures_by_code(ParticipantError("admission_closed", "open")) == (
        ("admission_closed", 1),
    )
    assert failures_by_code(SnapshotNotReady("not ready", blockers={})) == (
        ("SnapshotNotReady", 1),
    )
    assert failures_by_code(OSError("disk full")) == (("OSError", 1),)
