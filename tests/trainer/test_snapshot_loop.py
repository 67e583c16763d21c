"""Tests for envckpt.trainer.snapshot_loop: adaptive interval, backoff, no silent loss."""

from __future__ import annotations

import asyncio
import shutil
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from envckpt.trainer.job_errors import SnapshotsFailing
from envckpt.trainer.snapshot_loop import SnapshotPolicy

from helpers.snapshot_rig import Rig, assert_finished_correctly


def break_snapshots(rig: Rig) -> None:
    """Every snapshot now fails in its first step: ``.tmp`` is a file."""
    shutil.rmtree(rig.layout.temporary, ignore_errors=True)
    rig.layout.temporary.parent.mkdir(parents=True, exist_ok=True)
    rig.layout.temporary.write_text("in the way")


def test_the_first_interval_is_the_configured_one() -> None:
    """Before any pause is known the timer waits every_seconds."""
    assert (
        SnapshotPolicy(every_seconds=2.0).next_delay(last_pause=None, consecutive_failures=0) == 2.0
    )


@pytest.mark.parametrize(("pause", "expected"), [(0.1, 2.0), (0.5, 2.0), (1.0, 3.0), (4.0, 12.0)])
def test_the_interval_keeps_the_environment_running_three_times_longer_than_paused(
    pause: float, expected: float
) -> None:
    """The next snapshot comes no sooner than 3x the last pause, and never before every_seconds."""
    policy = SnapshotPolicy(every_seconds=2.0)
    assert policy.next_delay(last_pause=pause, consecutive_failures=0) == pytest.approx(expected)


def test_failures_back_off_doubling_up_to_a_cap() -> None:
    """After n failures in a row the retry waits initial * 2**(n-1), at most retry_max_seconds."""
    policy = SnapshotPolicy(every_seconds=2.0, retry_initial_seconds=0.5, retry_max_seconds=3.0)
    delays = [policy.next_delay(last_pause=0.2, consecutive_failures=n) for n in range(1, 6)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(
    "bad",
    [
        {"every_seconds": 0.0},
        {"max_consecutive_failures": 0},
        {"min_running_ratio": -1.0},
        {"retry_initial_seconds": -0.1},
    ],
)
def test_a_nonsensical_policy_is_refused(bad: dict[str, Any]) -> None:
    """Zero intervals, no allowed failure or negative delays are caller bugs."""
    with pytest.raises(ValueError):
        SnapshotPolicy(**bad)


async def test_snapshots_that_keep_failing_stop_the_job_with_a_typed_error(rig: Rig) -> None:
    """Three failures in a row: SnapshotsFailing, one snapshot_failed event each, job stopped."""
    break_snapshots(rig)
    events: list[tuple[str, dict[str, Any]]] = []
    policy = SnapshotPolicy(retry_initial_seconds=0.01, retry_max_seconds=0.02)
    job = rig.job(
        rig.tasks(4),
        snapshot_policy=policy,
        on_progress=lambda event, fields: events.append((event, dict(fields))),
    )
    with capture_logs() as logs, pytest.raises(SnapshotsFailing) as caught:
        await job.run(snapshot_every=0.02)
    error = caught.value
    assert error.consecutive == 3 and "NotADirectoryError" in error.last_reason
    assert [e for e in logs if e["event"] == "snapshot_failed"] != []
    assert len([e for e in logs if e["event"] == "snapshot_failed"]) == 3
    failed = [fields for event, fields in events if event == "snapshot_failed"]
    assert [fields["consecutive"] for fields in failed] == [1, 2, 3]
    assert len(job.report.snapshot_failures) == 3
    # The job stopped: nothing finished after it, and no rollout moves any more.
    assert job.report.finished < 4
    held = rig.turns_held()
    await asyncio.sleep(0.1)
    assert rig.turns_held() == held


async def test_a_job_may_choose_to_run_unprotected_and_is_warned_at_every_failure(
    rig: Rig,
) -> None:
    """With keep_running_unprotected the job finishes; each failure is logged and warned about."""
    break_snapshots(rig)
    tasks = rig.tasks(4, turns=12)
    policy = SnapshotPolicy(
        max_consecutive_failures=1,
        keep_running_unprotected=True,
        retry_initial_seconds=0.01,
        retry_max_seconds=0.01,
    )
    with capture_logs() as logs:
        report = await rig.job(tasks, snapshot_policy=policy).run(snapshot_every=0.01)
    assert report.finished == 4 and report.snapshots == []
    assert_finished_correctly(rig, tasks)
    failed = [e for e in logs if e["event"] == "snapshot_failed"]
    warned = [e for e in logs if "runs unprotected" in e["event"]]
    # Past the limit of one, the job went on, and said so at every failure.
    assert len(failed) == len(report.snapshot_failures) == len(warned) >= 2
    assert all(w["log_level"] == "warning" for w in warned)


async def test_a_failure_then_a_success_resets_the_count(rig: Rig) -> None:
    """Failures that are not consecutive never reach the limit."""
    tasks = rig.tasks(2, turns=4)
    job = rig.job(tasks, snapshot_policy=SnapshotPolicy(max_consecutive_failures=2))
    break_snapshots(rig)
    assert await job.snapshot_once() is None
    rig.layout.temporary.unlink()
    assert await job.snapshot_once() is not None
    break_snapshots(rig)
    assert await job.snapshot_once() is None
    assert rig.snapshotter.consecutive_failures == 1
    rig.layout.temporary.unlink()
    await job.run()
    assert_finished_correctly(rig, tasks)


async def test_a_request_wakes_the_loop_without_a_timer(rig: Rig) -> None:
    """request_now takes a snapshot even when no interval is set."""
    loop = rig.job(rig.tasks(1)).snapshots
    stop = asyncio.Event()
    running = asyncio.create_task(loop.run(stop))
    await asyncio.sleep(0.05)
    assert rig.snapshotter.history == []
    loop.request_now()
    for _ in range(200):
        if rig.snapshotter.history:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await running
    assert len(rig.snapshotter.history) == 1


async def test_the_adaptive_interval_runs_three_times_longer_than_the_recent_pauses(
    rig: Rig,
) -> None:
    """Asked for snapshots far too often, the job still runs 3x its longest recent pause."""
    tasks = rig.tasks(8, turns=30)
    ended: list[tuple[float, float]] = []  # (when the snapshot was reported, its pause)

    def progress(event: str, fields: dict[str, Any]) -> None:
        if event == "snapshot":
            ended.append((time.time(), fields["result"].metrics["snapshot_paused_seconds"]))

    job = rig.job(tasks, max_in_flight_per_instance=2, on_progress=progress)
    await job.run(snapshot_every=0.05)
    assert len(ended) >= 2
    for index in range(1, len(ended)):
        recent = [paused for _, paused in ended[max(0, index - 3) : index]]
        wanted = max(0.05, 3.0 * max(recent))
        end, paused = ended[index]
        running = (end - paused) - ended[index - 1][0]
        assert running >= 0.99 * wanted, (index, running, recent)
    assert_finished_correctly(rig, tasks)
