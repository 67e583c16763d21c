"""The ``envckpt`` console script: a thin argparse front over the library.

    envckpt statecharts [--dir statecharts] [--docs docs] [--check]
    envckpt statecharts --render DIR                      # one SVG per machine
    envckpt statecharts --overlay LOG [LOG ...] --machine NAME [--render DIR]
    envckpt statecharts --coverage LOG [LOG ...] [--machine NAME] [--render DIR]
    envckpt snapshots list|show|verify|prune|delete ROOT ...   # see envckpt.snapshots.cli
    envckpt report ROOT [--out PAGE]    # one HTML page of a root's snapshots (envckpt.report.cli)
    envckpt demo [ARGS...]        # every argument goes to envckpt.demo.main

``main`` returns the exit code instead of exiting, so tests call it directly.
A command that needs an optional extra that is not installed exits 2 and
names the extra (``pip install 'envckpt[http]'``) instead of a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envckpt.extras import EXTRAS, MissingExtra, missing_extra
from envckpt.machines.tables import ALL_TABLES
from envckpt.statecharts import embeds
from envckpt.statecharts.charts import mermaid
from envckpt.statecharts.overlay import (
    NoTransitions,
    coverage,
    load_coverage,
    load_records,
    overlay,
)
from envckpt.statecharts.renderer import RendererMissing, RenderFailed, render_svgs
from envckpt.statecharts.svg_layout import read_svg


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envckpt", description="Turn-level checkpoint/restore of RL environment rollouts."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    charts = commands.add_parser(
        "statecharts",
        help="regenerate, check, render or overlay the machine statecharts",
        description="Write the statecharts generated from the machine tables into --dir"
        " and refill the charts embedded in --docs.",
    )
    charts.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"target directory ({DEFAULT_CHARTS}; outside an envckpt checkout, required)",
    )
    charts.add_argument(
        "--docs",
        type=Path,
        default=Path("docs"),
        help="Markdown whose statechart regions are refilled and checked too (%(default)s)",
    )
    charts.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if any file is out of date"
    )
    charts.add_argument(
        "--render",
        type=Path,
        metavar="DIR",
        help="write DIR/<machine>.svg (or the overlay's SVG) with the real Mermaid renderer",
    )
    charts.add_argument(
        "--overlay",
        type=Path,
        nargs="+",
        metavar="LOG",
        help="draw the transitions JSON-lines logs recorded (needs --machine)",
    )
    charts.add_argument(
        "--coverage",
        type=Path,
        nargs="+",
        metavar="LOG",
        help="draw how often the tests (or any run) exercised each row, per transport"
        " (every machine, or --machine); LOG from pytest --transition-coverage or a transition log",
    )
    charts.add_argument(
        "--machine", choices=[table.name for table in ALL_TABLES], help="machine to overlay"
    )

    snapshots_cli().add_parser(commands)
    report_cli().add_parser(commands)
    # Declared for --help only: main() forwards the raw arguments before parsing.
    commands.add_parser("demo", help="run the crash-and-restore demo (arguments go to it)")
    return parser


DEFAULT_CHARTS = Path("statecharts")


def snapshots_cli() -> Any:
    """``envckpt.snapshots.cli``, imported when the parser is built (it needs rich)."""
    return importlib.import_module("envckpt.snapshots.cli")


def report_cli() -> Any:
    """``envckpt.report.cli`` (matplotlib is imported only when a page is built)."""
    return importlib.import_module("envckpt.report.cli")


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else list(argv)
    if args_list[:1] == ["demo"]:
        return _demo(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command == "snapshots":
        return int(snapshots_cli().run(args))
    if args.command == "report":
        return int(report_cli().run(args))
    if args.command == "statecharts":
        if args.overlay is not None and args.coverage is not None:
            parser.error("--overlay and --coverage draw different things: give one")
        if args.coverage is None and (args.overlay is None) != (args.machine is None):
            parser.error("--overlay and --machine go together")
        if args.check and (
            args.render is not None or args.overlay is not None or args.coverage is not None
        ):
            parser.error(
                "--check writes nothing: it cannot be combined with --render, --overlay"
                " or --coverage"
            )
        return _statecharts(args)
    parser.print_help(sys.stderr)
    return 2


def in_checkout(directory: Path) -> bool:
    """Whether ``directory`` is an envckpt source checkout (where ./statecharts belongs)."""
    if (directory / DEFAULT_CHARTS).is_dir():
        return True
    try:
        project = (directory / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return 'name = "envckpt"' in project


def _statecharts(args: argparse.Namespace) -> int:
    if args.overlay is not None:
        return _overlay(args)
    if args.coverage is not None:
        return _coverage(args)
    if args.render is not None:
        return _render({table.name: mermaid(table) for table in ALL_TABLES}, args.render)
    if args.dir is None and not in_checkout(Path.cwd()):
        # Writing ./statecharts into whatever directory the user stands in
        # would litter it: outside a checkout, the target must be asked for.
        print(
            f"envckpt statecharts: {Path.cwd()} is not an envckpt checkout (no statecharts/, "
            "no envckpt pyproject.toml); run it in a checkout, or pass --dir DIR (and --docs "
            "DIR for the Markdown to refill)",
            file=sys.stderr,
        )
        return 2
    directory: Path = args.dir or DEFAULT_CHARTS
    if args.check:
        problems = embeds.check(directory) + embeds.check_docs(args.docs)
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
    changed = embeds.write(directory) + embeds.write_docs(args.docs)
    for path in changed:
        print(f"updated {path}")
    if not changed:
        print(f"{directory}: statecharts up to date")
    return 0


def _overlay(args: argparse.Namespace) -> int:
    table = next(table for table in ALL_TABLES if table.name == args.machine)
    try:
        chart = overlay(table, load_records(args.overlay))
    except NoTransitions as exc:
        logs = ", ".join(str(path) for path in args.overlay)
        print(f"envckpt statecharts: nothing to draw: {exc} in {logs}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"envckpt statecharts: {exc}", file=sys.stderr)
        return 2
    if args.render is None:
        sys.stdout.write(chart)
        return 0
    return _render({f"{table.name}.overlay": chart}, args.render)


def _coverage(args: argparse.Namespace) -> int:
    tables = [t for t in ALL_TABLES if args.machine in (None, t.name)]
    try:
        entries = load_coverage(args.coverage)
    except (OSError, ValueError) as exc:
        print(f"envckpt statecharts: {exc}", file=sys.stderr)
        return 2
    charts = {f"{table.name}.coverage": coverage(table, entries) for table in tables}
    if args.render is None:
        sys.stdout.write("\n".join(charts.values()))
        return 0
    return _render(charts, args.render)


def _render(charts: dict[str, str], directory: Path) -> int:
    try:
        written = render_svgs(charts, directory)
    except RendererMissing as exc:
        print(f"envckpt statecharts: cannot render: {exc}", file=sys.stderr)
        return 2
    except RenderFailed as exc:
        print(f"envckpt statecharts: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}: {read_svg(path.read_text(encoding='utf-8')).summary()}")
    return 0


def _demo(argv: list[str]) -> int:
    asking_for_help = bool({"-h", "--help"} & set(argv))
    needed = ["http", *(["ray"] if "--ray" in argv else [])]
    try:
        if not asking_for_help:
            for extra in needed:
                _require_extra(extra)
        module = importlib.import_module("envckpt.demo")
        demo_main: Callable[[list[str]], int] = module.main
        return int(demo_main(argv))
    except MissingExtra as exc:
        return _missing(exc)
    except ModuleNotFoundError as exc:
        if exc.name == "envckpt.demo":
            print(
                "envckpt demo: this installation has no demo (envckpt.demo is missing)",
                file=sys.stderr,
            )
            return 2
        found = missing_extra(exc)
        if found is None:
            raise  # not one of our optional modules: a real bug, keep the traceback
        return _missing(found)


def _require_extra(extra: str) -> None:
    """``MissingExtra`` unless every module of ``extra`` can be imported."""
    for module in EXTRAS[extra]:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(module, extra)


def _missing(error: MissingExtra) -> int:
    print(f"envckpt demo: needs the module {error.module!r}: {error}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
