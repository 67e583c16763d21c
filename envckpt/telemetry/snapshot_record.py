"""The typed record of one rollout snapshot, published or failed.

Built by the snapshotter when a snapshot ends (after the environment
resumed, so none of this costs pause time) from the figures its phases
stamped, the facade's per-instance latencies and the published manifest::

    record = SnapshotTelemetry(checkpoint_id=..., outcome=SnapshotOutcome.PUBLISHED, ...)
    record.metrics()                      # snapshot_* scalars under their stable names
    SnapshotTelemetry.from_json(record.to_json()) == record

Phases (seconds): ``retire``, ``prepare``, ``commit`` (the environment's
capture, from the facade), ``cut_wait`` and ``cut`` (waiting for, then
holding, the data-plane cut: the capture checked, trainer state written),
``publish`` (manifest and rename) and ``resume`` (from the start of the
environment's resume to its end). ``take`` resumes during ``cut``, so the
phases of one snapshot may overlap; ``paused_seconds`` is the pause itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from envckpt.telemetry import fields, names
from envckpt.telemetry.latency import InstanceTelemetry, LatencySummary
from envckpt.telemetry.phases import PhaseSeconds

SNAPSHOT_KIND = "snapshot"


class SnapshotOutcome(StrEnum):
    PUBLISHED = "published"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SnapshotPhases(PhaseSeconds):
    """Seconds spent in each phase of one snapshot (0.0: the phase was not reached)."""

    retire: float = 0.0
    prepare: float = 0.0
    commit: float = 0.0
    cut_wait: float = 0.0
    cut: float = 0.0
    publish: float = 0.0
    resume: float = 0.0


@dataclass(frozen=True, slots=True)
class SnapshotTelemetry:
    """One snapshot, published or failed: timing, size, episodes, who held it, failures."""

    checkpoint_id: str
    outcome: SnapshotOutcome
    started_at: float
    ended_at: float
    paused_seconds: float
    reason: str = ""
    step: int | None = None
    policy_version: str | None = None
    phases: SnapshotPhases = field(default_factory=SnapshotPhases)
    bytes: int = 0
    trainer_bytes: int = 0
    records_written: int = 0
    episodes_parked: int = 0
    episodes_restarted: int = 0
    staging_keys: int = 0
    instance_count: int = 0
    # The slowest instances' detail (at most ``latency.DETAILED_INSTANCES``), slowest first.
    instances: tuple[InstanceTelemetry, ...] = ()
    prepare_latency: LatencySummary = field(default_factory=LatencySummary)
    commit_latency: LatencySummary = field(default_factory=LatencySummary)
    # Failed snapshots: the phase it failed in, why, and the failures by protocol code.
    failed_phase: str = ""
    failure: str = ""
    failures_by_code: tuple[tuple[str, int], ...] = ()
    # Published, then leaving it failed: the resume, or the caller's block inside
    # ``snapshot()`` (the snapshot stands; the environment resumed by abort or lease).
    resume_error: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", SnapshotOutcome(self.outcome))

    @property
    def published(self) -> bool:
        return self.outcome is SnapshotOutcome.PUBLISHED

    def metrics(self) -> dict[str, float]:
        """The scalar figures under their stable names (``names.SNAPSHOT_METRICS``).

        The environment's own figures (``env_*``) come from its backend
        (``EnvironmentSnapshot.metrics``); the per-instance latencies only
        when the environment has instances.
        """
        phases = dict(self.phases.items())
        values = {
            names.SNAPSHOT_PAUSED_SECONDS: self.paused_seconds,
            names.SNAPSHOT_CUT_WAIT_SECONDS: phases["cut_wait"],
            names.SNAPSHOT_CUT_SECONDS: phases["cut"],
            names.SNAPSHOT_PUBLISH_SECONDS: phases["publish"],
            names.SNAPSHOT_RESUME_SECONDS: phases["resume"],
            names.SNAPSHOT_BYTES: self.bytes,
            names.SNAPSHOT_TRAINER_BYTES: self.trainer_bytes,
            names.SNAPSHOT_RECORDS_WRITTEN: self.records_written,
        }
        if self.instance_count:
            values |= {
                names.SNAPSHOT_INSTANCE_PREPARE_P50: self.prepare_latency.p50,
                names.SNAPSHOT_INSTANCE_PREPARE_P90: self.prepare_latency.p90,
                names.SNAPSHOT_INSTANCE_PREPARE_MAX: self.prepare_latency.max,
                names.SNAPSHOT_INSTANCE_COMMIT_P50: self.commit_latency.p50,
                names.SNAPSHOT_INSTANCE_COMMIT_P90: self.commit_latency.p90,
                names.SNAPSHOT_INSTANCE_COMMIT_MAX: self.commit_latency.max,
                names.SNAPSHOT_PARTICIPANT_PREPARE_MAX: _participant_max(self, "prepare_seconds"),
                names.SNAPSHOT_PARTICIPANT_COMMIT_MAX: _participant_max(self, "commit_seconds"),
            }
        return {name: float(value) for name, value in values.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": SNAPSHOT_KIND,
            "checkpoint_id": self.checkpoint_id,
            "outcome": str(self.outcome),
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "paused_seconds": self.paused_seconds,
            "reason": self.reason,
            "step": self.step,
            "policy_version": self.policy_version,
            "phases": self.phases.to_json(),
            "bytes": self.bytes,
            "trainer_bytes": self.trainer_bytes,
            "records_written": self.records_written,
            "episodes_parked": self.episodes_parked,
            "episodes_restarted": self.episodes_restarted,
            "staging_keys": self.staging_keys,
            "instance_count": self.instance_count,
            "instances": [instance.to_json() for instance in self.instances],
            "prepare_latency": self.prepare_latency.to_json(),
            "commit_latency": self.commit_latency.to_json(),
            "failed_phase": self.failed_phase,
            "failure": self.failure,
            "failures_by_code": dict(self.failures_by_code),
            "resume_error": self.resume_error,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> SnapshotTelemetry:
        """The record of ``to_json``; TypeError, ValueError or KeyError naming what is wrong."""
        if body.get("kind") != SNAPSHOT_KIND:
            raise ValueError(f"not a snapshot record (kind {body.get('kind')!r})")
        return cls(
            checkpoint_id=fields.string(body["checkpoint_id"], "checkpoint_id"),
            outcome=SnapshotOutcome(body["outcome"]),
            started_at=fields.timestamp(body["started_at"], "started_at"),
            ended_at=fields.timestamp(body["ended_at"], "ended_at"),
            paused_seconds=fields.seconds(body["paused_seconds"], "paused_seconds"),
            reason=fields.string(body.get("reason", ""), "reason", empty=True),
            step=fields.optional_count(body.get("step"), "step"),
            policy_version=fields.optional_string(body.get("policy_version"), "policy_version"),
            phases=SnapshotPhases.from_json(body.get("phases", {})),
            bytes=fields.count(body.get("bytes", 0), "bytes"),
            trainer_bytes=fields.count(body.get("trainer_bytes", 0), "trainer_bytes"),
            records_written=fields.count(body.get("records_written", 0), "records_written"),
            episodes_parked=fields.count(body.get("episodes_parked", 0), "episodes_parked"),
            episodes_restarted=fields.count(
                body.get("episodes_restarted", 0), "episodes_restarted"
            ),
            staging_keys=fields.count(body.get("staging_keys", 0), "staging_keys"),
            instance_count=fields.count(body.get("instance_count", 0), "instance_count"),
            instances=tuple(
                InstanceTelemetry.from_json(item)
                for item in fields.objects(body.get("instances", []), "instances")
            ),
            prepare_latency=LatencySummary.from_json(body.get("prepare_latency", {})),
            commit_latency=LatencySummary.from_json(body.get("commit_latency", {})),
            failed_phase=fields.string(body.get("failed_phase", ""), "failed_phase", empty=True),
            failure=fields.string(body.get("failure", ""), "failure", empty=True),
            failures_by_code=fields.counts(body.get("failures_by_code", {}), "failures_by_code"),
            resume_error=fields.string(body.get("resume_error", ""), "resume_error", empty=True),
        )


def _participant_max(record: SnapshotTelemetry, attribute: str) -> float:
    """The slowest participant call of the instances the record keeps in detail."""
    values = [
        value
        for instance in record.instances
        for participant in instance.participants
        if (value := getattr(participant, attribute)) is not None
    ]
    return max(values, default=0.0)
