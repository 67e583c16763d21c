"""Tests for envckpt.demo.summary: the printed tables say how each run ended and what was saved."""

from __future__ import annotations

from pathlib import Path

from envckpt.demo.events import EventLog
from envckpt.demo.plan import KILL, KILL_IN_RESTORE, PREEMPT
from envckpt.demo.report import Verdict
from envckpt.demo.scenario import DemoSettings
from envckpt.demo.summary import render_summary, run_pauses
from envckpt.demo.verdict import KILLED, RestoreRecord, RunRecord, Strike


def test_each_run_ending_and_restore_is_described(tmp_path: Path) -> None:
    """Kills, a kill inside a restore, a preemption and a refusal each read as what happened."""
    log = EventLog(tmp_path / "events.jsonl", incarnation=2)
    log.emit("interrupting", kind=KILL_IN_RESTORE, point="restore.validated")
    log.close()
    log = EventLog(tmp_path / "events.jsonl", incarnation=5)
    log.emit("stopped", error="StartRefused", reason="another trainer holds the root")
    log.close()
    record = RunRecord(
        results={},
        audit=[],
        exits={1: KILLED, 2: KILLED, 3: 75, 4: 0, 5: 3},
        strikes=[Strike(1, KILL, 1), Strike(2, KILL_IN_RESTORE), Strike(3, PREEMPT, 1)],
        restores=[RestoreRecord(1, None), RestoreRecord(3, "ck-1", frozenset({("r", 1)}), 2, 1)],
        final_snapshots={3: "ck-2"},
    )
    verdict = Verdict()
    verdict.number("turns_saved", 12)
    verdict.number("turns_recomputed", 3)
    text = render_summary(DemoSettings(directory=tmp_path), record, verdict)
    assert "SIGKILL after 1 snapshot(s) holding rollouts" in text
    assert "SIGKILL inside the restore (restore.validated)" in text
    assert "SIGTERM: final snapshot ck-2, exit 75" in text
    assert "exit 3: another trainer holds the root" in text
    assert "(killed inside the restore)" in text and "(none: fresh start)" in text
    assert "12 turns carried over" in text and "3 turns recomputed" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_run_pauses_read_one_runs_snapshots(tmp_path: Path) -> None:
    """Pauses and warnings are per run, from the snapshot events' end times and pauses."""
    events = [
        {
            "event": "snapshot",
            "incarnation": 1,
            "ts": 1.0,
            "metrics": {"snapshot_paused_seconds": 0.2},
        },
        {
            "event": "snapshot",
            "incarnation": 1,
            "ts": 1.3,
            "metrics": {"snapshot_paused_seconds": 0.2},
        },
        {
            "event": "snapshot",
            "incarnation": 2,
            "ts": 9.0,
            "metrics": {"snapshot_paused_seconds": 0.1},
        },
    ]
    assert run_pauses(events, 1) == ([0.2, 0.2], 1)
    assert run_pauses(events, 2) == ([0.1], 0)
