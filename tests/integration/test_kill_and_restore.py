"""End to end: SIGKILL the whole job (trainer and Gym server processes) at each step.

Each test runs the demo's training job as real processes. The first run is
killed by its own crash handler at one named point of the snapshot sequence
(or right after a restore); fresh processes then restore and finish. Every
run must keep the promise of rl-recovery.md: every rollout exactly once,
every transcript equal to an uninterrupted run, no tool effect applied twice,
and a corrupt snapshot refused whole.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from envckpt.crashpoints import SNAPSHOT_POINTS
from envckpt.demo.events import read_events
from envckpt.demo.processes import judge_files, start_job
from envckpt.demo.scenario import DemoSettings
from envckpt.demo.trainer_process import save_settings

pytestmark = pytest.mark.slow


def settings_in(directory: Path) -> DemoSettings:
    settings = DemoSettings(
        instances=2,
        rollouts=8,
        seed=3,
        directory=directory,
        snapshot_every=0.3,
        tool_latency=0.04,
        min_turns=4,
        max_turns=8,
        in_flight_per_instance=2,
    )
    directory.mkdir(parents=True, exist_ok=True)
    save_settings(settings, directory / "job.json")
    return settings


def run(settings: DemoSettings, incarnation: int, crash_at: str | None = None) -> int:
    process = start_job(settings, incarnation, crash_at=crash_at)
    return process.wait(timeout=180)


def restored_event(settings: DemoSettings, incarnation: int) -> dict[str, object]:
    return next(
        e
        for e in read_events(settings.directory / "events.jsonl")
        if e["event"] == "restored" and e["incarnation"] == incarnation
    )


def assert_promise_kept(settings: DemoSettings, incarnation: int, exit_code: int) -> None:
    restored = restored_event(settings, incarnation)
    verdict = judge_files(
        settings,
        continued=int(str(restored["continued"])),
        restarted=int(str(restored["abandoned"])),
        exit_code=exit_code,
    )
    assert verdict.passed, verdict.render()


@pytest.mark.parametrize("point", SNAPSHOT_POINTS)
def test_kill_at_each_snapshot_step_then_restore(point: str, tmp_path: Path) -> None:
    """A SIGKILL at any step of the second snapshot loses nothing a restore cannot recover."""
    settings = settings_in(tmp_path)
    assert run(settings, 1, crash_at=f"{point}:2") == -signal.SIGKILL
    assert_promise_kept(settings, 2, run(settings, 2))


def test_kill_right_after_a_restore(tmp_path: Path) -> None:
    """Killed again right after restoring, a third start still keeps the promise."""
    settings = settings_in(tmp_path)
    assert run(settings, 1, crash_at="snapshot.after_publish:2") == -signal.SIGKILL
    assert run(settings, 2, crash_at="restore.after") == -signal.SIGKILL
    assert_promise_kept(settings, 3, run(settings, 3))


def test_corrupt_newest_snapshot_is_refused_whole(tmp_path: Path) -> None:
    """A flipped byte in the newest snapshot makes the restore use the previous one."""
    settings = settings_in(tmp_path)
    assert run(settings, 1, crash_at="snapshot.after_publish:2") == -signal.SIGKILL
    snapshots = sorted(
        (tmp_path / "snapshots" / "snapshots").iterdir(),
        key=lambda p: json.loads((p / "MANIFEST.json").read_text())["created_at"],
    )
    assert len(snapshots) >= 2
    newest = snapshots[-1]
    records = next(newest.rglob("records-*.jsonl"))
    data = bytearray(records.read_bytes())
    data[len(data) // 2] ^= 0x01
    records.write_bytes(bytes(data))
    code = run(settings, 2)
    restored = restored_event(settings, 2)
    assert restored["snapshot"] == snapshots[-2].name
    assert [name for name, _ in restored["refused"]] == [newest.name]  # type: ignore[union-attr]
    assert_promise_kept(settings, 2, code)
