"""``python -m transition_coverage [--summary] FILE...``: the report, per machine and transport.

Every row with its counts, then one line per machine and transport (rows
fired of rows declared), each gap by name and the total; ``--summary``
prints only those last lines. Exits 1 if a row was missed, by either run
(in-process, HTTP) of any machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

from envckpt.statecharts.overlay import load_coverage

from transition_coverage.rows import coverage_report


def main(argv: list[str]) -> int:
    summary = argv[:1] == ["--summary"]
    paths = argv[1:] if summary else argv
    if not paths:
        print(
            "usage: python -m transition_coverage [--summary] COVERAGE.jsonl [...]",
            file=sys.stderr,
        )
        return 2
    report = coverage_report(load_coverage([Path(arg) for arg in paths]))
    print("\n".join(report.summary_lines()) if summary else report.text())
    return 1 if report.never or report.missed() else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
