"""Tests for envckpt.demo.events: the job's events as JSON lines that survive a kill."""

from __future__ import annotations

from pathlib import Path

from envckpt.demo.events import EventLog, read_events, record_exit
from envckpt.trainer.snapshotter import SnapshotResult


def test_progress_events_become_lines_with_their_fields(tmp_path: Path) -> None:
    """Snapshots, failures, final snapshots and seals are logged with what the verdict needs."""
    path = tmp_path / "events.jsonl"
    log = EventLog(path, incarnation=3)
    result = SnapshotResult("ck-1", tmp_path, exported_episodes=4, restarted_rollouts=1)
    log.progress("snapshot", {"result": result, "reason": "timer"})
    log.progress("snapshot_failed", {"reason": "OSError: full", "consecutive": 1})
    log.progress("final_snapshot", {"result": None, "aborted": "the grace deadline"})
    log.progress("sealed", {"rollout_id": "r1", "attempt": 2})
    log.progress("unknown", {})
    log.close()
    events = list(read_events(path))
    assert [e["event"] for e in events] == [
        "snapshot",
        "snapshot_failed",
        "final_snapshot",
        "sealed",
    ]
    assert all(e["incarnation"] == 3 for e in events)
    assert events[0]["checkpoint_id"] == "ck-1" and events[0]["exported"] == 4
    assert events[0]["reason"] == "timer"
    assert events[1]["reason"] == "OSError: full"
    assert events[2]["checkpoint_id"] is None and events[2]["aborted"] == "the grace deadline"
    assert events[3]["rollout_id"] == "r1" and events[3]["attempt"] == 2


def test_a_line_cut_by_a_kill_is_skipped(tmp_path: Path) -> None:
    """A half-written last line (the process died mid-write) does not hide the others."""
    path = tmp_path / "events.jsonl"
    record_exit(tmp_path, 1, -9)
    with path.open("a") as stream:
        stream.write('{"event": "seal')
    assert [(e["event"], e["code"]) for e in read_events(path)] == [("exited", -9)]
    assert list(read_events(tmp_path / "missing.jsonl")) == []
