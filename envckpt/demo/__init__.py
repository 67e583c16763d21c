"""``envckpt demo``: a training run that is interrupted, restores and finishes.

    envckpt demo [--instances N] [--rollouts M] [--seed S] [--kills K] [--preempt]
                 [--dir PATH [--force]] [--in-process | --ray [--nodes N]]
    envckpt demo --nemo-gym [--rollouts M] [--seed S] [--kills K] [--dir PATH [--force]]

Prints a table of runs and restores, the work saved, and a verdict computed
from what happened; writes ``verdict.json`` into its directory and exits
non-zero when the verdict fails.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import structlog

from envckpt.demo.plan import plan_interruptions
from envckpt.demo.scenario import DemoSettings

NEMO_GYM_ROLLOUTS = 10


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envckpt demo", description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=None, help="Gym instances (default 4)")
    parser.add_argument(
        "--rollouts",
        type=int,
        default=None,
        help=f"multi-turn rollouts (default 40; {NEMO_GYM_ROLLOUTS} with --nemo-gym)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of tasks and interruptions")
    parser.add_argument(
        "--kills",
        type=int,
        default=None,
        help="interruptions (default 2: one mid-run, one inside the restore after it; "
        "1 with --preempt)",
    )
    parser.add_argument(
        "--preempt",
        action="store_true",
        help="interrupt with SIGTERM (a final snapshot, then exit) instead of SIGKILL",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the run's files go (default: a temporary directory); must be empty",
    )
    parser.add_argument("--force", action="store_true", help="clear a non-empty --dir first")
    parser.add_argument(
        "--snapshot-every",
        type=float,
        default=0.5,
        help="seconds between snapshots, at least (never under 3x the last pause)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run everything in this process; a kill drops it from memory",
    )
    parser.add_argument("--ray", action="store_true", help="host the Gym instances in Ray actors")
    parser.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="with --ray: run on a local cluster of N nodes and kill --kills of them (default 1)",
    )
    parser.add_argument(
        "--nemo-gym",
        action="store_true",
        help="run the job over 2 real nemo-gym deployments instead (needs nemo-gym 0.7.0)",
    )
    parser.add_argument("--verbose", action="store_true", help="print every structured log event")
    return parser


def prepare_directory(directory: Path, *, force: bool) -> str | None:
    """Make ``directory`` an empty directory; the reason it cannot be, or None.

    A reused directory would mix two runs' events and results. ``force``
    clears it, but never a directory that holds the current one or the home.
    """
    directory = directory.expanduser()
    if directory.exists() and not directory.is_dir():
        return f"{directory} exists and is not a directory"
    if directory.is_dir() and any(directory.iterdir()):
        if not force:
            return f"{directory} is not empty; pick an empty one, or pass --force to clear it"
        resolved = directory.resolve()
        protected = {Path("/"), Path.home().resolve(), *Path.cwd().resolve().parents}
        if resolved in protected or resolved == Path.cwd().resolve():
            return f"refusing to clear {resolved}: it holds the current directory or your home"
        for child in directory.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"cannot create {directory}: {error.strerror or error}"
    return None


def _check_nemo_gym_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--nemo-gym runs its own 2 deployments as processes, interrupted by SIGKILL only."""
    for flag, given in (
        ("--instances", args.instances is not None),
        ("--in-process", args.in_process),
        ("--ray", args.ray),
        ("--preempt", args.preempt),
    ):
        if given:
            parser.error(f"--nemo-gym does not take {flag}")
    if args.rollouts is not None and args.rollouts < 2:
        parser.error("--nemo-gym needs at least 2 rollouts, one per deployment")
    if importlib.util.find_spec("responses_api_agents") is None:
        parser.error("--nemo-gym needs nemo-gym 0.7.0 installed (make install does it)")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.in_process and args.ray:
        parser.error("--in-process and --ray exclude each other")
    if args.nemo_gym:
        _check_nemo_gym_args(parser, args)
    if args.nodes is not None:
        from envckpt.demo.ray_nodes_args import check_nodes_args

        check_nodes_args(parser, args)
    kills = args.kills if args.kills is not None else (1 if args.preempt or args.nodes else 2)
    if kills < 1:
        parser.error("--kills must be at least 1: the demo shows a restore")
    if not args.verbose:
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(40),  # errors only
        )
    temporary = args.dir is None
    directory = Path(tempfile.mkdtemp(prefix="envckpt-demo-")) if temporary else args.dir
    problem = None if temporary else prepare_directory(directory, force=args.force)
    if problem is not None:
        print(f"envckpt demo: {problem}", file=sys.stderr)
        return 2
    settings = DemoSettings(
        instances=4 if args.instances is None else args.instances,
        rollouts=40 if args.rollouts is None else args.rollouts,
        seed=args.seed,
        directory=directory,
        snapshot_every=args.snapshot_every,
    )
    plan = plan_interruptions(seed=args.seed, kills=kills, preempt=args.preempt)
    try:
        if args.nemo_gym:
            from envckpt.demo.nemo_gym import NemoGymDemo, run_nemo_gym

            demo = NemoGymDemo(
                directory=directory,
                rollouts=NEMO_GYM_ROLLOUTS if args.rollouts is None else args.rollouts,
                seed=args.seed,
                snapshot_every=args.snapshot_every,
            )
            verdict, text = run_nemo_gym(demo, plan)
        elif args.nodes is not None:
            from envckpt.demo.ray_cluster import run_ray_nodes

            verdict, text = run_ray_nodes(settings, nodes=args.nodes, kills=kills)
        elif args.in_process:
            from envckpt.demo.inprocess import run_demo

            verdict, text = asyncio.run(run_demo(settings, plan))
        else:
            from envckpt.demo.processes import run_processes

            verdict, text = run_processes(settings, plan, ray=args.ray)
    finally:
        if temporary:
            shutil.rmtree(directory, ignore_errors=True)
    print(text)
    print()
    print(verdict.render())
    if not temporary:
        print(f"checkpoints, results and verdict.json are in {directory}")
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
