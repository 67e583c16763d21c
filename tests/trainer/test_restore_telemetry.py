"""Tests for envckpt.trainer.restore_telemetry: each real restore's record, as logged."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from envckpt.machines.tables import LedgerStatus
from envckpt.telemetry import names
from envckpt.telemetry.log import read_telemetry
from envckpt.telemetry.restore_record import KEPT_ROLLOUTS, RestoreOutcome
from envckpt.trainer.job_errors import RestoreFailed
from envckpt.trainer.ledger_entry import LedgerEntry
from envckpt.trainer.restore_telemetry import RestoreClock
from envckpt.trainer.restorer import RestoreReport

from helpers.snapshot_rig import Rig, mid_flight, running


def release(report: RestoreReport) -> None:
    """Close what a restore opened: the live data plane, the root's lock."""
    report.data_plane.close()
    if report.lock is not None:
        report.lock.release()


async def _crashed(root: Path) -> str:
    rig = Rig(root).fresh()
    async with running(rig.job(rig.tasks(4))):
        await mid_flight(rig)
        result = await rig.snapshotter.take()
    await rig.crash()
    return result.checkpoint_id


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("crashed")
    return root, asyncio.run(_crashed(root))


@pytest.fixture
def run_dir(crashed: tuple[Path, str], tmp_path: Path) -> Path:
    shutil.copytree(crashed[0], tmp_path / "run")
    return tmp_path / "run"


async def test_a_real_restore_s_record_says_what_continued(
    crashed: tuple[Path, str], run_dir: Path
) -> None:
    """Fresh processes restore the snapshot: restored, each continued rollout by id, every
    step timed, every instance's restore latency, the documented metrics."""
    rig = Rig(run_dir)
    report = await rig.restore()
    try:
        record = report.telemetry
        assert record is not None and record.outcome is RestoreOutcome.RESTORED
        assert record.snapshot == crashed[1]
        assert report.plan is not None
        assert record.continued == len(report.plan.continued) > 0
        assert {(c.rollout_id, c.attempt, c.instance_id) for c in record.continued_rollouts} == {
            (e.rollout_id, e.attempt, e.instance_id) for e in report.plan.continued
        }
        assert record.instance_count == 2 and record.instance_latency.max > 0
        assert all(seconds > 0 for _, seconds in record.phases.items())
        assert set(report.metrics) == {name for name, _, _ in names.RESTORE_METRICS}
        assert read_telemetry(run_dir / "snap").restores == (record,)
    finally:
        release(report)


async def test_an_empty_root_is_a_fresh_start_record(tmp_path: Path) -> None:
    """No snapshot: a fresh record, nothing continued."""
    rig = Rig(tmp_path)
    report = await rig.restore()
    try:
        assert report.telemetry is not None
        assert report.telemetry.outcome is RestoreOutcome.FRESH
        assert report.metrics[names.RESTORE_CONTINUED] == 0.0
    finally:
        release(report)


async def test_a_failed_restore_is_logged_with_its_reason(run_dir: Path) -> None:
    """Gym processes that already restored refuse another: a failed record with the error."""
    rig = Rig(run_dir)
    report = await rig.restore()
    release(report)
    with pytest.raises(RestoreFailed):
        await rig.restorer().restore(data_plane_path=rig.live_path)
    first, second = read_telemetry(run_dir / "snap").restores
    assert first.outcome is RestoreOutcome.RESTORED
    assert second.outcome is RestoreOutcome.FAILED
    assert "IllegalTransition" in second.failure
    assert second.failures_by_code == (("IllegalTransition", 1),)


def test_the_clock_times_each_step_reached_and_caps_named_rollouts() -> None:
    """Unreached steps are 0; at most KEPT_ROLLOUTS rollouts are named, all counted."""
    clock = RestoreClock(wall_start=1000.0, start=50.0, checked_at=50.5, environment_at=52.0)
    phases = dict(clock.phases().items())
    assert phases == {"check": 0.5, "environment": 1.5, "ledger": 0.0, "resume": 0.0}
    many = [
        LedgerEntry(f"r{i}", 1, "s/replica-0", LedgerStatus.RESERVED, restored=True)
        for i in range(KEPT_ROLLOUTS + 5)
    ]
    record = clock.restored_record(
        snapshot="rollouts-0123456789ab",
        considered=1,
        refused=0,
        continued=many,
        abandoned=[],
        cleared_rows=0,
        restored=None,
    )
    assert record.continued == KEPT_ROLLOUTS + 5
    assert len(record.continued_rollouts) == KEPT_ROLLOUTS
