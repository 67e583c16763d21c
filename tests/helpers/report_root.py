"""A small snapshot root for the report's tests: telemetry, events, results, verdict, a log.

Two runs: run 1 starts fresh, publishes two snapshots (one fails between
them) and is killed; run 2 restores the second snapshot (continuing task-1
at attempt 2, resumed at turn 4; restarting task-9) and finishes with one
more snapshot. The records are written as a trainer writes them.
"""

from __future__ import annotations

import json
from pathlib import Path

from envckpt.telemetry.log import TelemetryLog
from envckpt.telemetry.snapshot_record import SnapshotOutcome

from helpers.telemetry_samples import T0, restore_record, snapshot_record

IDS = ("rollouts-aaaaaaaaaaaa", "rollouts-bbbbbbbbbbbb", "rollouts-cccccccccccc")
VERDICT = {
    "passed": True,
    "kills": 1,
    "restores": 1,
    "snapshots_published": 3,
    "snapshots_failed": 1,
    "continued_from_saved_turn": 1,
    "restarted_from_task": 1,
    "turns_saved": 4,
    "turns_recomputed": 2,
    "checks": [{"check": "every rollout finished exactly once", "passed": True, "detail": "2"}],
}


def write_root(root: Path, *, verdict: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    log = TelemetryLog(root)
    log.append(restore_record(None, at=T0))
    log.append(snapshot_record(IDS[0], at=T0 + 2, paused=0.3))
    log.append(snapshot_record("rollouts-ffffffffffff", at=T0 + 3, outcome=SnapshotOutcome.FAILED))
    log.append(snapshot_record(IDS[1], at=T0 + 4, paused=0.5))
    log.append(restore_record(IDS[1], at=T0 + 10))
    log.append(snapshot_record(IDS[2], at=T0 + 13, paused=0.2))
    events = [
        {"event": "started", "incarnation": 1, "ts": T0 - 1},
        {"event": "interrupting", "incarnation": 1, "ts": T0 + 5, "kind": "kill"},
        {"event": "exited", "incarnation": 1, "ts": T0 + 5.2, "code": -9},
        {"event": "started", "incarnation": 2, "ts": T0 + 8},
        {"event": "exited", "incarnation": 2, "ts": T0 + 15, "code": 0},
    ]
    (root / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    results = {
        "task-1": {"episode": {"rollout_id": "task-1", "attempt": 2}, "resumed_from_turn": 4}
    }
    (root / "results.json").write_text(json.dumps(results))
    if verdict:
        (root / "verdict.json").write_text(json.dumps(VERDICT))
    transitions = [
        {
            "event": "transition",
            "machine": "snapshot_session",
            "instance_id": "x",
            "trigger": "prepare",
            "source": "opened",
            "dest": "prepared",
            "checkpoint_id": "c",
        },
        {"event": "something else"},
    ]
    (root / "trainer-1.log").write_text("".join(json.dumps(t) + "\n" for t in transitions))
    return root
