"""``python -m transition_coverage FILE...``: the per-table report, per machine and transport.

Exits 1 if a row was missed, by either run (in-process, HTTP) of any machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

from envckpt.statecharts.overlay import load_coverage

from transition_coverage.rows import coverage_report


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m transition_coverage COVERAGE.jsonl [...]", file=sys.stderr)
        return 2
    report = coverage_report(load_coverage([Path(arg) for arg in argv]))
    print(report.text())
    return 1 if report.never or report.missed() else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
