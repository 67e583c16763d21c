"""The record of one snapshot, built by the snapshotter once the environment resumed.

The snapshotter stamps its phases in ``result.metrics`` as it goes (its
clock, a few subtractions: the pause pays for nothing more); when the
snapshot ends, published or failed, these functions turn the stamps, the
environment's per-instance latencies and the published files into one
``SnapshotTelemetry``::

    record = published_record(stamps, metrics=result.metrics, env_snapshot=env, files=files)
    record = failed_record(stamps, failed_at=now, phase="save", error=error)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from envckpt.gym.instance import GymCheckpointInstance
from envckpt.telemetry import names
from envckpt.telemetry.environment import EnvironmentTelemetry
from envckpt.telemetry.failures import failures_by_code
from envckpt.telemetry.snapshot_record import SnapshotOutcome, SnapshotPhases, SnapshotTelemetry


@dataclass(frozen=True, slots=True)
class SnapshotStamps:
    """Who and when: the snapshot's identity and the moments its pause began and ended."""

    checkpoint_id: str
    reason: str
    paused_at: float
    step: int | None = None
    policy_version: str | None = None


def published_record(
    stamps: SnapshotStamps,
    *,
    metrics: Mapping[str, float],
    env_snapshot: object,
    files: Mapping[str, tuple[str, int]],
    resume_started_at: float | None,
    resumed_at: float,
    resume_error: str = "",
) -> SnapshotTelemetry:
    """A published snapshot's record (``resume_error``: the resume after it failed)."""
    env = environment_of(env_snapshot)
    sizes = bytes_by_instance(files, [instance.instance_id for instance in env.instances])
    started = resumed_at if resume_started_at is None else resume_started_at
    return SnapshotTelemetry(
        checkpoint_id=stamps.checkpoint_id,
        outcome=SnapshotOutcome.PUBLISHED,
        started_at=stamps.paused_at,
        ended_at=resumed_at,
        paused_seconds=max(0.0, resumed_at - stamps.paused_at),
        reason=stamps.reason,
        step=stamps.step,
        policy_version=stamps.policy_version,
        phases=_phases(metrics, resume=max(0.0, resumed_at - started)),
        bytes=int(metrics.get(names.SNAPSHOT_BYTES, 0)),
        trainer_bytes=int(metrics.get(names.SNAPSHOT_TRAINER_BYTES, 0)),
        records_written=env.records_written,
        episodes_parked=int(metrics.get(names.SNAPSHOT_EPISODES_PARKED, 0)),
        episodes_restarted=int(metrics.get(names.SNAPSHOT_EPISODES_RESTARTED, 0)),
        staging_keys=int(metrics.get("env_staging_keys", 0)),
        instance_count=env.instance_count,
        instances=tuple(
            replace(instance, bytes=sizes.get(instance.instance_id, 0))
            for instance in env.instances
        ),
        prepare_latency=env.prepare_latency,
        commit_latency=env.commit_latency,
        resume_error=resume_error,
    )


def failed_record(
    stamps: SnapshotStamps,
    *,
    metrics: Mapping[str, float],
    failed_at: float,
    phase: str,
    error: BaseException,
) -> SnapshotTelemetry:
    """A snapshot that failed before publishing, in ``phase``."""
    return SnapshotTelemetry(
        checkpoint_id=stamps.checkpoint_id,
        outcome=SnapshotOutcome.FAILED,
        started_at=stamps.paused_at,
        ended_at=max(failed_at, stamps.paused_at),
        paused_seconds=max(0.0, failed_at - stamps.paused_at),
        reason=stamps.reason,
        step=stamps.step,
        policy_version=stamps.policy_version,
        phases=_phases(metrics, resume=0.0),
        failed_phase=phase,
        failure=f"{type(error).__name__}: {error}"[:2000],
        failures_by_code=failures_by_code(error),
    )


def environment_of(env_snapshot: object) -> EnvironmentTelemetry:
    """The environment's per-instance telemetry, if its backend keeps any (Gym's does)."""
    telemetry = getattr(env_snapshot, "telemetry", None)
    if not callable(telemetry):
        return EnvironmentTelemetry()
    found = telemetry()
    return found if isinstance(found, EnvironmentTelemetry) else EnvironmentTelemetry()


def bytes_by_instance(
    files: Mapping[str, tuple[str, int]], instance_ids: list[str]
) -> dict[str, int]:
    """Bytes each of ``instance_ids`` wrote into the snapshot, from its manifest's files."""
    prefixes = {
        GymCheckpointInstance.parse(iid).checkpoint_dir(Path()).as_posix() + "/": iid
        for iid in instance_ids
    }
    sizes = dict.fromkeys(instance_ids, 0)
    for name, (_, size) in files.items():
        # gym-instances/<shard>/replica-<i>/...: the first three parts name the instance.
        head = "/".join(name.split("/", 3)[:3]) + "/"
        owner = prefixes.get(head)
        if owner is not None:
            sizes[owner] += size
    return sizes


def _phases(metrics: Mapping[str, float], *, resume: float) -> SnapshotPhases:
    def seconds(name: str) -> float:
        return max(0.0, float(metrics.get(name, 0.0)))

    return SnapshotPhases(
        retire=seconds(names.SNAPSHOT_RETIRE_SECONDS),
        prepare=seconds(names.SNAPSHOT_PREPARE_SECONDS),
        commit=seconds(names.SNAPSHOT_COMMIT_SECONDS),
        cut_wait=seconds(names.SNAPSHOT_CUT_WAIT_SECONDS),
        cut=seconds(names.SNAPSHOT_CUT_SECONDS),
        publish=seconds(names.SNAPSHOT_PUBLISH_SECONDS),
        resume=resume,
    )
