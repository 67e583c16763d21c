"""End to end: SIGKILL the whole job (trainer and Gym server processes) at each step.

Each test runs the demo's training job as real processes. A run is killed by
its own crash handler at one named point of the snapshot sequence, or inside
the restore that follows a kill; fresh processes then restore and finish.
Every test ends with the demo's full verdict computed from the files the job
left (rl-recovery.md's promise: every rollout exactly once, every transcript
equal to an uninterrupted run, no tool effect applied twice, something
continued from a saved turn, a corrupt snapshot refused whole).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from envckpt.crashpoints import RESTORE_POINTS, SNAPSHOT_POINTS
from envckpt.demo.events import EVENTS_NAME, read_events, record_exit
from envckpt.demo.plan import plan_interruptions
from envckpt.demo.processes import run_processes, start_job
from envckpt.demo.scenario import SETTINGS_NAME, DemoSettings, save_settings
from envckpt.demo.verdict import judge, read_run
from envckpt.trainer.snapshot_manifest import read_snapshot_manifest

from helpers.snapshot_corruption import records_hold_a_state_gym_refuses

pytestmark = pytest.mark.slow
KILLED = -signal.SIGKILL


def settings_in(directory: Path, **changes: object) -> DemoSettings:
    values: dict[str, object] = {
        "instances": 2,
        "rollouts": 12,
        "seed": 3,
        "directory": directory,
        "snapshot_every": 0.3,
        "tool_latency": 0.06,
        "min_turns": 6,
        "max_turns": 12,
        "in_flight_per_instance": 2,
    }
    values.update(changes)
    settings = DemoSettings(**values)  # type: ignore[arg-type]
    directory.mkdir(parents=True, exist_ok=True)
    save_settings(settings, directory / SETTINGS_NAME)
    return settings


def run(settings: DemoSettings, incarnation: int, crash_at: str | None = None) -> int:
    process = start_job(settings, incarnation, crash_at=crash_at)
    code = process.wait(timeout=180)
    record_exit(settings.directory, incarnation, code)
    return code


def restored_event(settings: DemoSettings, incarnation: int) -> dict[str, object]:
    return next(
        e
        for e in read_events(settings.directory / EVENTS_NAME)
        if e["event"] == "restored" and e["incarnation"] == incarnation
    )


def assert_promise_kept(settings: DemoSettings) -> None:
    verdict = judge(settings, read_run(settings.directory))
    assert verdict.passed, verdict.render()


def snapshots_oldest_first(settings: DemoSettings) -> list[Path]:
    return sorted(
        (settings.directory / "snapshots").iterdir(),
        key=lambda p: read_snapshot_manifest(p).created_at,
    )


@pytest.mark.parametrize("point", SNAPSHOT_POINTS)
def test_kill_at_each_snapshot_step_then_restore(point: str, tmp_path: Path) -> None:
    """A SIGKILL at any step of the second snapshot loses nothing a restore cannot recover."""
    settings = settings_in(tmp_path)
    # mid_commit is reached once per instance: its (instances + 1)-th pass is in snapshot 2.
    nth = settings.instances + 1 if point == "snapshot.mid_commit" else 2
    assert run(settings, 1, crash_at=f"{point}:{nth}") == KILLED
    assert run(settings, 2) == 0
    assert_promise_kept(settings)


@pytest.mark.parametrize("point", RESTORE_POINTS)
def test_kill_during_the_restore_that_follows_a_kill(point: str, tmp_path: Path) -> None:
    """Killed again inside the restore (any step), a third start still keeps the promise."""
    settings = settings_in(tmp_path)
    assert run(settings, 1, crash_at="snapshot.after_publish:2") == KILLED
    assert run(settings, 2, crash_at=point) == KILLED
    assert run(settings, 3) == 0
    assert restored_event(settings, 3)["snapshot"] is not None
    assert_promise_kept(settings)


def test_three_kills_one_inside_a_restore(tmp_path: Path) -> None:
    """The demo's own plan with three kills: each strikes after a snapshot; the job finishes."""
    settings = settings_in(tmp_path, rollouts=20)
    plan = plan_interruptions(seed=settings.seed, kills=3, preempt=False)
    assert [i.kind for i in plan] == ["kill", "kill_in_restore", "kill"]
    verdict, _ = run_processes(settings, plan)
    assert verdict.passed, verdict.render()
    assert verdict.numbers["kills"] == 3 and verdict.numbers["restores"] == 2
    document = json.loads((tmp_path / "verdict.json").read_text())
    assert document["passed"] is True and document["kills"] == 3


def test_corrupt_newest_snapshot_is_refused_whole(tmp_path: Path) -> None:
    """A flipped byte in the newest snapshot makes the restore use the previous one."""
    settings = settings_in(tmp_path)
    assert run(settings, 1, crash_at="snapshot.after_publish:2") == KILLED
    snapshots = snapshots_oldest_first(settings)
    assert len(snapshots) >= 2
    newest = snapshots[-1]
    records = next(newest.rglob("records-*.jsonl"))
    data = bytearray(records.read_bytes())
    data[len(data) // 2] ^= 0x01
    records.write_bytes(bytes(data))
    assert run(settings, 2) == 0
    restored = restored_event(settings, 2)
    assert restored["snapshot"] == snapshots[-2].name
    assert [c[:2] for c in restored["considered"]] == [  # type: ignore[attr-defined]
        [newest.name, "refused"],
        [snapshots[-2].name, "chosen"],
    ]
    assert (tmp_path / "refused" / newest.name).is_dir()
    assert_promise_kept(settings)


def test_records_gym_refuses_are_dropped_and_the_same_start_restores_the_previous(
    tmp_path: Path,
) -> None:
    """Content only Gym can judge: it refuses, the trainer restarts its Gym servers, and lands."""
    settings = settings_in(tmp_path)
    assert run(settings, 1, crash_at="snapshot.after_publish:2") == KILLED
    snapshots = snapshots_oldest_first(settings)
    newest, previous = snapshots[-1], snapshots[-2]
    records_hold_a_state_gym_refuses(newest)
    assert run(settings, 2) == 0
    events = [e for e in read_events(tmp_path / EVENTS_NAME) if e["incarnation"] == 2]
    refused = [e for e in events if e["event"] == "restore_refused"]
    assert [e["snapshot"] for e in refused] == [newest.name]
    assert restored_event(settings, 2)["snapshot"] == previous.name
    assert_promise_kept(settings)
