"""``envckpt demo``: a training run that is interrupted, restores and finishes.

    envckpt demo [--instances N] [--rollouts M] [--seed S] [--kills K] [--preempt]
                 [--dir PATH [--force]] [--in-process | --ray [--nodes N]] [--allow-fresh-start]
    envckpt demo --nemo-gym [--rollouts M] [--seed S] [--kills K] [--dir PATH [--force]]
                 [--generation-seconds G] [--prepare-seconds P]
    envckpt demo --dir PATH --resume [--allow-fresh-start]   # go on with an interrupted run

Prints a table of runs and restores, the work saved, and a verdict computed
from what happened; writes ``verdict.json`` into its directory (kept, and
named at the end, also when it is a temporary one). Exit codes: 0 the
verdict passed; 1 it failed; 2 bad arguments; 3 the directory cannot be used
or the job refused to start; 4 the job's snapshots kept failing; 5 its
environment restore failed (the job's own codes, ``JobExit``, with its line).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import sys
import tempfile
from pathlib import Path

import structlog

from envckpt.demo.clearing import clear_demo_directory
from envckpt.demo.plan import plan_interruptions
from envckpt.demo.report import Verdict
from envckpt.demo.scenario import DemoSettings
from envckpt.trainer.job_errors import JobExit

NEMO_GYM_ROLLOUTS = 10
# The job's own exit codes the demo passes on (its refusal to start, failing
# snapshots, a failed restore), each with the job's last line.
JOB_EXITS = (
    int(JobExit.START_REFUSED),
    int(JobExit.SNAPSHOTS_FAILING),
    int(JobExit.RESTORE_FAILED),
)
UNUSABLE = "cannot use"
TRAINER_SAYS = "envckpt trainer:"  # how the job's trainer starts each message of its own
DEFAULT_SNAPSHOT_EVERY = 0.5
# A snapshot refuses the generations still running; each is asked again after
# resume. Snapshots closer together than a generation takes would refuse the
# same calls every time and no rollout would move: leave each room for two.
GENERATIONS_BETWEEN_SNAPSHOTS = 2.5


def snapshot_every(given: float | None, generation_seconds: float | None) -> float:
    """The seconds between snapshots: as given, else long enough for generations to finish."""
    if given is not None:
        return given
    return max(DEFAULT_SNAPSHOT_EVERY, GENERATIONS_BETWEEN_SNAPSHOTS * (generation_seconds or 0.0))


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
        help="where the run's files go (default: a new temporary directory, kept); "
        "must be empty (or --force, or --resume)",
    )
    parser.add_argument("--force", action="store_true", help="clear a non-empty --dir first")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted demo run in --dir (its settings and plan come from there)",
    )
    parser.add_argument(
        "--generation-seconds",
        type=float,
        default=None,
        help="--nemo-gym: seconds each model call takes (default 0.15; a real model: 10-60)",
    )
    parser.add_argument(
        "--prepare-seconds",
        type=float,
        default=None,
        help="--nemo-gym: a snapshot's prepare budget; generations still running half-way "
        "through it are refused and asked again after resume (default 30)",
    )
    parser.add_argument(
        "--snapshot-every",
        type=float,
        default=None,
        help="seconds between snapshots, at least (never under 3x the last pause); default "
        "0.5, and with --generation-seconds G at least 2.5 G",
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
    parser.add_argument(
        "--allow-fresh-start",
        action="store_true",
        help="when the job's trainer refuses every snapshot, it starts from scratch instead of "
        "exiting 3 (passed on to the trainer; with --resume, kept for the rest of the run)",
    )
    parser.add_argument("--verbose", action="store_true", help="print every structured log event")
    return parser


def prepare_directory(directory: Path, *, force: bool) -> str | None:
    """Make ``directory`` an empty directory; the reason it cannot be, or None.

    A reused directory would mix two runs' events and results. ``force``
    clears what a demo wrote there (``clearing``: anything else is left and
    named on stderr), and never in a directory that holds the current one or
    the home.
    """
    directory = directory.expanduser()
    if directory.exists() and not directory.is_dir():
        return f"{UNUSABLE} {directory}: it exists and is not a directory"
    if directory.is_dir() and any(directory.iterdir()):
        if not force:
            return f"{directory} is not empty; pick an empty one, or pass --force to clear it"
        resolved = directory.resolve()
        protected = {Path("/"), Path.home().resolve(), *Path.cwd().resolve().parents}
        if resolved in protected or resolved == Path.cwd().resolve():
            return f"refusing to clear {resolved}: it holds the current directory or your home"
        try:
            cleared = clear_demo_directory(resolved)
        except OSError as error:
            return f"{UNUSABLE} {directory}: {error.strerror or error}"
        for name, why in cleared.left:
            print(f"envckpt demo: --force left {resolved / name}: {why}", file=sys.stderr)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"{UNUSABLE} {directory}: {error.strerror or error}"
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
    for flag, value in (
        ("--generation-seconds", args.generation_seconds),
        ("--prepare-seconds", args.prepare_seconds),
    ):
        if value is not None and not value > 0:
            parser.error(f"{flag} must be above 0")
    if importlib.util.find_spec("responses_api_agents") is None:
        parser.error("--nemo-gym needs nemo-gym 0.7.0 installed (make install does it)")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.in_process and args.ray:
        parser.error("--in-process and --ray exclude each other")
    if args.nemo_gym:
        _check_nemo_gym_args(parser, args)
    elif args.generation_seconds is not None or args.prepare_seconds is not None:
        parser.error("--generation-seconds and --prepare-seconds go with --nemo-gym")
    if args.resume:
        _check_resume_args(parser, args)
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
    if args.dir is None:
        directory = Path(tempfile.mkdtemp(prefix="envckpt-demo-"))
    else:
        directory = args.dir.expanduser().absolute()  # a relative one, from here
        problem = None if args.resume else prepare_directory(directory, force=args.force)
        if problem is not None:
            print(f"envckpt demo: {problem}", file=sys.stderr)
            return 3 if problem.startswith(UNUSABLE) else 2
    if args.resume:
        return _resume(args, directory)
    settings = DemoSettings(
        instances=4 if args.instances is None else args.instances,
        rollouts=40 if args.rollouts is None else args.rollouts,
        seed=args.seed,
        directory=directory,
        snapshot_every=DEFAULT_SNAPSHOT_EVERY
        if args.snapshot_every is None
        else args.snapshot_every,
        allow_fresh_start=args.allow_fresh_start,
    )
    plan = plan_interruptions(seed=args.seed, kills=kills, preempt=args.preempt)
    if args.nemo_gym:
        from envckpt.demo.nemo_gym import NemoGymDemo, run_nemo_gym

        timing = {
            name: value
            for name, value in (
                ("policy_latency", args.generation_seconds),
                ("prepare_seconds", args.prepare_seconds),
            )
            if value is not None
        }
        demo = NemoGymDemo(
            directory=directory,
            rollouts=NEMO_GYM_ROLLOUTS if args.rollouts is None else args.rollouts,
            seed=args.seed,
            snapshot_every=snapshot_every(args.snapshot_every, args.generation_seconds),
            allow_fresh_start=args.allow_fresh_start,
            **timing,
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
    return _report(verdict, text, directory)


def _check_resume_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--resume goes on with what --dir holds: it takes no settings of its own."""
    if args.dir is None:
        parser.error("--resume needs --dir: the directory of the run to continue")
    given = [
        flag
        for flag, value in (
            ("--force", args.force),
            ("--instances", args.instances is not None),
            ("--rollouts", args.rollouts is not None),
            ("--kills", args.kills is not None),
            ("--preempt", args.preempt),
            ("--in-process", args.in_process),
            ("--generation-seconds", args.generation_seconds is not None),
            ("--prepare-seconds", args.prepare_seconds is not None),
        )
        if value
    ]
    if given:
        parser.error(f"--resume takes its settings from --dir, not from {', '.join(given)}")


def _resume(args: argparse.Namespace, directory: Path) -> int:
    from envckpt.demo.plan import PLAN_NAME, load_plan
    from envckpt.demo.resume import resume_point

    try:
        point = resume_point(directory)
    except (ValueError, OSError) as error:
        print(f"envckpt demo: cannot resume: {error}", file=sys.stderr)
        return 3
    plan = load_plan(directory / PLAN_NAME)
    if point.finished:
        print(f"envckpt demo: the run in {directory} finished; its job runs again (a requeue)")
    if point.nemo_gym:
        from envckpt.demo.nemo_gym import NemoGymDemo, run_nemo_gym
        from envckpt.demo.nemo_gym_verdict import SPEC_NAME
        from envckpt.nemo_gym.job_spec import JobSpec

        if args.allow_fresh_start:  # the job's next runs read it from their spec
            spec = JobSpec.load(directory / SPEC_NAME)
            dataclasses.replace(spec, allow_fresh_start=True).save(directory / SPEC_NAME)
        demo = NemoGymDemo.from_directory(directory)
        verdict, text = run_nemo_gym(demo, plan, first=point.next_incarnation)
    else:
        from envckpt.demo.processes import run_processes
        from envckpt.demo.scenario import SETTINGS_NAME, load_settings, save_settings

        settings = load_settings(directory / SETTINGS_NAME)
        settings = dataclasses.replace(settings, directory=directory)
        if args.allow_fresh_start:  # the job's next runs read it from their settings
            settings = dataclasses.replace(settings, allow_fresh_start=True)
            save_settings(settings, directory / SETTINGS_NAME)
        verdict, text = run_processes(settings, plan, ray=args.ray, first=point.next_incarnation)
    return _report(verdict, text, directory)


def _report(verdict: Verdict, text: str, directory: Path) -> int:
    """Print the tables and the verdict, name the directory; the exit code."""
    print(text)
    print()
    print(verdict.render())
    print(f"run directory: {directory}")
    print(f"verdict: {directory / 'verdict.json'}")
    print(f"see the run as one page: envckpt report {directory}")
    if verdict.passed:
        return 0
    stopped = job_stopped(directory)
    if stopped is not None:
        code, line = stopped
        print(f"envckpt demo: the job stopped with exit {code}: {line}", file=sys.stderr)
        return code
    return 1


def job_stopped(directory: Path) -> tuple[int, str] | None:
    """The job's own documented exit (3, 4, 5) that ended the run, and what it said; or None.

    What it said: from its last ``envckpt trainer:`` line on (a refusal of
    every snapshot names the way out there, then one line per snapshot),
    else its last line.
    """
    from envckpt.demo.events import EVENTS_NAME, read_events

    exits = [e for e in read_events(directory / EVENTS_NAME) if e["event"] == "exited"]
    if not exits or exits[-1].get("code") not in JOB_EXITS:
        return None
    last = exits[-1]
    output = directory / f"trainer-{last['incarnation']}.out"
    lines = output.read_text(errors="replace").splitlines() if output.exists() else []
    said = [line for line in lines if line.strip()]
    heads = [i for i, line in enumerate(said) if line.startswith(TRAINER_SAYS)]
    message = said[heads[-1] :] if heads else said[-1:]
    return int(last["code"]), "\n".join(message) if message else "(no output)"


if __name__ == "__main__":
    sys.exit(main())
