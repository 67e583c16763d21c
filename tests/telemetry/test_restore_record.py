"""Tests for envckpt.telemetry.restore_record: one restore's record, its metrics and its JSON."""

from __future__ import annotations

import pytest

from envckpt.telemetry import names
from envckpt.telemetry.restore_record import RestoreOutcome, RestoreTelemetry

from helpers.telemetry_samples import restore_record


def test_a_restore_and_a_fresh_start_round_trip_through_json() -> None:
    """The continued and restarted rollouts come back by id."""
    for record in (restore_record(), restore_record(None)):
        assert RestoreTelemetry.from_json(record.to_json()) == record
    assert restore_record(None).outcome is RestoreOutcome.FRESH


def test_the_metrics_carry_documented_names() -> None:
    """restore_seconds is the wall time; counts are the record's."""
    metrics = restore_record().metrics()
    assert set(metrics) == {name for name, _, _ in names.RESTORE_METRICS}
    assert metrics[names.RESTORE_SECONDS] == 1.5
    assert (metrics[names.RESTORE_CONTINUED], metrics[names.RESTORE_RESTARTED]) == (2.0, 1.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("continued_rollouts", [["task-1", 2]]),
        ("continued_rollouts", [["task-1", -2, "math/replica-0"]]),
        ("restarted_rollouts", [3]),
        ("phases", {"check": "slow"}),
        ("kind", "snapshot"),
    ],
)
def test_a_tampered_restore_record_is_refused(field: str, value: object) -> None:
    """A continued rollout without its instance, a negative attempt, a bad phase: refused."""
    body = restore_record().to_json()
    body[field] = value
    with pytest.raises((TypeError, ValueError)):
        RestoreTelemetry.from_json(body)
