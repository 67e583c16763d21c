"""A job's event log: one JSON line per event, flushed at once, so a SIGKILL loses none written.

A training job (the demo's, the nemo-gym job's) appends to ``events.jsonl``;
whoever watches the job reads it while it runs and after it ended or died.
The job's own progress callbacks and its restore report become events here,
in one shape for every job::

    events = EventLog(directory / EVENTS_NAME, incarnation=2)
    events.restored(report, finished_before=len(results))
    job.on_progress = events.progress        # snapshot, snapshot_failed, sealed, ...

Events: ``restored`` (snapshot, considered, continued ``[rollout_id,
attempt]`` pairs, abandoned, refused, finished_before), ``snapshot``
(checkpoint id, reason, metrics, exported, restarted), ``snapshot_failed``
(reason), ``final_snapshot`` (checkpoint id or None, why cut short),
``dispatched`` and ``sealed`` (rollout id, attempt); a job adds its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envckpt.machines.tables import LedgerStatus
from envckpt.trainer.restorer import RestoreReport

EVENTS_NAME = "events.jsonl"
RESTORED = "restored"


class EventLog:
    """Appends events as JSON lines, each flushed to the kernel before the next step."""

    def __init__(self, path: Path, *, incarnation: int) -> None:
        self.path = path
        self.incarnation = incarnation
        path.parent.mkdir(parents=True, exist_ok=True)
        self._stream = path.open("a", encoding="utf-8")

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "incarnation": self.incarnation, "ts": time.time(), **fields}
        self._stream.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()

    def progress(self, event: str, fields: Mapping[str, Any]) -> None:
        """A ``RolloutJob.on_progress`` callback that logs the job's events."""
        logged = progress_event(event, fields)
        if logged is not None:
            self.emit(logged[0], **logged[1])

    def restored(self, report: RestoreReport, *, finished_before: int) -> None:
        """Log what a startup restored (``restored_event``)."""
        event, fields = restored_event(report, finished_before=finished_before)
        self.emit(event, **fields)


def progress_event(event: str, fields: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The logged form of one ``RolloutJob.on_progress`` call, or None if not logged."""
    if event == "snapshot":
        result = fields["result"]
        return "snapshot", {
            "checkpoint_id": result.checkpoint_id,
            "reason": fields.get("reason", ""),
            "metrics": result.metrics,
            "exported": result.exported_episodes,
            "restarted": result.restarted_rollouts,
        }
    if event == "snapshot_failed":
        return "snapshot_failed", {"reason": fields["reason"]}
    if event == "final_snapshot":
        result = fields["result"]
        return "final_snapshot", {
            "checkpoint_id": None if result is None else result.checkpoint_id,
            "aborted": fields.get("aborted", ""),
        }
    if event in (LedgerStatus.SEALED, LedgerStatus.DISPATCHED):
        return str(event), {"rollout_id": fields["rollout_id"], "attempt": fields["attempt"]}
    return None


def restored_event(report: RestoreReport, *, finished_before: int) -> tuple[str, dict[str, Any]]:
    """The ``restored`` event of a startup: what was considered, continued and abandoned."""
    plan = report.plan
    return RESTORED, {
        "snapshot": None if report.path is None else report.path.name,
        "considered": [[c.snapshot, c.outcome, c.reason] for c in report.considered],
        "continued": []
        if plan is None
        else sorted([e.rollout_id, e.attempt] for e in plan.continued),
        "abandoned": 0 if plan is None else len(plan.abandoned),
        "refused": report.refused,
        "finished_before": finished_before,
    }


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete line of an event log (a line cut by a kill is skipped)."""
    if not path.exists():
        return []
    events: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            events.append(record)
    return events
