"""The environment's part of one snapshot's record: every instance's latencies, in brief.

The facade keeps what its fan-out stamped (each instance's prepare and
commit seconds) and the summaries it already has; after the environment
resumed the snapshotter asks for this, so building it costs no pause time.
Only the slowest instances get full detail; every instance counts in the
summaries and the records total::

    env = environment_telemetry(prepare_seconds=..., commit_seconds=...,
                                prepared=summaries, committed=commits,
                                exported={"math/replica-0": 3}, restarts={})
    env.instances[0].instance_id          # the instance that held the snapshot longest
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from envckpt.telemetry.latency import (
    DETAILED_INSTANCES,
    InstanceTelemetry,
    LatencySummary,
    ParticipantTelemetry,
)


class PreparedInstance(Protocol):
    """What a prepare summary tells about its participants."""

    @property
    def participant_seconds(self) -> Mapping[str, float]: ...


class CommittedInstance(Protocol):
    """What a commit summary tells about its participants."""

    @property
    def participant_seconds(self) -> Mapping[str, float]: ...

    @property
    def participant_records(self) -> Mapping[str, int]: ...


@dataclass(frozen=True, slots=True)
class EnvironmentTelemetry:
    """Every instance's latency in brief, the slowest in detail, the records written."""

    instance_count: int = 0
    instances: tuple[InstanceTelemetry, ...] = ()
    prepare_latency: LatencySummary = field(default_factory=LatencySummary)
    commit_latency: LatencySummary = field(default_factory=LatencySummary)
    records_written: int = 0


def environment_telemetry(
    *,
    prepare_seconds: Mapping[str, float],
    commit_seconds: Mapping[str, float],
    prepared: Mapping[str, PreparedInstance],
    committed: Mapping[str, CommittedInstance],
    exported: Mapping[str, int],
    restarts: Mapping[str, int],
    limit: int = DETAILED_INSTANCES,
) -> EnvironmentTelemetry:
    """The record's environment part; detail for the ``limit`` slowest instances."""
    held = {
        iid: prepare_seconds.get(iid, 0.0) + commit_seconds.get(iid, 0.0)
        for iid in set(prepare_seconds) | set(commit_seconds)
    }
    slowest = heapq.nlargest(limit, held, key=lambda iid: (held[iid], iid))
    detailed = tuple(
        _instance(
            iid,
            prepare=prepare_seconds.get(iid, 0.0),
            commit=commit_seconds.get(iid, 0.0),
            prepared=prepared.get(iid),
            committed=committed.get(iid),
            exported=exported.get(iid, 0),
            restarts=restarts.get(iid, 0),
        )
        for iid in slowest
    )
    return EnvironmentTelemetry(
        instance_count=len(held),
        instances=detailed,
        prepare_latency=LatencySummary.of(prepare_seconds),
        commit_latency=LatencySummary.of(commit_seconds),
        records_written=sum(sum(c.participant_records.values()) for c in committed.values()),
    )


def _instance(
    instance_id: str,
    *,
    prepare: float,
    commit: float,
    prepared: PreparedInstance | None,
    committed: CommittedInstance | None,
    exported: int,
    restarts: int,
) -> InstanceTelemetry:
    prepare_of = {} if prepared is None else prepared.participant_seconds
    commit_of = {} if committed is None else committed.participant_seconds
    records_of = {} if committed is None else committed.participant_records
    servers = sorted(set(prepare_of) | set(commit_of) | set(records_of))
    participants = tuple(
        ParticipantTelemetry(
            server=server,
            prepare_seconds=prepare_of.get(server),
            commit_seconds=commit_of.get(server),
            records=records_of.get(server, 0),
        )
        for server in servers
    )
    return InstanceTelemetry(
        instance_id=instance_id,
        prepare_seconds=prepare,
        commit_seconds=commit,
        records=sum(p.records for p in participants),
        exported=exported,
        restarts=restarts,
        participants=participants,
    )
