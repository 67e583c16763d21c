"""Tests for envckpt.trainer.event_log: a job's events as JSON lines that survive a kill."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from envckpt.trainer.event_log import (
    EventLog,
    progress_event,
    read_events,
    restored_event,
)
from envckpt.trainer.snapshotter import SnapshotResult


def test_progress_events_become_lines_with_their_fields(tmp_path: Path) -> None:
    """Snapshots, failures, final snapshots and seals are logged with what a verdict needs."""
    path = tmp_path / "events.jsonl"
    log = EventLog(path, incarnation=3)
    result = SnapshotResult("ck-1", tmp_path, exported_episodes=4, restarted_rollouts=1)
    log.progress("snapshot", {"result": result, "reason": "timer"})
    log.progress("snapshot_failed", {"reason": "OSError: full", "consecutive": 1})
    log.progress("final_snapshot", {"result": None, "aborted": "the grace deadline"})
    log.progress("sealed", {"rollout_id": "r1", "attempt": 2})
    log.progress("unknown", {})
    log.close()
    events = read_events(path)
    assert [e["event"] for e in events] == [
        "snapshot",
        "snapshot_failed",
        "final_snapshot",
        "sealed",
    ]
    assert all(e["incarnation"] == 3 for e in events)
    assert events[0]["checkpoint_id"] == "ck-1" and events[0]["exported"] == 4
    assert events[0]["reason"] == "timer" and events[0]["restarted"] == 1
    assert events[1] == {**events[1], "reason": "OSError: full"} and "consecutive" not in events[1]
    assert events[2]["checkpoint_id"] is None and events[2]["aborted"] == "the grace deadline"
    assert events[3]["rollout_id"] == "r1" and events[3]["attempt"] == 2


def test_an_unlogged_progress_call_has_no_event() -> None:
    """Progress the log does not keep maps to None, so every job logs the same set."""
    assert progress_event("started_rollout", {"rollout_id": "r"}) is None


def test_the_restored_event_lists_what_the_startup_did(tmp_path: Path) -> None:
    """restored_event names the snapshot, every candidate, the continued pairs and counts."""
    plan = SimpleNamespace(
        continued=(
            SimpleNamespace(rollout_id="r2", attempt=1),
            SimpleNamespace(rollout_id="r1", attempt=3),
        ),
        abandoned=(object(),),
    )
    report = SimpleNamespace(
        path=tmp_path / "rollouts-1",
        plan=plan,
        considered=(SimpleNamespace(snapshot="rollouts-1", outcome="chosen", reason=""),),
        refused=[],
    )
    event, fields = restored_event(report, finished_before=5)  # type: ignore[arg-type]
    assert event == "restored"
    assert fields == {
        "snapshot": "rollouts-1",
        "considered": [["rollouts-1", "chosen", ""]],
        "continued": [["r1", 3], ["r2", 1]],
        "abandoned": 1,
        "refused": [],
        "finished_before": 5,
    }
    fresh = SimpleNamespace(path=None, plan=None, considered=(), refused=[])
    _, empty = restored_event(fresh, finished_before=0)  # type: ignore[arg-type]
    assert empty["snapshot"] is None and empty["continued"] == [] and empty["abandoned"] == 0


def test_a_line_cut_by_a_kill_is_skipped(tmp_path: Path) -> None:
    """A half-written last line (the process died mid-write) does not hide the others."""
    path = tmp_path / "events.jsonl"
    log = EventLog(path, incarnation=1)
    log.emit("exited", code=-9)
    log.close()
    with path.open("a") as stream:
        stream.write('{"event": "seal')
    assert [(e["event"], e["code"]) for e in read_events(path)] == [("exited", -9)]
    assert read_events(tmp_path / "missing.jsonl") == []
