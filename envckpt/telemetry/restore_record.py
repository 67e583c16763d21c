"""The typed record of one restore at startup: restored, fresh, or failed.

Built by the restorer when its restore ends (``Restorer.restore``) from
monotonic stamps around its steps and the facade's per-instance restore
latencies::

    record = report.telemetry               # RestoreTelemetry
    report.metrics                          # restore_* scalars (names.RESTORE_METRICS)

Phases (seconds): ``check`` (every trainer-side file of the snapshots
considered, refused ones included), ``environment`` (every Gym instance
restored), ``ledger`` (the ledger continues the restored rollouts, orphan
rows cleared) and ``resume`` (every instance resumed). The rollouts it
continued and restarted are kept by id, up to ``KEPT_ROLLOUTS`` of each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from envckpt.telemetry import fields, names
from envckpt.telemetry.latency import LatencySummary
from envckpt.telemetry.phases import PhaseSeconds

RESTORE_KIND = "restore"
# Rollouts a record names one by one (the counts are always whole).
KEPT_ROLLOUTS = 1000


class RestoreOutcome(StrEnum):
    RESTORED = "restored"
    FRESH = "fresh"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class RestorePhases(PhaseSeconds):
    """Seconds in each step of one restore (0.0: not reached)."""

    check: float = 0.0
    environment: float = 0.0
    ledger: float = 0.0
    resume: float = 0.0


@dataclass(frozen=True, slots=True)
class ContinuedRollout:
    """One rollout a restore continued: as attempt ``attempt`` on ``instance_id``."""

    rollout_id: str
    attempt: int
    instance_id: str


@dataclass(frozen=True, slots=True)
class RestoreTelemetry:
    """One restore: which snapshot, how long each step took, what continued or restarted."""

    outcome: RestoreOutcome
    started_at: float
    ended_at: float
    snapshot: str | None = None
    phases: RestorePhases = field(default_factory=RestorePhases)
    considered: int = 0
    refused: int = 0
    continued: int = 0
    restarted: int = 0
    cleared_rows: int = 0
    instance_count: int = 0
    instance_latency: LatencySummary = field(default_factory=LatencySummary)
    continued_rollouts: tuple[ContinuedRollout, ...] = ()
    restarted_rollouts: tuple[str, ...] = ()
    failure: str = ""
    failures_by_code: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", RestoreOutcome(self.outcome))

    @property
    def seconds(self) -> float:
        return max(0.0, self.ended_at - self.started_at)

    def metrics(self) -> dict[str, float]:
        """The scalar figures under their stable names (``names.RESTORE_METRICS``)."""
        phases = dict(self.phases.items())
        values = {
            names.RESTORE_SECONDS: self.seconds,
            names.RESTORE_CHECK_SECONDS: phases["check"],
            names.RESTORE_ENVIRONMENT_SECONDS: phases["environment"],
            names.RESTORE_LEDGER_SECONDS: phases["ledger"],
            names.RESTORE_RESUME_SECONDS: phases["resume"],
            names.RESTORE_CONTINUED: self.continued,
            names.RESTORE_RESTARTED: self.restarted,
            names.RESTORE_REFUSED: self.refused,
            names.RESTORE_CLEARED_ROWS: self.cleared_rows,
            names.RESTORE_INSTANCES: self.instance_count,
            names.RESTORE_INSTANCE_P50: self.instance_latency.p50,
            names.RESTORE_INSTANCE_MAX: self.instance_latency.max,
        }
        return {name: float(value) for name, value in values.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": RESTORE_KIND,
            "outcome": str(self.outcome),
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "snapshot": self.snapshot,
            "phases": self.phases.to_json(),
            "considered": self.considered,
            "refused": self.refused,
            "continued": self.continued,
            "restarted": self.restarted,
            "cleared_rows": self.cleared_rows,
            "instance_count": self.instance_count,
            "instance_latency": self.instance_latency.to_json(),
            "continued_rollouts": [
                [c.rollout_id, c.attempt, c.instance_id] for c in self.continued_rollouts
            ],
            "restarted_rollouts": list(self.restarted_rollouts),
            "failure": self.failure,
            "failures_by_code": dict(self.failures_by_code),
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RestoreTelemetry:
        """The record of ``to_json``; TypeError, ValueError or KeyError naming what is wrong."""
        if body.get("kind") != RESTORE_KIND:
            raise ValueError(f"not a restore record (kind {body.get('kind')!r})")
        return cls(
            outcome=RestoreOutcome(body["outcome"]),
            started_at=fields.timestamp(body["started_at"], "started_at"),
            ended_at=fields.timestamp(body["ended_at"], "ended_at"),
            snapshot=fields.optional_string(body.get("snapshot"), "snapshot"),
            phases=RestorePhases.from_json(body.get("phases", {})),
            considered=fields.count(body.get("considered", 0), "considered"),
            refused=fields.count(body.get("refused", 0), "refused"),
            continued=fields.count(body.get("continued", 0), "continued"),
            restarted=fields.count(body.get("restarted", 0), "restarted"),
            cleared_rows=fields.count(body.get("cleared_rows", 0), "cleared_rows"),
            instance_count=fields.count(body.get("instance_count", 0), "instance_count"),
            instance_latency=LatencySummary.from_json(body.get("instance_latency", {})),
            continued_rollouts=tuple(
                _continued(item)
                for item in fields.items(body.get("continued_rollouts", []), "continued_rollouts")
            ),
            restarted_rollouts=tuple(
                fields.string(item, "restarted_rollouts")
                for item in fields.items(body.get("restarted_rollouts", []), "restarted_rollouts")
            ),
            failure=fields.string(body.get("failure", ""), "failure", empty=True),
            failures_by_code=fields.counts(body.get("failures_by_code", {}), "failures_by_code"),
        )


def _continued(item: object) -> ContinuedRollout:
    if not isinstance(item, list) or len(item) != 3:
        raise TypeError(f"a continued rollout is [rollout_id, attempt, instance_id], got {item!r}")
    rollout_id, attempt, instance_id = item
    return ContinuedRollout(
        fields.string(rollout_id, "rollout_id"),
        fields.count(attempt, "attempt"),
        fields.string(instance_id, "instance_id"),
    )
