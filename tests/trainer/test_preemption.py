"""Tests for envckpt.trainer.preemption: SIGTERM's final snapshot, its abort, SIGUSR1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.checkpoint import CheckpointTimeouts
from envckpt.trainer.job_errors import JobExit
from envckpt.trainer.preemption import JobSignals
from envckpt.trainer.snapshotter import SnapshotResult

from helpers.snapshot_rig import Rig, assert_finished_correctly, mid_flight, wait_until


def uncredited_effects(root: Path, results: dict[str, dict[str, Any]]) -> int:
    """Tool effects in the audit log that no final result kept: turns done and thrown away."""
    kept = {turn["application"] for r in results.values() for turn in r["turns"]}
    lines = (root / "audit.jsonl").read_text().splitlines()
    return sum(1 for line in lines if line.strip() and json.loads(line)["application"] not in kept)


async def test_a_preempted_job_takes_a_final_snapshot_and_no_turn_is_redone(
    tmp_path: Path,
) -> None:
    """SIGTERM's final snapshot stops the rollouts while paused; the restart loses no turn."""
    rig = Rig(tmp_path).fresh()
    tasks = rig.tasks(4)
    signals = JobSignals(grace_seconds=10.0)
    paused_phases: list[set[str]] = []
    held_at_snapshot: dict[str, int] = {}

    async def on_final_snapshot(result: SnapshotResult) -> None:
        paused_phases.append(rig.phases())
        held_at_snapshot.update(rig.turns_held())

    job = rig.job(tasks, signals=signals, on_final_snapshot=on_final_snapshot)
    running = asyncio.create_task(job.run(snapshot_every=5.0))
    await mid_flight(rig)
    signals.preempt()
    report = await asyncio.wait_for(running, 10.0)
    assert report.preempted and report.exit_code is JobExit.PREEMPTED
    final = report.final_snapshot
    assert final is not None and report.final_snapshot_aborted == ""
    assert rig.layout.newest() == final.checkpoint_id
    assert paused_phases == [{"committed"}]
    assert final.exported_episodes > 0 and report.finished < len(tasks)
    await asyncio.sleep(0.1)
    assert rig.turns_held() == held_at_snapshot, "a turn ran after the final snapshot"
    await rig.crash()

    second = Rig(tmp_path)
    restored = await second.restore()
    try:
        assert restored.path == final.path
        await second.job(tasks).run()
        assert_finished_correctly(second, tasks)
        results = {rid: dict(result) for rid, result in second.results.items()}
        resumed = {rid for rid, r in results.items() if r["resumed_from_turn"] > 0}
        assert resumed, "nothing continued from the final snapshot"
        assert uncredited_effects(tmp_path, results) == 0
    finally:
        second.plane.close()


@contextlib.asynccontextmanager
async def prepare_blocked(rig: Rig) -> AsyncIterator[None]:
    """An admitted step that never reaches a boundary: a prepare waits for it."""
    rig.facade.timeouts = CheckpointTimeouts(prepare_seconds=30.0, commit_seconds=30.0)
    async with rig.gyms[rig.ids[0]].agent.core.admit(EnvironmentEpisode("held", 0)):
        yield


@pytest.mark.parametrize("cut_short_by", ["second-signal", "deadline"])
async def test_a_final_snapshot_cut_short_publishes_nothing_and_the_job_still_ends(
    tmp_path: Path, cut_short_by: str
) -> None:
    """A second SIGTERM or the grace deadline aborts the final snapshot cleanly."""
    rig = Rig(tmp_path).fresh()
    try:
        first = await rig.snapshotter.take()
        grace = 1.5 if cut_short_by == "deadline" else 30.0
        signals = JobSignals(grace_seconds=grace)
        job = rig.job(rig.tasks(4), signals=signals)
        async with prepare_blocked(rig):
            running = asyncio.create_task(job.run())
            await mid_flight(rig)
            signals.preempt()
            await wait_until(lambda: rig.phases() != {"idle"})
            if cut_short_by == "second-signal":
                signals.preempt()
            report = await asyncio.wait_for(running, 10.0)
        assert report.preempted and report.final_snapshot is None
        assert report.exit_code is JobExit.PREEMPTED_UNSAVED
        expected = "a second preemption signal" if cut_short_by == "second-signal" else "deadline"
        assert expected in report.final_snapshot_aborted
        assert [p.name for p in rig.layout.published()] == [first.checkpoint_id]
        assert list(rig.layout.temporary.iterdir()) == []
        assert rig.phases() == {"idle"}
    finally:
        rig.plane.close()


async def test_real_signals_snapshot_now_and_preempt(tmp_path: Path) -> None:
    """SIGUSR1 takes a snapshot and the job runs on; SIGTERM preempts it."""
    rig = Rig(tmp_path).fresh()
    try:
        signals = JobSignals(grace_seconds=10.0)
        signals.install()
        try:
            job = rig.job(rig.tasks(4), signals=signals)
            running = asyncio.create_task(job.run())
            await mid_flight(rig)
            os.kill(os.getpid(), signal.SIGUSR1)
            await wait_until(lambda: len(job.report.snapshots) == 1)
            assert not running.done()
            os.kill(os.getpid(), signal.SIGTERM)
            report = await asyncio.wait_for(running, 10.0)
        finally:
            signals.uninstall()
        assert report.exit_code is JobExit.PREEMPTED
        assert report.final_snapshot is not None
        assert [s.checkpoint_id for s in rig.snapshotter.history] == [
            job.report.snapshots[0].checkpoint_id,
            report.final_snapshot.checkpoint_id,
        ]
    finally:
        rig.plane.close()


def test_a_grace_period_must_be_positive() -> None:
    """A zero grace period could never hold a final snapshot."""
    with pytest.raises(ValueError):
        JobSignals(grace_seconds=0.0)


async def test_installing_again_takes_the_signals_back_from_a_foreign_handler() -> None:
    """A library that set its own SIGTERM handler (ray.init does) is overridden by install()."""
    signals = JobSignals(grace_seconds=5.0)
    requests: list[str] = []
    signals.on_snapshot_request(lambda: requests.append("now"))
    original = signal.getsignal(signal.SIGUSR1)
    signals.install()
    signal.signal(signal.SIGUSR1, lambda signum, frame: requests.append("foreign"))
    try:
        signals.install()
        os.kill(os.getpid(), signal.SIGUSR1)
        await wait_until(lambda: bool(requests))
        os.kill(os.getpid(), signal.SIGTERM)
        await wait_until(signals.preempted.is_set)
    finally:
        signals.uninstall()
        signal.signal(signal.SIGUSR1, original)
    assert requests == ["now"]
    assert signals.deadline_ts is not None
