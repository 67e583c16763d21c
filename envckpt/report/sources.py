"""What a report reads from a snapshot root, and what it could not read.

    data = read_root(Path("run"))          # ReportData
    data.published                         # snapshot records, in the order they ended
    data.problems                          # damaged lines and files, named

The root's own files: ``telemetry.jsonl`` (every snapshot's and restore's
record, ``envckpt.telemetry.log``), the snapshots still on disk
(``snapshots/``), and, where a job wrote them (the demo does),
``events.jsonl`` (runs, interruptions), ``results.json`` (the turn each
continued rollout resumed at) and ``verdict.json``. Nothing is required but
the root; what is missing is simply not drawn, and what is damaged is named
in ``problems`` instead of stopping the report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt.telemetry.log import read_telemetry
from envckpt.telemetry.restore_record import RestoreTelemetry
from envckpt.telemetry.snapshot_record import SnapshotTelemetry
from envckpt.trainer.catalog import SnapshotCatalog
from envckpt.trainer.event_log import EVENTS_NAME, read_events

VERDICT_NAME = "verdict.json"
RESULTS_NAME = "results.json"
KILL_IN_RESTORE = "kill_in_restore"


@dataclass(frozen=True, slots=True)
class RunSpan:
    """One run of the job (an incarnation), as its event log saw it."""

    incarnation: int
    started: float
    ended: float | None = None
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class Interruption:
    """A planned kill or preemption the job announced just before it struck."""

    incarnation: int
    at: float
    kind: str
    point: str = ""


@dataclass(frozen=True, slots=True)
class ReportData:
    """Everything one report draws."""

    root: Path
    snapshots: tuple[SnapshotTelemetry, ...] = ()
    restores: tuple[RestoreTelemetry, ...] = ()
    on_disk: frozenset[str] = frozenset()
    runs: tuple[RunSpan, ...] = ()
    interruptions: tuple[Interruption, ...] = ()
    verdict: Mapping[str, Any] | None = None
    # (rollout id, attempt) -> the turn that attempt resumed at (results.json).
    resumed_turns: Mapping[tuple[str, int], int] | None = None
    problems: tuple[str, ...] = ()

    @property
    def published(self) -> tuple[SnapshotTelemetry, ...]:
        return tuple(record for record in self.snapshots if record.published)

    @property
    def failed(self) -> tuple[SnapshotTelemetry, ...]:
        return tuple(record for record in self.snapshots if not record.published)

    @property
    def start(self) -> float:
        """The earliest moment anything was recorded (the timeline's zero)."""
        moments = [
            *(r.started_at for r in self.snapshots),
            *(r.started_at for r in self.restores),
            *(run.started for run in self.runs),
            *(i.at for i in self.interruptions),
        ]
        return min(moments, default=0.0)


def read_root(root: Path) -> ReportData:
    """Every source of ``root`` a report draws; problems named, never raised."""
    problems: list[str] = []
    telemetry = read_telemetry(root)
    problems += telemetry.problems
    runs, interruptions = _events(root / EVENTS_NAME)
    return ReportData(
        root=root,
        snapshots=telemetry.snapshots,
        restores=telemetry.restores,
        on_disk=_on_disk(root, problems),
        runs=runs,
        interruptions=interruptions,
        verdict=_json_object(root / VERDICT_NAME, problems),
        resumed_turns=_resumed_turns(_json_object(root / RESULTS_NAME, problems)),
        problems=tuple(problems),
    )


def _on_disk(root: Path, problems: list[str]) -> frozenset[str]:
    try:
        return frozenset(entry.checkpoint_id for entry in SnapshotCatalog(root).all())
    except OSError as error:
        problems.append(f"snapshots/: {error}")
        return frozenset()


def _events(path: Path) -> tuple[tuple[RunSpan, ...], tuple[Interruption, ...]]:
    """Runs and interruptions of a job's event log (none without one)."""
    started: dict[int, float] = {}
    ended: dict[int, tuple[float, int | None]] = {}
    interruptions: list[Interruption] = []
    for event in read_events(path):
        incarnation, at = event.get("incarnation"), event.get("ts")
        if not isinstance(incarnation, int) or not isinstance(at, int | float):
            continue
        name = event.get("event")
        if name == "started":
            started.setdefault(incarnation, float(at))
        elif name == "exited":
            code = event.get("code")
            ended[incarnation] = (float(at), code if isinstance(code, int) else None)
        elif name == "interrupting":
            point = event.get("point")
            interruptions.append(
                Interruption(
                    incarnation,
                    float(at),
                    str(event.get("kind", "")),
                    point if isinstance(point, str) else "",
                )
            )
    runs = tuple(RunSpan(n, started[n], *ended.get(n, (None, None))) for n in sorted(started))
    return runs, tuple(interruptions)


def _json_object(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        problems.append(f"{path.name}: unreadable ({error})")
        return None
    if not isinstance(value, dict):
        problems.append(f"{path.name}: not a JSON object")
        return None
    return value


def _resumed_turns(results: Mapping[str, Any] | None) -> dict[tuple[str, int], int] | None:
    """(rollout id, final attempt) -> the turn it resumed at, from a demo's results."""
    if results is None:
        return None
    turns: dict[tuple[str, int], int] = {}
    for rollout_id, result in results.items():
        if not isinstance(result, Mapping):
            continue
        episode, resumed = result.get("episode"), result.get("resumed_from_turn")
        attempt = episode.get("attempt") if isinstance(episode, Mapping) else None
        if isinstance(attempt, int) and isinstance(resumed, int):
            turns[(str(rollout_id), attempt)] = resumed
    return turns
