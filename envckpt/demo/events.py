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
the launcher's own: ``exited`` (``cut_short`` when the demo itself was
interrupted during that run) and ``requeued`` (a run that found the job
finished and did nothing).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from envckpt.trainer.event_log import EVENTS_NAME, EventLog, read_events

__all__ = [
    "EVENTS_NAME",
    "EventLog",
    "note_requeue",
    "read_events",
    "record",
    "record_exit",
    "results_digest",
]


# What the launcher itself writes about a run (the job writes everything else).
LAUNCHER_EVENTS = frozenset({"exited", "requeued"})


def record_exit(directory: Path, incarnation: int, code: int | None, **fields: object) -> None:
    """The launcher's own line: how run ``incarnation`` ended (its exit code, -9 killed)."""
    record(directory, incarnation, "exited", code=code, **fields)


def record(directory: Path, incarnation: int, event: str, **fields: object) -> None:
    """One line of the launcher's own about run ``incarnation``."""
    log = EventLog(directory / EVENTS_NAME, incarnation=incarnation)
    try:
        log.emit(event, **fields)
    finally:
        log.close()


def results_digest(directory: Path) -> str | None:
    """The digest of the job's ``results.json`` (None: not written yet)."""
    try:
        return hashlib.sha256((directory / "results.json").read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def note_requeue(directory: Path, incarnation: int, *, results_before: str | None) -> bool:
    """After a run that exited 0: was it a requeue (the job had finished; it logged nothing)?

    If so, the launcher records ``requeued`` with whether ``results.json`` stayed the same.
    """
    own = [
        e
        for e in read_events(directory / EVENTS_NAME)
        if e.get("incarnation") == incarnation and e["event"] not in LAUNCHER_EVENTS
    ]
    if own:
        return False
    unchanged = results_before is not None and results_digest(directory) == results_before
    record(directory, incarnation, "requeued", results_unchanged=unchanged)
    return True
