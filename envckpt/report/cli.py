"""``envckpt report ROOT [--out PATH] [--logs LOG...] [--no-statecharts]``.

Writes one self-contained HTML page (default ``ROOT/report.html``) from a
snapshot root: its ``telemetry.jsonl``, the snapshots on disk, a job's event
log, results and ``verdict.json`` when present, and the structured
transition logs (``ROOT/trainer-*.log`` and ``ROOT/run/*.jsonl``, or
``--logs``).

Exit codes: 0 the page was written (a statechart the renderer could not draw
is named on stderr and on the page, and the rest is still drawn); 2 ROOT is
no snapshot root, or matplotlib (``envckpt[report]``) is missing; 1 the page
could not be written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from envckpt.extras import MissingExtra
from envckpt.telemetry.log import TELEMETRY_NAME
from envckpt.trainer.layout import SNAPSHOTS_DIR

EXIT_WRITE_FAILED = 1
EXIT_USAGE = 2


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "report",
        help="write one self-contained HTML page of a snapshot root's snapshots and restores",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("root", type=Path, help="the snapshot root (the demo's --dir)")
    parser.add_argument("--out", type=Path, default=None, help="the page (ROOT/report.html)")
    parser.add_argument(
        "--logs", type=Path, nargs="+", metavar="LOG", help="JSON-lines logs with transitions"
    )
    parser.add_argument(
        "--no-statecharts",
        action="store_true",
        help="skip the four statecharts (they need the Mermaid renderer, a few seconds)",
    )


def run(args: argparse.Namespace) -> int:
    root: Path = args.root
    if not root.is_dir():
        return _fail(f"{root} is not a directory", EXIT_USAGE)
    if not (root / TELEMETRY_NAME).exists() and not (root / SNAPSHOTS_DIR).is_dir():
        return _fail(
            f"{root} is no snapshot root: it has neither {TELEMETRY_NAME} nor {SNAPSHOTS_DIR}/",
            EXIT_USAGE,
        )
    try:
        from envckpt.report.build import build_report
    except MissingExtra as error:
        return _fail(str(error), EXIT_USAGE)
    out: Path = args.out or root / "report.html"
    built = build_report(root, logs=args.logs, statecharts=not args.no_statecharts)
    if built.notice:
        print(f"envckpt report: {built.notice}", file=sys.stderr)
    for problem in built.problems:
        print(f"envckpt report: could not read {problem}", file=sys.stderr)
    try:
        out.write_text(built.html, encoding="utf-8")
    except OSError as error:
        return _fail(f"cannot write {out}: {error.strerror or error}", EXIT_WRITE_FAILED)
    print(f"wrote {out}: {built.summary}")
    return 0


def _fail(message: str, code: int) -> int:
    print(f"envckpt report: {message}", file=sys.stderr)
    return code
