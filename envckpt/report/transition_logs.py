"""The ``transition`` events of a run's structured logs, read leniently.

Every fired transition is one JSON line ``{"event": "transition", machine,
instance_id, trigger, source, dest, ...}`` (``docs/integration.md``,
"Logging"). A process killed mid-write can leave a line cut short; a report
names such lines and reads on::

    logs = find_logs(root)                 # <root>/trainer-*.log, <root>/run/*.jsonl
    events, problems = read_transitions(logs)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from envckpt.machines.binding import TransitionRecord

FIELDS = ("machine", "instance_id", "trigger", "source", "dest")
# Where the demo (and the nemo-gym job) write their JSON-lines logs.
PATTERNS = ("trainer-*.log", "run/*.jsonl")


def find_logs(root: Path) -> list[Path]:
    """The JSON-lines logs a job left under ``root`` (the demo's layout), sorted."""
    return sorted({path for pattern in PATTERNS for path in root.glob(pattern) if path.is_file()})


def read_transitions(paths: Iterable[Path]) -> tuple[list[TransitionRecord], list[str]]:
    """Every transition event of ``paths``; lines that are not JSON objects are problems.

    Lines that are JSON but another event are skipped silently: a log holds
    much besides transitions.
    """
    events: list[TransitionRecord] = []
    problems: list[str] = []
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as error:
            problems.append(f"{path}: {error}")
            continue
        bad = [number for number, line in enumerate(lines, start=1) if not _read(line, events)]
        if bad:
            problems.append(f"{path}: {_lines(bad)} not a JSON transition event; skipped")
    return events, problems


def _read(line: str, events: list[TransitionRecord]) -> bool:
    """Add ``line``'s transition to ``events``; False if the line is damaged."""
    if not line.strip():
        return True
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    if not isinstance(entry, dict):
        return False
    if entry.get("event") != "transition":
        return True
    if not all(isinstance(entry.get(field), str) for field in FIELDS):
        return False
    checkpoint_id = entry.get("checkpoint_id")
    elapsed = entry.get("elapsed")
    events.append(
        TransitionRecord(
            machine=entry["machine"],
            instance_id=entry["instance_id"],
            trigger=entry["trigger"],
            source=entry["source"],
            dest=entry["dest"],
            checkpoint_id=checkpoint_id if isinstance(checkpoint_id, str) else None,
            elapsed=float(elapsed) if isinstance(elapsed, int | float) else 0.0,
        )
    )
    return True


def _lines(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:5])
    more = f" and {len(numbers) - 5} more" if len(numbers) > 5 else ""
    return f"line{'s' if len(numbers) > 1 else ''} {shown}{more}"
