"""Reading a job's event log, and the launcher's own line in it.

The job writes ``events.jsonl`` through ``envckpt.trainer.event_log``; the
demo reads it while the job runs (progress bars) and after it ended or died
(the report, the verdict), and appends ``exited`` (the exit code) when a run
ended::

    for record in read_events(directory / EVENTS_NAME): ...
    record_exit(directory, incarnation=2, code=-9)

Events besides the job's own (see ``envckpt.trainer.event_log``): ``started``,
``interrupting`` (kind, before a planned kill or preemption),
``restore_refused``, ``stopped`` (a typed error ended the run), ``done``, and
``exited``.
"""

from __future__ import annotations

from pathlib import Path

from envckpt.trainer.event_log import EVENTS_NAME, EventLog, read_events

__all__ = ["EVENTS_NAME", "EventLog", "read_events", "record_exit"]


def record_exit(directory: Path, incarnation: int, code: int | None) -> None:
    """The launcher's own line: how run ``incarnation`` ended (its exit code, -9 killed)."""
    log = EventLog(directory / EVENTS_NAME, incarnation=incarnation)
    try:
        log.emit("exited", code=code)
    finally:
        log.close()
