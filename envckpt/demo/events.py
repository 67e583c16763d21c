"""The job's event log: one JSON line per event, flushed at once.

Both demos' trainers append to ``events.jsonl``; the demo reads it while the
job runs (progress bars) and after it ended or died (the report, the
verdict). A SIGKILL loses no line that was written: each is flushed to the
kernel before the next step.

    events = EventLog(directory / "events.jsonl", incarnation=2)
    events.restored(report, finished_before=len(results))
    job.on_progress = events.progress            # snapshot, snapshot_failed, sealed, ...

Events: ``started``, ``restored`` (snapshot, considered, continued
``[rollout_id, attempt]`` pairs, abandoned), ``snapshot`` (checkpoint id,
reason, metrics, exported), ``snapshot_failed`` (reason), ``dispatched``,
``sealed``, ``interrupting`` (kind, before a planned kill or preemption),
``final_snapshot`` (checkpoint id or None, why cut short), ``restore_refused``,
``stopped`` (a typed error ended the run), ``done``; and ``exited``, written by
the launcher after the run ended (its exit code).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from envckpt.machines.tables import LedgerStatus
from envckpt.trainer.restorer import RestoreReport

EVENTS_NAME = "events.jsonl"


class EventLog:
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
        if event == "snapshot":
            result = fields["result"]
            self.emit(
                "snapshot",
                checkpoint_id=result.checkpoint_id,
                reason=fields.get("reason", ""),
                metrics=result.metrics,
                exported=result.exported_episodes,
                restarted=result.restarted_rollouts,
            )
        elif event == "snapshot_failed":
            self.emit("snapshot_failed", reason=fields["reason"])
        elif event == "final_snapshot":
            result = fields["result"]
            self.emit(
                "final_snapshot",
                checkpoint_id=None if result is None else result.checkpoint_id,
                aborted=fields.get("aborted", ""),
            )
        elif event in (LedgerStatus.SEALED, LedgerStatus.DISPATCHED):
            self.emit(event, rollout_id=fields["rollout_id"], attempt=fields["attempt"])

    def restored(self, report: RestoreReport, *, finished_before: int) -> None:
        plan = report.plan
        self.emit(
            "restored",
            snapshot=None if report.path is None else report.path.name,
            considered=[[c.snapshot, c.outcome, c.reason] for c in report.considered],
            continued=[]
            if plan is None
            else sorted([e.rollout_id, e.attempt] for e in plan.continued),
            abandoned=0 if plan is None else len(plan.abandoned),
            finished_before=finished_before,
        )


def record_exit(directory: Path, incarnation: int, code: int | None) -> None:
    """The launcher's own line: how run ``incarnation`` ended (its exit code, -9 killed)."""
    log = EventLog(directory / EVENTS_NAME, incarnation=incarnation)
    try:
        log.emit("exited", code=code)
    finally:
        log.close()


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete line of the log (a line cut by a kill is skipped)."""
    if not path.exists():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record
