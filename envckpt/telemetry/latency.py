"""Who held the pause: per-instance and per-participant latencies, and their spread.

The facade stamps each instance's prepare and commit with the monotonic
clock; the coordinator stamps each participant's call the same way (no log
line per call). A snapshot over many instances keeps the detail of only the
slowest ones, and a ``LatencySummary`` of all of them::

    summary = LatencySummary.of({"math/replica-0": 0.12, "math/replica-1": 0.40})
    summary.max, summary.slowest          # 0.40, "math/replica-1"
    slowest_first(instances, limit=64)    # the detail a record keeps
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from envckpt.telemetry import fields

# Instances whose full detail a record keeps (the slowest); the rest count in the summary.
DETAILED_INSTANCES = 64


@dataclass(frozen=True, slots=True)
class ParticipantTelemetry:
    """One participant server of one instance: its prepare and commit call, and its records.

    A latency is None when it was not measured (the participant was not
    contacted, or the coordination in use does not stamp calls).
    """

    server: str
    prepare_seconds: float | None = None
    commit_seconds: float | None = None
    records: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # the wire names are the field names

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ParticipantTelemetry:
        return cls(
            server=fields.string(body["server"], "server"),
            prepare_seconds=fields.optional_seconds(body.get("prepare_seconds"), "prepare_seconds"),
            commit_seconds=fields.optional_seconds(body.get("commit_seconds"), "commit_seconds"),
            records=fields.count(body.get("records", 0), "records"),
        )


@dataclass(frozen=True, slots=True)
class InstanceTelemetry:
    """One Gym instance's part of a snapshot: latencies, bytes, records, episodes."""

    instance_id: str
    prepare_seconds: float
    commit_seconds: float
    bytes: int = 0
    records: int = 0
    exported: int = 0
    restarts: int = 0
    participants: tuple[ParticipantTelemetry, ...] = ()

    @property
    def held_seconds(self) -> float:
        """How long this instance kept the snapshot waiting (prepare plus commit)."""
        return self.prepare_seconds + self.commit_seconds

    def to_json(self) -> dict[str, Any]:
        # The wire names are the field names; the participants travel as a JSON list.
        return {**asdict(self), "participants": [p.to_json() for p in self.participants]}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> InstanceTelemetry:
        return cls(
            instance_id=fields.string(body["instance_id"], "instance_id"),
            prepare_seconds=fields.seconds(body["prepare_seconds"], "prepare_seconds"),
            commit_seconds=fields.seconds(body["commit_seconds"], "commit_seconds"),
            bytes=fields.count(body.get("bytes", 0), "bytes"),
            records=fields.count(body.get("records", 0), "records"),
            exported=fields.count(body.get("exported", 0), "exported"),
            restarts=fields.count(body.get("restarts", 0), "restarts"),
            participants=tuple(
                ParticipantTelemetry.from_json(item)
                for item in fields.objects(body.get("participants", []), "participants")
            ),
        )


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """The spread of one latency over every instance (nearest-rank percentiles)."""

    count: int = 0
    p50: float = 0.0
    p90: float = 0.0
    max: float = 0.0
    slowest: str = ""

    @classmethod
    def of(cls, latencies: Mapping[str, float]) -> LatencySummary:
        """The summary of ``latencies`` (instance id -> seconds); empty gives zeros."""
        if not latencies:
            return cls()
        ordered = sorted(latencies.values())
        slowest = max(latencies, key=lambda key: (latencies[key], key))
        return cls(
            count=len(ordered),
            p50=_rank(ordered, 0.5),
            p90=_rank(ordered, 0.9),
            max=ordered[-1],
            slowest=slowest,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # the wire names are the field names

    @classmethod
    def from_json(cls, body: object) -> LatencySummary:
        if not isinstance(body, Mapping):
            raise TypeError(f"a latency summary must be an object, got {body!r}")
        return cls(
            count=fields.count(body.get("count", 0), "count"),
            p50=fields.seconds(body.get("p50", 0.0), "p50"),
            p90=fields.seconds(body.get("p90", 0.0), "p90"),
            max=fields.seconds(body.get("max", 0.0), "max"),
            slowest=fields.string(body.get("slowest", ""), "slowest", empty=True),
        )


def slowest_first(
    instances: Iterable[InstanceTelemetry], *, limit: int = DETAILED_INSTANCES
) -> tuple[InstanceTelemetry, ...]:
    """The ``limit`` instances that held the snapshot longest, slowest first."""
    ordered = sorted(instances, key=lambda i: (-i.held_seconds, i.instance_id))
    return tuple(ordered[:limit])


def _rank(ordered: list[float], fraction: float) -> float:
    index = max(0, math.ceil(fraction * len(ordered)) - 1)
    return ordered[index]
