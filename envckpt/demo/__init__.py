"""``envckpt demo``: a training run that crashes, restores and finishes.

    envckpt demo [--instances N] [--rollouts M] [--seed S] [--dir PATH] [--in-process]

Prints a table per phase and a verdict computed from what happened, and
exits non-zero when the verdict fails.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

import structlog

from envckpt.demo.scenario import DemoSettings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envckpt demo", description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=4, help="Gym instances (default 4)")
    parser.add_argument("--rollouts", type=int, default=40, help="multi-turn rollouts (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="seed of tasks and crash point")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where checkpoints go (default: a temporary directory)",
    )
    parser.add_argument(
        "--snapshot-every", type=float, default=0.4, help="seconds between snapshots"
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run everything in this process; the crash drops it in memory",
    )
    parser.add_argument("--ray", action="store_true", help="host the Gym instances in Ray actors")
    parser.add_argument("--verbose", action="store_true", help="print every structured log event")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.verbose:
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(40),  # errors only
        )
    temporary = args.dir is None
    directory = Path(tempfile.mkdtemp(prefix="envckpt-demo-")) if temporary else args.dir
    settings = DemoSettings(
        instances=args.instances,
        rollouts=args.rollouts,
        seed=args.seed,
        directory=directory,
        snapshot_every=args.snapshot_every,
    )
    try:
        if args.in_process:
            from envckpt.demo.inprocess import run_demo

            verdict, text = asyncio.run(run_demo(settings))
        else:
            from envckpt.demo.processes import run_processes

            verdict, text = run_processes(settings, ray=args.ray)
    finally:
        if temporary:
            shutil.rmtree(directory, ignore_errors=True)
    print(text)
    print()
    print(verdict.render())
    if not temporary:
        print(f"checkpoints and results are in {directory}")
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
