"""Tests for envckpt.telemetry.environment: every instance in brief, the slowest in detail."""

from __future__ import annotations

from dataclasses import dataclass, field

from envckpt.telemetry.environment import environment_telemetry


@dataclass
class Prepared:
    participant_seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class Committed:
    participant_seconds: dict[str, float] = field(default_factory=dict)
    participant_records: dict[str, int] = field(default_factory=dict)


def test_only_the_slowest_instances_get_detail_but_all_count() -> None:
    """Five instances, limit 2: the two that held longest are detailed; summaries see five."""
    prepare = {f"s/replica-{i}": i / 10 for i in range(5)}
    commit = dict.fromkeys(prepare, 0.05)
    committed = {iid: Committed({"agent": 0.05}, {"agent": 2, "model": 1}) for iid in prepare}
    env = environment_telemetry(
        prepare_seconds=prepare,
        commit_seconds=commit,
        prepared={iid: Prepared({"agent": seconds}) for iid, seconds in prepare.items()},
        committed=committed,
        exported=dict.fromkeys(prepare, 2),
        restarts={"s/replica-4": 1},
        limit=2,
    )
    assert env.instance_count == 5
    assert [i.instance_id for i in env.instances] == ["s/replica-4", "s/replica-3"]
    assert env.prepare_latency.count == 5 and env.prepare_latency.slowest == "s/replica-4"
    assert env.records_written == 15
    slowest = env.instances[0]
    assert (slowest.exported, slowest.restarts, slowest.records) == (2, 1, 3)
    by_server = {p.server: p for p in slowest.participants}
    assert by_server["agent"].prepare_seconds == 0.4
    assert by_server["agent"].commit_seconds == 0.05
    # The model was not timed (no prepare stamp, no commit stamp) but wrote a record.
    assert (by_server["model"].prepare_seconds, by_server["model"].records) == (None, 1)


def test_no_instances_make_an_empty_environment() -> None:
    """Nothing stamped: zero instances, empty summaries."""
    env = environment_telemetry(
        prepare_seconds={}, commit_seconds={}, prepared={}, committed={}, exported={}, restarts={}
    )
    assert (env.instance_count, env.instances, env.records_written) == (0, (), 0)
