"""Tests for envckpt.trainer.job: the rollout loop, its staging recorder and its snapshots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.sim.gym import AGENT_SERVER
from envckpt.trainer.job import RolloutTask, StagingRecorder
from envckpt.trainer.ledger import LedgerStatus
from envckpt.trainer.results import RESULTS_SIDECAR, ResultStore
from envckpt.trainer.snapshot_manifest import verify_snapshot
from envckpt.trainer.snapshotter import SIDECAR_DIR

from helpers.snapshot_rig import (
    GymBackend,
    Rig,
    assert_finished_correctly,
    dispatched_r1,
    mid_flight,
    running,
    wait_until,
)

Ep = EnvironmentEpisode


class RecordingBackend(GymBackend):
    """Records every dispatch and counts concurrent runs per instance."""

    def __init__(self, rig: Rig) -> None:
        super().__init__(rig.gyms)
        self.calls: list[tuple[str, EnvironmentEpisode]] = []
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    async def run(
        self, instance_id: str, episode: EnvironmentEpisode, task: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.calls.append((instance_id, episode))
        self.running[instance_id] = self.running.get(instance_id, 0) + 1
        self.peak[instance_id] = max(self.peak.get(instance_id, 0), self.running[instance_id])
        try:
            return await super().run(instance_id, episode, task)
        finally:
            self.running[instance_id] -= 1


def deadline() -> float:
    return time.time() + 10


async def test_every_task_finishes_once_with_its_transcript(rig: Rig) -> None:
    """The job seals every rollout with the transcript of an uninterrupted run."""
    tasks = rig.tasks(6, turns=4)
    report = await rig.job(tasks).run()
    assert report.finished == 6 and report.restarted_attempts == 0
    assert report.snapshots == [] and report.snapshot_failures == []
    assert_finished_correctly(rig, tasks)
    for task in tasks:
        entry = rig.ledger.entry(task.rollout_id)
        result = rig.results.get(task.rollout_id)
        assert result is not None
        assert entry.status is LedgerStatus.SEALED and entry.attempt == 0
        assert entry.instance_id == task.instance_id
        assert result["resumed_from_turn"] == 0
        # Every token row the model staged is in the data plane and owned by the ledger.
        assert set(entry.staging_keys) == set(result["staging_keys"])
        assert len(entry.staging_keys) == task.task["turns"]
        assert set(entry.staging_keys) <= rig.plane.keys()


async def test_progress_events_follow_each_rollout(rig: Rig) -> None:
    """on_progress hears dispatched then sealed for every rollout."""
    events: list[tuple[str, str]] = []
    job = rig.job(
        rig.tasks(2, turns=2),
        on_progress=lambda event, fields: events.append((event, fields["rollout_id"])),
    )
    await job.run()
    for rollout_id in ("r0", "r1"):
        mine = [event for event, rid in events if rid == rollout_id]
        assert mine == ["dispatched", "sealed"]


async def test_restored_rollouts_are_dispatched_first_to_their_instance(tmp_path: Path) -> None:
    """After a restore the continued rollouts go out before new work, each to its own instance."""
    first = Rig(tmp_path).fresh()
    tasks = first.tasks(8)
    async with running(first.job(tasks, max_in_flight_per_instance=2)):
        await mid_flight(first, per_instance=2)
        snapshot = await first.snapshotter.take()
    await first.crash()

    second = Rig(tmp_path)
    report = await second.restore()
    try:
        assert report.path == snapshot.path and report.plan is not None
        continued = report.plan.continued
        assert len(continued) == snapshot.exported_episodes == 4
        backend = RecordingBackend(second)
        job = second.job(tasks, backend=backend, max_in_flight_per_instance=2)
        done = await job.run()
        assert backend.calls[: len(continued)] == [(e.instance_id, e.episode) for e in continued]
        # Rollouts sealed before the snapshot came back with its results; none ran again.
        ran = {episode.rollout_id for _, episode in backend.calls}
        kept = {
            rollout_id
            for rollout_id, _ in ResultStore.from_bytes(
                (snapshot.path / SIDECAR_DIR / RESULTS_SIDECAR).read_bytes()
            ).items()
        }
        assert not ran & kept
        assert ran | kept == {task.rollout_id for task in tasks}
        assert done.finished == len(ran)
        assert_finished_correctly(second, tasks)
        for entry in continued:
            result = second.results.get(entry.rollout_id)
            assert result is not None
            assert result["episode"] == entry.episode.to_wire()
            assert result["resumed_from_turn"] > 0
    finally:
        second.plane.close()


async def test_abandoned_rollouts_restart_from_their_task(tmp_path: Path) -> None:
    """Rollouts a snapshot could only restart are re-minted from their task after a restore."""
    first = Rig(tmp_path, resources_mode="restart_only").fresh()
    tasks = first.tasks(4)
    async with running(first.job(tasks)):
        await mid_flight(first)
        snapshot = await first.snapshotter.take()
    await first.crash()

    second = Rig(tmp_path, resources_mode="restart_only")
    report = await second.restore()
    try:
        assert report.plan is not None and report.plan.continued == ()
        abandoned = {e.rollout_id: e for e in report.plan.abandoned}
        assert len(abandoned) == snapshot.restarted_rollouts > 0
        done = await second.job(tasks).run()
        assert done.restarted_attempts == len(abandoned)
        assert_finished_correctly(second, tasks)
        for rollout_id, entry in abandoned.items():
            result = second.results.get(rollout_id)
            assert result is not None
            assert result["resumed_from_turn"] == 0
            assert result["episode"]["attempt"] == entry.attempt + 1
    finally:
        second.plane.close()


async def test_a_stale_attempt_is_reminted_and_the_rollout_still_finishes(rig: Rig) -> None:
    """Retiring a running attempt on its instance makes the job send attempt + 1, which finishes."""
    tasks = rig.tasks(2)
    victim = tasks[0]
    gym = rig.gyms[victim.instance_id]
    async with running(rig.job(tasks)) as job_task:
        await wait_until(lambda: len(gym.agent.sessions().get("r0", {}).get("turns", [])) >= 2)
        participants = await gym.coordinator.discover()
        await gym.coordinator.retire(participants, "rt-1", [Ep("r0", 0)], deadline_ts=deadline())
        report = await job_task
    assert report.restarted_attempts == 1 and report.finished == 2
    assert_finished_correctly(rig, tasks)
    result = rig.results.get("r0")
    assert result is not None
    assert result["episode"] == Ep("r0", 1).to_wire() and result["resumed_from_turn"] == 0
    entry = rig.ledger.entry("r0")
    assert entry.attempt == 1 and entry.status is LedgerStatus.SEALED
    # The refused attempt is left for the next snapshot to retire everywhere.
    assert rig.ledger.dropped_attempts(victim.instance_id) == (Ep("r0", 0),)
    await rig.snapshotter.take()
    assert rig.ledger.dropped_attempts(victim.instance_id) == ()


async def test_other_participant_errors_end_the_job(rig: Rig) -> None:
    """A refusal other than stale_attempt is not retried: the job raises it."""

    class Refusing(GymBackend):
        async def run(self, instance_id: str, episode: Ep, task: Any) -> dict[str, Any]:
            raise ParticipantError("invalid_request", "the task is malformed")

    with pytest.raises(ParticipantError) as caught:
        await rig.job(rig.tasks(1), backend=Refusing(rig.gyms)).run()
    assert caught.value.code == "invalid_request"
    assert rig.ledger.entry("r0").status is LedgerStatus.DISPATCHED


async def test_the_per_instance_in_flight_limit_is_respected(rig: Rig) -> None:
    """No instance ever runs more rollouts at once than max_in_flight_per_instance."""
    backend = RecordingBackend(rig)
    tasks = rig.tasks(10, turns=3)
    report = await rig.job(tasks, backend=backend, max_in_flight_per_instance=2).run()
    assert report.finished == 10
    assert backend.peak == {instance_id: 2 for instance_id in rig.ids}
    assert_finished_correctly(rig, tasks)


async def test_snapshots_are_taken_periodically_while_the_job_runs(rig: Rig) -> None:
    """With snapshot_every the job publishes snapshots during the run and stops at its end."""
    tasks = rig.tasks(4)
    report = await rig.job(tasks, max_in_flight_per_instance=1).run(snapshot_every=0.15)
    assert report.snapshots, "no snapshot was taken during the run"
    assert report.snapshots == rig.snapshotter.history
    # A snapshot still running when the last rollout seals is cancelled, possibly after it
    # published; so LATEST may name one snapshot newer than the last one reported.
    verify_snapshot(report.snapshots[-1].path)
    published = [path.name for path in rig.snapshotter.layout.published()]
    assert report.snapshots[-1].checkpoint_id in published[:2]
    assert any(s.exported_episodes > 0 for s in report.snapshots)
    assert_finished_correctly(rig, tasks)
    taken = len(rig.snapshotter.history)
    await asyncio.sleep(0.3)
    assert len(rig.snapshotter.history) == taken, "snapshots went on after the job ended"


async def test_a_retryable_snapshot_failure_is_recorded_and_the_run_goes_on(rig: Rig) -> None:
    """snapshot_once records a retryable failure and returns None; the next one succeeds."""
    rig.gyms[rig.ids[0]].faults.add("crash_before_publish", server=AGENT_SERVER)
    tasks = rig.tasks(2)
    job = rig.job(tasks)
    async with running(job) as job_task:
        await mid_flight(rig)
        assert await job.snapshot_once() is None
        assert len(job.report.snapshot_failures) == 1
        assert "GymCheckpointUnavailable" in job.report.snapshot_failures[0]
        assert await job.snapshot_once() is not None
        await job_task
    assert_finished_correctly(rig, tasks)


async def test_a_rollout_with_a_result_is_not_run_again(rig: Rig) -> None:
    """Rollouts that already have a result are skipped, so none finishes twice."""
    backend = RecordingBackend(rig)
    tasks = rig.tasks(3, turns=2)
    async with rig.barrier.mutation() as cut:
        rig.results.record(cut, "r1", {"transcript": ["kept from before the crash"]})
    report = await rig.job(tasks, backend=backend).run()
    assert report.finished == 2
    assert {episode.rollout_id for _, episode in backend.calls} == {"r0", "r2"}
    assert rig.results.get("r1") == {"transcript": ["kept from before the crash"]}
    assert "r1" not in rig.ledger


async def test_the_result_store_refuses_a_second_result_for_a_rollout(rig: Rig) -> None:
    """If the ledger still sends a rollout that has a result, sealing it again is refused."""
    tasks = rig.tasks(1, turns=2)
    async with rig.barrier.mutation() as cut:
        rig.results.record(cut, "r0", {"transcript": ["first"]})
        rig.ledger.reserve(cut, "r0", tasks[0].instance_id)
    with pytest.raises(ValueError, match="finished twice"):
        await rig.job(tasks).run()
    assert rig.results.get("r0") == {"transcript": ["first"]}
    assert rig.ledger.entry("r0").status is LedgerStatus.DISPATCHED


async def test_the_staging_recorder_writes_rows_and_refuses_stale_attempts(
    tmp_path: Path,
) -> None:
    """A staged row lands in the data plane and the ledger; a stale attempt's row is refused."""
    async with dispatched_r1(tmp_path / "live.sqlite") as (barrier, plane, ledger):
        recorder = StagingRecorder(barrier=barrier, ledger=ledger, data_plane=plane)
        await recorder.stage("r1", "r1/t0", "tokens of turn 0")
        row = plane.get("r1/t0")
        assert row is not None
        assert (row.capture_key, row.payload) == ("r1", b"tokens of turn 0")
        assert ledger.entry("r1").staging_keys == ("r1/t0",)

        with pytest.raises(ParticipantError) as caught:
            await recorder.stage("r1-a1", "r1/t1", "from an attempt the ledger never sent")
        assert caught.value.code == "stale_attempt"
        async with barrier.mutation() as cut:
            ledger.fail(cut, "r1")
            ledger.mint_next_attempt(cut, "r1")
        with pytest.raises(ParticipantError) as caught:
            await recorder.stage("r1", "r1/t1", "from the replaced attempt")
        assert caught.value.code == "stale_attempt"
        assert plane.keys() == {"r1/t0"}
        assert ledger.entry("r1").staging_keys == ()
        await recorder.stage("r1-a1", "r1-a1/t0", "the new attempt")
        assert ledger.entry("r1").staging_keys == ("r1-a1/t0",)
        assert barrier.active_mutations == 0


async def test_the_staging_recorder_waits_for_an_open_checkpoint_section(tmp_path: Path) -> None:
    """A row staged while a checkpoint cut is open lands only after the section ends."""
    async with dispatched_r1(tmp_path / "live.sqlite") as (barrier, plane, ledger):
        recorder = StagingRecorder(barrier=barrier, ledger=ledger, data_plane=plane)
        async with barrier.checkpoint():
            staged = asyncio.create_task(recorder.stage("r1", "r1/t0", "tokens"))
            await asyncio.sleep(0.02)
            assert not staged.done() and plane.keys() == frozenset()
        await staged
        assert plane.keys() == {"r1/t0"}


def test_rollout_tasks_are_frozen_values() -> None:
    """A RolloutTask cannot be changed after it is made."""
    task = RolloutTask("r1", "shard/replica-0", {"prompt": "p", "turns": 2})
    with pytest.raises(AttributeError):
        task.rollout_id = "r2"  # type: ignore[misc]
