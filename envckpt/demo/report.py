"""Plain-text tables, progress bars and the verdict the demo prints.

No third-party UI library: the demo must run on a bare CI machine and its
output is read in logs as often as on a terminal.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TextIO


def table(title: str, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A boxed, column-aligned text table."""
    body = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [f"== {title} ==", rule, line(headers), rule, *(line(r) for r in body), rule]
    return "\n".join(out)


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


class ProgressBar:
    """One line that redraws in place on a terminal, and prints sparsely otherwise."""

    def __init__(self, label: str, total: int, *, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = max(1, total)
        self.done = 0
        self.stream = stream or sys.stderr
        self._tty = self.stream.isatty()
        self._last_percent = -1

    def update(self, done: int, note: str = "") -> None:
        self.done = min(done, self.total)
        percent = int(100 * self.done / self.total)
        if self._tty:
            filled = int(30 * self.done / self.total)
            bar = "#" * filled + "." * (30 - filled)
            self.stream.write(f"\r{self.label:<12} [{bar}] {self.done}/{self.total} {note:<30}")
            self.stream.flush()
        elif percent // 25 != self._last_percent // 25:
            self.stream.write(f"{self.label}: {self.done}/{self.total} {note}\n")
            self.stream.flush()
        self._last_percent = percent

    def close(self) -> None:
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()


# The numbers verdict.json carries, in this order.
NUMBERS = (
    "continued_from_saved_turn",
    "restarted_from_task",
    "kills",
    "restores",
    "snapshots_published",
    "snapshots_failed",
    "turns_saved",
    "turns_recomputed",
)


@dataclass
class Verdict:
    """Checks computed from what happened; passed only if every one holds."""

    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    numbers: dict[str, int] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append((name, bool(ok), detail))

    def number(self, name: str, value: int) -> None:
        if name not in NUMBERS:
            raise ValueError(f"unknown verdict number {name!r}")
        self.numbers[name] = int(value)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)

    def failed(self) -> list[str]:
        return [name for name, ok, _ in self.checks if not ok]

    def render(self) -> str:
        rows = [("PASS" if ok else "FAIL", name, detail) for name, ok, detail in self.checks]
        text = table("verdict", ("", "check", "detail"), rows)
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


def summarize_pauses(pauses: Sequence[float]) -> str:
    if not pauses:
        return "no snapshots"
    p50, p95 = percentile(pauses, 0.5) * 1000, percentile(pauses, 0.95) * 1000
    mean = statistics.fmean(pauses) * 1000
    return f"{len(pauses)} snapshots, pause p50 {p50:.0f} ms, p95 {p95:.0f} ms, mean {mean:.0f} ms"
