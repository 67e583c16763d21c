"""Tests for envckpt.trainer.snapshot_telemetry: each real snapshot's record, as logged."""

from __future__ import annotations

import contextlib

import pytest

from envckpt.telemetry import names
from envckpt.telemetry.environment import EnvironmentTelemetry
from envckpt.telemetry.log import read_telemetry
from envckpt.telemetry.snapshot_record import SnapshotOutcome
from envckpt.trainer.snapshot_telemetry import (
    SnapshotStamps,
    bytes_by_instance,
    environment_of,
    failed_record,
    published_record,
)

from helpers.snapshot_rig import PARTICIPANTS, Rig, mid_flight, running

DOCUMENTED = {name for name, _, _ in names.SNAPSHOT_METRICS}


async def test_a_real_snapshot_s_record_names_who_held_it(rig: Rig) -> None:
    """Mid-flight over 2 instances: every documented metric, per-instance and per-participant
    latencies, records and bytes; the same record in telemetry.jsonl."""
    async with running(rig.job(rig.tasks(4))):
        await mid_flight(rig)
        result = await rig.snapshotter.take()
    assert set(result.metrics) == DOCUMENTED
    [record] = read_telemetry(rig.snapshot_root).snapshots
    assert record == rig.snapshotter.telemetry.last_snapshot
    assert record.published and record.checkpoint_id == result.checkpoint_id
    assert record.paused_seconds == result.metrics[names.SNAPSHOT_PAUSED_SECONDS]
    assert record.instance_count == 2 and {i.instance_id for i in record.instances} == set(rig.ids)
    for instance in record.instances:
        assert instance.prepare_seconds > 0 and instance.commit_seconds > 0
        assert {p.server for p in instance.participants} == {s for s, _ in PARTICIPANTS}
        assert all(p.prepare_seconds is not None for p in instance.participants)
        assert all(p.commit_seconds is not None for p in instance.participants)
        assert instance.records == sum(p.records for p in instance.participants) > 0
        assert instance.bytes > 0
    assert sum(i.bytes for i in record.instances) < record.bytes == result.metrics["snapshot_bytes"]
    assert record.records_written == sum(i.records for i in record.instances)
    assert record.episodes_parked == result.exported_episodes > 0
    assert record.prepare_latency.max == max(i.prepare_seconds for i in record.instances)
    phases = dict(record.phases.items())
    assert all(phases[p] > 0 for p in ("prepare", "commit", "cut", "publish", "resume"))


async def test_a_failed_snapshot_is_logged_with_its_phase_and_codes(rig: Rig) -> None:
    """A commit refused by a crashing agent: a failed record; the next published one counts it."""
    async with running(rig.job(rig.tasks(4))):
        await mid_flight(rig)
        rig.gyms[rig.ids[1]].faults.add("crash_before_publish", server="simple_agent", times=2)
        with contextlib.suppress(Exception):
            await rig.snapshotter.take()
        rig.gyms[rig.ids[1]].faults.clear()
        result = await rig.snapshotter.take()
    failed, published = read_telemetry(rig.snapshot_root).snapshots
    assert failed.outcome is SnapshotOutcome.FAILED and failed.failed_phase == "pause"
    assert failed.failure and failed.failures_by_code
    assert published.published
    assert result.metrics[names.SNAPSHOT_FAILURES_TOTAL] == 1.0


def test_bytes_by_instance_counts_only_each_instance_s_own_directory() -> None:
    """replica-1 does not take replica-10's files; trainer files belong to no instance."""
    files = {
        "gym-instances/s/replica-1/gym/agent/a/records-x.jsonl": ("d", 100),
        "gym-instances/s/replica-1/gym/agent/a/manifest.json": ("d", 20),
        "gym-instances/s/replica-10/gym/agent/a/records-y.jsonl": ("d", 7),
        "dataplane.sqlite": ("d", 5000),
    }
    assert bytes_by_instance(files, ["s/replica-1", "s/replica-10"]) == {
        "s/replica-1": 120,
        "s/replica-10": 7,
    }


def test_records_built_from_stamps_alone() -> None:
    """A backend without instances gives an empty environment part; a failure keeps its phase."""
    stamps = SnapshotStamps("rollouts-0123456789ab", reason="timer", paused_at=100.0, step=4)
    metrics = {"snapshot_bytes": 10.0, "snapshot_cut_seconds": 0.5, "env_prepare_seconds": 0.2}
    record = published_record(
        stamps,
        metrics=metrics,
        env_snapshot=None,
        files={},
        resume_started_at=100.8,
        resumed_at=101.0,
    )
    assert (record.paused_seconds, record.bytes, record.step) == (1.0, 10, 4)
    assert dict(record.phases.items())["resume"] == pytest.approx(0.2)
    assert dict(record.phases.items())["prepare"] == 0.2
    assert environment_of(object()) == EnvironmentTelemetry()
    failed = failed_record(
        stamps, metrics={}, failed_at=100.5, phase="save", error=OSError("disk full")
    )
    assert (failed.failed_phase, failed.failures_by_code) == ("save", (("OSError", 1),))
    assert failed.failure == "OSError: disk full" and failed.paused_seconds == 0.5
