"""Telemetry records with every field set, for the telemetry tests and the report's."""

from __future__ import annotations

from envckpt.telemetry.latency import InstanceTelemetry, LatencySummary, ParticipantTelemetry
from envckpt.telemetry.restore_record import (
    ContinuedRollout,
    RestoreOutcome,
    RestorePhases,
    RestoreTelemetry,
)
from envckpt.telemetry.snapshot_record import SnapshotOutcome, SnapshotPhases, SnapshotTelemetry

T0 = 1_800_000_000.0


def instance(iid: str, prepare: float, commit: float) -> InstanceTelemetry:
    return InstanceTelemetry(
        instance_id=iid,
        prepare_seconds=prepare,
        commit_seconds=commit,
        bytes=4096,
        records=3,
        exported=2,
        restarts=1,
        participants=(
            ParticipantTelemetry("policy_model", prepare / 4, commit, 1),
            ParticipantTelemetry("simple_agent", prepare, commit / 2, 2),
            ParticipantTelemetry("judge", None, None, 0),
        ),
    )


def snapshot_record(
    checkpoint_id: str = "rollouts-step0000000003-0123456789ab",
    *,
    at: float = T0,
    paused: float = 0.25,
    outcome: SnapshotOutcome = SnapshotOutcome.PUBLISHED,
) -> SnapshotTelemetry:
    published = outcome is SnapshotOutcome.PUBLISHED
    return SnapshotTelemetry(
        checkpoint_id=checkpoint_id,
        outcome=outcome,
        started_at=at,
        ended_at=at + paused,
        paused_seconds=paused,
        reason="timer",
        step=3,
        policy_version="v7",
        phases=SnapshotPhases(0.01, 0.08, 0.05, 0.001, 0.06, 0.03, 0.01),
        bytes=123_456 if published else 0,
        trainer_bytes=100_000 if published else 0,
        records_written=6,
        episodes_parked=4,
        episodes_restarted=2,
        staging_keys=5,
        instance_count=2,
        instances=(instance("math/replica-1", 0.08, 0.05), instance("math/replica-0", 0.02, 0.04)),
        prepare_latency=LatencySummary(2, 0.02, 0.08, 0.08, "math/replica-1"),
        commit_latency=LatencySummary(2, 0.04, 0.05, 0.05, "math/replica-1"),
        failed_phase="" if published else "pause",
        failure="" if published else "SnapshotNotReady: 1 instance not at a turn boundary",
        failures_by_code=() if published else (("SnapshotNotReady", 1),),
    )


def restore_record(
    snapshot: str | None = "rollouts-step0000000003-0123456789ab", *, at: float = T0 + 10
) -> RestoreTelemetry:
    landed = snapshot is not None
    return RestoreTelemetry(
        outcome=RestoreOutcome.RESTORED if snapshot else RestoreOutcome.FRESH,
        started_at=at,
        ended_at=at + 1.5,
        snapshot=snapshot,
        phases=RestorePhases(0.2, 0.9, 0.1, 0.3),
        considered=2,
        refused=1,
        continued=2 if landed else 0,
        restarted=1 if landed else 0,
        cleared_rows=3,
        instance_count=2,
        instance_latency=LatencySummary(2, 0.4, 0.9, 0.9, "math/replica-0"),
        continued_rollouts=(
            ContinuedRollout("task-1", 2, "math/replica-0"),
            ContinuedRollout("task-4", 1, "math/replica-1"),
        )
        if landed
        else (),
        restarted_rollouts=("task-9",) if landed else (),
    )
