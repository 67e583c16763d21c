"""Tests for envckpt.telemetry.snapshot_record: one snapshot's record, its metrics and its JSON."""

from __future__ import annotations

import pytest

from envckpt.telemetry import names
from envckpt.telemetry.snapshot_record import (
    SnapshotOutcome,
    SnapshotPhases,
    SnapshotTelemetry,
)

from helpers.telemetry_samples import snapshot_record


def test_a_published_and_a_failed_record_round_trip_through_json() -> None:
    """Every field, failures by code included, comes back equal."""
    for outcome in SnapshotOutcome:
        record = snapshot_record(outcome=outcome)
        assert SnapshotTelemetry.from_json(record.to_json()) == record
    failed = snapshot_record(outcome=SnapshotOutcome.FAILED)
    assert not failed.published and failed.to_json()["failures_by_code"] == {"SnapshotNotReady": 1}


def test_the_metrics_carry_documented_names_and_the_record_s_figures() -> None:
    """Every key is a documented name; the pause, the slowest prepare and the slowest
    participant call are the record's."""
    metrics = snapshot_record(paused=0.4).metrics()
    assert set(metrics) <= set(names.ALL_METRICS)
    assert metrics[names.SNAPSHOT_PAUSED_SECONDS] == 0.4
    assert metrics[names.SNAPSHOT_INSTANCE_PREPARE_MAX] == 0.08
    assert metrics[names.SNAPSHOT_PARTICIPANT_PREPARE_MAX] == 0.08  # simple_agent of replica-1
    assert metrics[names.SNAPSHOT_RESUME_SECONDS] == 0.01
    assert all(isinstance(value, float) for value in metrics.values())


def test_without_instances_no_instance_metrics_are_claimed() -> None:
    """A backend without Gym instances reports no per-instance figures (not zeros)."""
    record = SnapshotTelemetry(
        checkpoint_id="rollouts-0123456789ab",
        outcome=SnapshotOutcome.PUBLISHED,
        started_at=1.0,
        ended_at=2.0,
        paused_seconds=1.0,
    )
    assert not [name for name in record.metrics() if "instance" in name]


def test_phases_come_in_the_order_they_run() -> None:
    """retire, prepare, commit, cut_wait, cut, publish, resume."""
    assert [name for name, _ in SnapshotPhases().items()] == [
        "retire",
        "prepare",
        "commit",
        "cut_wait",
        "cut",
        "publish",
        "resume",
    ]


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("kind", "restore", ValueError),
        ("outcome", "half", ValueError),
        ("paused_seconds", -1.0, ValueError),
        ("started_at", "yesterday", TypeError),
        ("phases", {"prepare": 0.1, "nap": 2.0}, ValueError),
        ("instances", [1], TypeError),
        ("failures_by_code", {"x": -2}, ValueError),
        ("step", -3, ValueError),
    ],
)
def test_a_tampered_record_is_refused(field: str, value: object, error: type[Exception]) -> None:
    """Each damaged field raises instead of reading as a number."""
    body = snapshot_record().to_json()
    body[field] = value
    with pytest.raises(error):
        SnapshotTelemetry.from_json(body)


def test_a_record_missing_its_id_is_refused() -> None:
    """A required field that is absent is a KeyError naming it."""
    body = snapshot_record().to_json()
    del body["checkpoint_id"]
    with pytest.raises(KeyError, match="checkpoint_id"):
        SnapshotTelemetry.from_json(body)
