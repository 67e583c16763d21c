"""Text tables and the verdict the demo prints, no wider than 100 columns.

The output is read in CI logs as often as on a terminal: tables are drawn by
``rich`` in ASCII, 100 columns at most (a cell too long for its column wraps
inside it), with no colour or terminal codes.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich import box
from rich.console import Console
from rich.table import Table

WIDTH = 100


def table(title: str, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A boxed, column-aligned ASCII table under ``== title ==``, at most 100 columns wide."""
    drawn = Table(box=box.ASCII, show_lines=False)
    for header in headers:
        drawn.add_column(header, overflow="fold")
    for row in rows:
        drawn.add_row(*(str(cell) for cell in row))
    stream = io.StringIO()
    Console(file=stream, width=WIDTH, color_system=None, highlight=False).print(drawn)
    lines = [line.rstrip() for line in stream.getvalue().splitlines()]
    return "\n".join([f"== {title} ==", *lines])


def wrapped(text: str, *, indent: str = "") -> str:
    """``text`` wrapped at 100 columns, continuation lines indented by ``indent``."""
    return textwrap.fill(text, width=WIDTH, subsequent_indent=indent)


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


# The numbers verdict.json carries, in this order. ``kills`` are the
# interruptions that struck, ``kills_planned`` those the plan asked for;
# ``requeues_after_finish`` the runs that found the job finished and did nothing.
NUMBERS = (
    "continued_from_saved_turn",
    "restarted_from_task",
    "kills",
    "kills_planned",
    "restores",
    "snapshots_published",
    "snapshots_failed",
    "turns_saved",
    "turns_recomputed",
    "model_calls_refused",
    "max_pause_seconds",
    "requeues_after_finish",
)
# Numbers that are measured, not counted: kept as floats (3 decimals).
FLOAT_NUMBERS = frozenset({"max_pause_seconds"})


@dataclass
class Verdict:
    """Checks computed from what happened; passed only if every one holds."""

    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    numbers: dict[str, float] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append((name, bool(ok), detail))

    def number(self, name: str, value: float) -> None:
        if name not in NUMBERS:
            raise ValueError(f"unknown verdict number {name!r}")
        self.numbers[name] = round(float(value), 3) if name in FLOAT_NUMBERS else int(value)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)

    def failed(self) -> list[str]:
        return [name for name, ok, _ in self.checks if not ok]

    def render(self) -> str:
        # The detail goes under its check: side by side they need about 170 columns.
        rows = [
            ("PASS" if ok else "FAIL", f"{name}\n  {detail}" if detail else name)
            for name, ok, detail in self.checks
        ]
        text = table("verdict", ("", "check, and what was found"), rows)
        return f"{text}\nVERDICT: {'PASS' if self.passed else 'FAIL'}"

    def to_json(self) -> dict[str, object]:
        """``verdict.json``: passed, the numbers, and one entry per check with its detail."""
        document: dict[str, object] = {"passed": self.passed}
        document.update({name: self.numbers.get(name, 0) for name in NUMBERS})
        document["checks"] = [
            {"check": name, "passed": ok, "detail": detail} for name, ok, detail in self.checks
        ]
        return document


def pause_warnings(snapshots: Sequence[tuple[float, float, str]]) -> int:
    """Snapshots that paused longer than the environment ran since the one before.

    ``snapshots``: (end time, paused seconds, reason) of one run, in order;
    only timer snapshots are judged, as the snapshotter's warning does.
    """
    warnings = 0
    previous_end: float | None = None
    for end, paused, reason in snapshots:
        if previous_end is not None and reason == "timer":
            running = (end - paused) - previous_end
            if paused > running:
                warnings += 1
        previous_end = end
    return warnings
