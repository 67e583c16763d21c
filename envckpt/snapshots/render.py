"""How ``envckpt snapshots`` prints: rich tables no wider than 100 columns, or JSON.

    console = make_console(stream)                  # 100 columns at most
    console.print(list_table(entries))
    print(json.dumps(entry_json(entry)))            # the --json form of the same facts

The JSON forms carry everything the tables show, in plain types (times as
Unix seconds and ISO 8601 UTC), so scripts never parse a table.
"""

from __future__ import annotations

import datetime
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from envckpt.snapshots.details import SnapshotDetails
from envckpt.snapshots.verify import VerifyReport
from envckpt.trainer.catalog import SnapshotEntry
from envckpt.trainer.root_entries import Foreign

MAX_WIDTH = 100
# Metrics worth a line in ``show``; the rest are in --json.
SHOWN_METRICS = (
    "snapshot_paused_seconds",
    "snapshot_env_seconds",
    "snapshot_publish_seconds",
    "snapshot_bytes",
)


def make_console(stream: TextIO) -> Console:
    """A console on ``stream``: the terminal's width up to 100 columns; 100 when not a terminal."""
    width = MAX_WIDTH
    if stream.isatty():
        width = min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns)
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def created(timestamp: float | None) -> str:
    if timestamp is None:
        return "?"
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat()


def size(count: int) -> str:
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _status(entry: SnapshotEntry) -> Text:
    return Text(entry.status, style="green" if entry.usable else "bold red")


def _table(title: str | None = None, *, compact: bool = False) -> Table:
    # ``compact``: one space between columns, so the list fits 100 columns even
    # with 36-character ids, ten-digit steps and seconds in the time.
    return Table(
        title=title,
        box=box.SIMPLE_HEAD,
        title_justify="left",
        show_edge=False,
        padding=(0, 0) if compact else (0, 1),
    )


def list_table(entries: Sequence[SnapshotEntry]) -> RenderableType:
    """``list``: one row per snapshot, oldest first, and the problems of damaged ones."""
    table = _table(compact=True)
    table.add_column("snapshot", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("inst", justify="right", no_wrap=True)
    table.add_column("episodes", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for entry in entries:
        table.add_row(
            entry.checkpoint_id,
            "-" if entry.step is None else str(entry.step),
            created(entry.created_at),
            size(entry.size),
            str(len(entry.instances)),
            str(entry.episodes),
            _status(entry),
        )
    problems = [
        Text(f"{entry.checkpoint_id}: {entry.problem}", style="red")
        for entry in entries
        if entry.problem
    ]
    return Group(table, *problems) if problems else table


def show_view(details: SnapshotDetails) -> RenderableType:
    """``show``: the manifest, each instance and participant, and what a restore would do."""
    entry = details.entry
    head = _table(f"snapshot {entry.checkpoint_id}")
    head.add_column("field", style="bold")
    head.add_column("value")
    head.add_row("status", _status(entry))
    head.add_row("path", str(entry.path))
    head.add_row("created (UTC)", created(entry.created_at))
    head.add_row("step", "-" if entry.step is None else str(entry.step))
    head.add_row("policy version", entry.policy_version or "-")
    head.add_row("size", f"{size(entry.size)} in {entry.files} files")
    metrics = entry.manifest.metrics if entry.manifest else {}
    for name in SHOWN_METRICS:
        if name in metrics:
            head.add_row(name, f"{metrics[name]:.3f}".rstrip("0").rstrip("."))
    parts: list[RenderableType] = [head]
    if entry.gym_manifest is not None:
        instances = _table("Gym instances")
        for column in ("instance", "continued", "restarted", "staging rows", "participants"):
            instances.add_column(column, justify="left" if column == "instance" else "right")
        for instance_id, record in sorted(entry.gym_manifest.instances.items()):
            instances.add_row(
                instance_id,
                str(len(record.episodes)),
                str(len(record.restarts)),
                str(len(record.staging_keys)),
                str(len(record.participants)),
            )
        parts.append(instances)
    if details.participants:
        participants = _table("participants")
        for column in ("instance", "participant", "records", "size"):
            participants.add_column(
                column, justify="right" if column in ("records", "size") else "left"
            )
        for part in details.participants:
            participants.add_row(
                part.instance_id,
                f"{part.kind}/{part.name}",
                "?" if part.problem else str(part.records),
                size(part.size),
            )
        parts.append(participants)
    if details.outlook is not None:
        outlook = details.outlook
        restore = _table("a restore of this snapshot would")
        restore.add_column("rollouts", justify="right")
        restore.add_column("what")
        restore.add_row(str(len(outlook.continued)), "continue at their saved turn (attempt + 1)")
        restore.add_row(str(len(outlook.restarted)), "restart from their task (not captured)")
        restore.add_row(str(len(outlook.waiting)), "wait to be sent (never started)")
        restore.add_row(str(len(outlook.finished)), "stay finished (results kept)")
        parts.append(restore)
    parts += [Text(problem, style="red") for problem in details.problems]
    parts += [
        Text(f"{p.instance_id} {p.kind}/{p.name}: {p.problem}", style="red")
        for p in details.participants
        if p.problem
    ]
    return Group(*parts)


def verify_view(reports: Sequence[VerifyReport]) -> RenderableType:
    """``verify``: one table of checks per snapshot, then the overall verdict."""
    parts: list[RenderableType] = []
    for report in reports:
        verdict = "PASS" if report.passed else "FAIL"
        table = _table(f"{report.checkpoint_id}: {verdict}")
        table.add_column("", no_wrap=True)
        table.add_column("check")
        table.add_column("detail", overflow="fold")
        for check in report.checks:
            mark = Text("ok", style="green") if check.passed else Text("FAIL", style="bold red")
            table.add_row(mark, check.name, check.detail)
        parts.append(table)
    failed = sum(1 for report in reports if not report.passed)
    summary = (
        f"{len(reports)} snapshot(s) verified, {failed} failed"
        if reports
        else "no snapshot to verify"
    )
    parts.append(Text(summary, style="bold red" if failed else "bold"))
    return Group(*parts)


def foreign_lines(foreign: Sequence[Foreign], *, root: Path, verb: str) -> RenderableType:
    """One line per entry envckpt did not make, its path relative to ``root``.

    ``verb`` "left" (prune): ``left <path>: <why>``; else ``not a snapshot, left alone: ...``.
    """
    word = "left" if verb == "left" else "not a snapshot, left alone:"
    return Group(
        *(
            Text(f"{word} {_relative(entry.path, root)}: {entry.why}", style="yellow")
            for entry in foreign
        )
    )


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def foreign_json(entry: Foreign) -> dict[str, Any]:
    return {"path": str(entry.path), "why": entry.why}


def entry_json(entry: SnapshotEntry) -> dict[str, Any]:
    return {
        "id": entry.checkpoint_id,
        "path": str(entry.path),
        "status": entry.status,
        "problem": entry.problem,
        "step": entry.step,
        "policy_version": entry.policy_version,
        "created_at": entry.created_at,
        "created": iso(entry.created_at),
        "size": entry.size,
        "files": entry.files,
        "instances": {
            instance_id: {"continued": continued, "restarted": restarted}
            for instance_id, (continued, restarted) in sorted(entry.instances.items())
        },
        "episodes": entry.episodes,
        "restarts": entry.restarts,
    }


def details_json(details: SnapshotDetails) -> dict[str, Any]:
    entry = details.entry
    document = entry_json(entry)
    document["metrics"] = dict(entry.manifest.metrics) if entry.manifest else {}
    gym = entry.gym_manifest
    document["gym_checkpoint_id"] = None if gym is None else gym.checkpoint_id
    for instance_id, record in sorted((gym.instances if gym else {}).items()):
        document["instances"][instance_id].update(
            continued_episodes=[e.to_wire() for e in record.episodes],
            restarted_episodes=[e.to_wire() for e in record.restarts],
            staging_rows=len(record.staging_keys),
            participants=list(record.participants),
        )
    document["participants"] = [
        {
            "instance": p.instance_id,
            "kind": p.kind,
            "name": p.name,
            "records": p.records,
            "size": p.size,
            "problem": p.problem,
        }
        for p in details.participants
    ]
    outlook = details.outlook
    document["restore"] = (
        None
        if outlook is None
        else {
            "continued": list(outlook.continued),
            "restarted": list(outlook.restarted),
            "waiting": list(outlook.waiting),
            "finished": list(outlook.finished),
        }
    )
    document["problems"] = list(details.problems)
    return document


def report_json(report: VerifyReport) -> dict[str, Any]:
    return {
        "id": report.checkpoint_id,
        "path": str(report.path),
        "passed": report.passed,
        "checks": [
            {"check": check.name, "passed": check.passed, "detail": check.detail}
            for check in report.checks
        ],
    }
