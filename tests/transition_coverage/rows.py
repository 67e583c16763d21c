"""Rows of the machine tables, and which of them a set of recorded transitions exercised.

A row is one ``(source, trigger)`` pair of a table (the table maps it to one
destination). Records come from the pytest plugin's JSON-lines file or any
transition log (``envckpt.statecharts.overlay.load_coverage``):

    entries = load_coverage([Path("build/transition-coverage.jsonl")])
    report = coverage_report(entries)
    print(report.text())        # per row: http / in-process / never, then summary_lines()
    report.never                # rows no test exercised
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from envckpt.machines.tables import ALL_TABLES
from envckpt.statecharts.overlay import CoverageEntry

HTTP = "http"
IN_PROCESS = "in-process"

Row = tuple[str, str, str]  # machine, source, trigger
# The ledger lives in the trainer's own process and never crosses a control
# route: no HTTP run can fire its rows, so it is judged in-process only (its
# rows fired during a test that crossed HTTP still show in the per-row detail).
IN_PROCESS_ONLY = frozenset({"rollout_ledger"})
WHY_IN_PROCESS = "the trainer's own ledger: no control route reaches it"


def all_rows() -> list[Row]:
    return [
        (table.name, str(source), trigger)
        for table in ALL_TABLES
        for source, trigger, _ in table.edges()
    ]


@dataclass
class CoverageReport:
    """Counts per row and transport; rows never fired; transitions no table has."""

    counts: dict[Row, Counter[str]] = field(default_factory=dict)
    foreign: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)

    @property
    def rows(self) -> list[Row]:
        return all_rows()

    @property
    def covered(self) -> list[Row]:
        return [row for row in self.rows if sum(self.counts.get(row, Counter()).values())]

    @property
    def never(self) -> list[Row]:
        return [row for row in self.rows if not sum(self.counts.get(row, Counter()).values())]

    def over_http(self) -> list[Row]:
        return [row for row in self.rows if self.counts.get(row, Counter())[HTTP]]

    def by_transport(self, via: str) -> list[Row]:
        """Rows fired by the in-process run (``IN_PROCESS``) or the HTTP run (``HTTP``)."""
        return [row for row in self.rows if self.counts.get(row, Counter())[via]]

    def missed(self) -> dict[tuple[str, str], list[Row]]:
        """Per (machine, transport): the rows that run never fired (HTTP n/a: the ledger)."""
        found: dict[tuple[str, str], list[Row]] = {}
        for via in (IN_PROCESS, HTTP):
            fired = set(self.by_transport(via))
            for table in ALL_TABLES:
                if via == HTTP and table.name in IN_PROCESS_ONLY:
                    continue
                rows = [r for r in self.rows if r[0] == table.name and r not in fired]
                if rows:
                    found[(table.name, via)] = rows
        return found

    def per_transport(self) -> list[str]:
        """One line per machine and transport: rows fired of rows declared."""
        lines = []
        for table in ALL_TABLES:
            rows = [row for row in self.rows if row[0] == table.name]
            for via in (IN_PROCESS, HTTP):
                if via == HTTP and table.name in IN_PROCESS_ONLY:
                    lines.append(
                        f"{table.name} {via}: n/a, in-process only by design ({WHY_IN_PROCESS})"
                    )
                    continue
                fired = sum(1 for row in rows if self.counts.get(row, Counter())[via])
                lines.append(f"{table.name} {via}: {fired}/{len(rows)}")
        return lines

    def summary(self) -> str:
        return f"transition coverage: {len(self.covered)}/{len(self.rows)} rows"

    def text(self) -> str:
        lines = []
        for table in ALL_TABLES:
            rows = [row for row in self.rows if row[0] == table.name]
            http = sum(1 for row in rows if self.counts.get(row, Counter())[HTTP])
            fired = sum(1 for row in rows if sum(self.counts.get(row, Counter()).values()))
            lines.append(f"{table.name}: {fired}/{len(rows)} rows exercised, {http} over real HTTP")
            for row in rows:
                counts = self.counts.get(row, Counter())
                total = sum(counts.values())
                if not total:
                    how = "NEVER"
                elif counts[HTTP]:
                    how = f"http x{counts[HTTP]}, in-process x{total - counts[HTTP]}"
                else:
                    how = f"in-process only x{total}"
                lines.append(f"  {row[1]:>16} --{row[2]}--> {how}")
        for (machine, source, trigger, dest), count in sorted(self.foreign.items()):
            lines.append(f"not in any table: {machine} {source} --{trigger}--> {dest} x{count}")
        return "\n".join(lines + self.summary_lines())

    def summary_lines(self) -> list[str]:
        """The per-machine, per-transport counts, each gap by name, then the total line."""
        lines = self.per_transport()
        for (machine, via), rows in sorted(self.missed().items()):
            lines.append(f"MISSED {machine} {via}: " + ", ".join(f"{s}--{t}" for _, s, t in rows))
        lines.append(self.summary())
        return lines


def coverage_report(entries: Iterable[CoverageEntry]) -> CoverageReport:
    report = CoverageReport()
    known = {(t.name, str(s), trig): str(d) for t in ALL_TABLES for s, trig, d in t.edges()}
    for entry in entries:
        row = (entry.machine, entry.source, entry.trigger)
        if known.get(row) != entry.dest:
            report.foreign[(*row, entry.dest)] += entry.count
            continue
        report.counts.setdefault(row, Counter())[entry.via] += entry.count
    return report
