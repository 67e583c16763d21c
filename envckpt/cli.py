"""The ``envckpt`` console script: a thin argparse front over the library.

    envckpt statecharts [--dir statecharts] [--check | --svg | --overlay LOG --machine NAME]
    envckpt demo [ARGS...]        # every argument goes to envckpt.demo.main

``main`` returns the exit code instead of exiting, so tests call it directly.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from envckpt import statecharts
from envckpt.machines.tables import ALL_TABLES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envckpt", description="Turn-level checkpoint/restore of RL environment rollouts."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    charts = commands.add_parser(
        "statecharts",
        help="regenerate, check or overlay the machine statecharts",
        description="Write the statecharts generated from the machine tables into --dir.",
    )
    charts.add_argument(
        "--dir", type=Path, default=Path("statecharts"), help="target directory (%(default)s)"
    )
    mode = charts.add_mutually_exclusive_group()
    mode.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if any file is out of date"
    )
    mode.add_argument(
        "--svg", action="store_true", help="also write <name>.svg (needs Graphviz dot)"
    )
    mode.add_argument(
        "--overlay",
        type=Path,
        metavar="LOGFILE",
        help="print a chart of the transitions a JSON-lines log recorded (needs --machine)",
    )
    charts.add_argument(
        "--machine", choices=[table.name for table in ALL_TABLES], help="machine to overlay"
    )
    charts.add_argument(
        "--docs",
        type=Path,
        default=Path("docs"),
        help="Markdown whose statechart regions are refilled and checked too (%(default)s)",
    )

    # Declared for --help only: main() forwards the raw arguments before parsing.
    commands.add_parser("demo", help="run the crash-and-restore demo (arguments go to it)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else list(argv)
    if args_list[:1] == ["demo"]:
        return _demo(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command == "statecharts":
        if (args.overlay is None) != (args.machine is None):
            parser.error("--overlay and --machine go together")
        return _statecharts(args)
    parser.print_help(sys.stderr)
    return 2


def _statecharts(args: argparse.Namespace) -> int:
    directory: Path = args.dir
    if args.overlay is not None:
        table = next(table for table in ALL_TABLES if table.name == args.machine)
        try:
            records = statecharts.load_records(args.overlay)
        except (OSError, ValueError) as exc:
            print(f"envckpt statecharts: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write(statecharts.overlay(table, records))
        return 0
    if args.check:
        problems = statecharts.check(directory) + statecharts.check_docs(args.docs)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print(
                f"statecharts out of date: run `envckpt statecharts --dir {directory}`",
                file=sys.stderr,
            )
            return 1
        print(f"{directory}: statecharts up to date")
        return 0
    changed = statecharts.write(directory) + statecharts.write_docs(args.docs)
    for path in changed:
        print(f"updated {path}")
    if not changed:
        print(f"{directory}: statecharts up to date")
    if args.svg:
        written = statecharts.svg(directory)
        for path in written:
            print(f"wrote {path}")
        if not written:
            print("Graphviz dot not found; no SVG written", file=sys.stderr)
    return 0


def _demo(argv: list[str]) -> int:
    try:
        module = importlib.import_module("envckpt.demo")
    except ModuleNotFoundError as exc:
        if exc.name == "envckpt.demo":
            print(
                "envckpt demo: this installation has no demo (envckpt.demo is missing)",
                file=sys.stderr,
            )
        else:
            print(
                f"envckpt demo: needs the module {exc.name!r}; install envckpt[http,dev]",
                file=sys.stderr,
            )
        return 2
    demo_main: Callable[[list[str]], int] = module.main
    return int(demo_main(argv))


if __name__ == "__main__":
    raise SystemExit(main())
