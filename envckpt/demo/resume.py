"""Continuing a demo run that was itself interrupted: ``envckpt demo --dir D --resume``.

A demo killed while its job ran (Ctrl-C, a closed terminal, SIGKILL) leaves
its directory as it was: the spec, the plan, the event log, the snapshots.
Its job died with it (``envckpt.process_tie``). ``--resume`` reads what the
directory holds and goes on from the next run of the job, which restores the
newest snapshot as any restart does::

    point = resume_point(directory)      # ValueError if D holds no demo run
    point.nemo_gym, point.next_incarnation, point.finished

The run the demo was watching when it died is recorded as ``exited`` with no
code and ``cut_short`` (the verdict does not hold it to its planned
interruption). A run that had already finished is resumed too: the next run
is a requeue, which must find the job finished and do nothing (the verdict
checks that it did).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from envckpt.demo.events import EVENTS_NAME, read_events, record_exit
from envckpt.demo.plan import PLAN_NAME
from envckpt.demo.scenario import SETTINGS_NAME

GONE_SECONDS = 10.0  # how long the cut run's processes may take to follow the demo


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where an interrupted demo run goes on."""

    nemo_gym: bool
    next_incarnation: int
    finished: bool


def resume_point(directory: Path) -> ResumePoint:
    """What ``directory`` holds, the cut run recorded; ValueError if it is no demo run."""
    spec_path = directory / SETTINGS_NAME  # the nemo-gym demo's job spec has the same name
    if not spec_path.is_file() or not (directory / PLAN_NAME).is_file():
        raise ValueError(f"{directory} holds no demo run to resume (no {SETTINGS_NAME}, plan)")
    try:
        spec = json.loads(spec_path.read_text())
    except ValueError as error:
        raise ValueError(f"{spec_path} is not a demo's job file: {error}") from None
    events = read_events(directory / EVENTS_NAME)
    runs = {int(e["incarnation"]) for e in events if "incarnation" in e}
    exited = {int(e["incarnation"]) for e in events if e["event"] == "exited"}
    last = max(runs, default=0)
    if last and last not in exited:
        _wait_gone(_trainer_pid(events, last))
        record_exit(directory, last, None, cut_short=True)
    return ResumePoint(
        nemo_gym=isinstance(spec, dict) and "deployments" in spec,
        next_incarnation=last + 1,
        finished=any(e["event"] == "done" for e in events),
    )


def _trainer_pid(events: list[dict[str, object]], incarnation: int) -> int | None:
    for event in events:
        if event.get("incarnation") == incarnation and event["event"] == "started":
            pid = event.get("pid")
            return pid if isinstance(pid, int) else None
    return None


def _wait_gone(pgid: int | None) -> None:
    """The cut run's group is gone (its processes die with the demo); wait for that."""
    if pgid is None:
        return
    give_up = time.monotonic() + GONE_SECONDS
    while time.monotonic() < give_up:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    raise ValueError(
        f"the interrupted run's processes (group {pgid}) are still running; stop them first"
    )
