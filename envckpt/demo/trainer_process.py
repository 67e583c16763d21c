"""The demo's training job as a process: trainer plus its Gym servers as children.

    python -m envckpt.demo.trainer_process --config job.json --incarnation N
        [--interrupt JSON] [--crash-at POINT[:K]] [--ray [--ray-address A --node-kills K]]
        [--allow-fresh-start]

It serves its token-row endpoint, launches one ``envckpt.sim.server`` child
per Gym instance, claims the snapshot root, restores the newest usable
snapshot (or starts fresh) and runs every rollout to completion, with
snapshots on an adaptive timer. SIGTERM preempts it (a final snapshot, its
Gym servers stopped while paused, exit 75); SIGUSR1 takes a snapshot now.
When Gym refuses a snapshot's content, it restarts its Gym servers and
restores again (the refused snapshot was moved aside). The moment every
rollout is sealed it writes ``results.json`` and records in its root that the
job finished (``envckpt.trainer.finished``); started again after that (a
requeue) it prints ``already finished`` and exits 0 having written nothing.

With ``--ray-address`` the instances run on that multi-node Ray cluster
(``node_loss``) and a planned kill takes one node down instead of the job:
the trainer replaces the lost instances on the remaining nodes and restores
(each node loss starts the next run of the job, in this same process).

``--interrupt`` is the demo's plan for this run (``plan.Interruption``): a
SIGKILL of the whole process group at a seeded moment after a snapshot, one
at a crash point inside the restore, or a SIGTERM to itself. ``--crash-at``
SIGKILLs the group the K-th time a crash point is reached (end-to-end tests).

Exit codes (``JobExit``): 0 finished; 3 the snapshot root cannot be used,
another trainer holds it, or it refused every snapshot (unless the settings or
``--allow-fresh-start`` allow a fresh start); 4 snapshots kept failing; 5 the environment
restore failed; 75 preempted with its final snapshot published; 76 preempted
without it. Each non-zero one prints one clear message on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from envckpt import crashpoints
from envckpt.demo.events import EVENTS_NAME, EventLog
from envckpt.demo.gym_hosting import Hosted, JobTokens, http_instances, ray_instances
from envckpt.demo.node_loss import InstancesLost, cluster_instances, node_kill_plan
from envckpt.demo.plan import (
    KILL_IN_RESTORE,
    PREEMPT,
    Interrupter,
    Interruption,
    add_run_arguments,
)
from envckpt.demo.scenario import DemoSettings, load_settings, make_tasks
from envckpt.demo.telemetry_hooks import announce, metrics_endpoint
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.fsutil import atomic_write_bytes
from envckpt.http.apps import new_app
from envckpt.http.serve import serve
from envckpt.process_tie import tie_to_parent
from envckpt.sim.data_routes import rows_router
from envckpt.telemetry.observers import TelemetryObserver
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.finished import read_finished, record_finished
from envckpt.trainer.job_errors import (
    JobExit,
    RestoreFailed,
    SnapshotRefusedByEnvironment,
    SnapshotsFailing,
    StartRefused,
    exit_code_for,
)
from envckpt.trainer.preemption import JobSignals
from envckpt.trainer.snapshot_loop import SnapshotPolicy
from envckpt.trainer.startup import PendingStaging, claim_root, start_trainer

# Each refused snapshot costs one restart of the Gym servers; there are at
# most keep_latest_k snapshots to refuse.
_MAX_GYM_RESTARTS = 8


async def run_job(
    settings: DemoSettings,
    *,
    incarnation: int,
    tokens: JobTokens,
    interruption: Interruption | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    node_kills: int = 0,
) -> int:
    """Restore (or start fresh), run every rollout to its end; the exit code."""
    events = EventLog(settings.directory / EVENTS_NAME, incarnation=incarnation)
    events.emit("started", pid=os.getpid(), ray=use_ray)
    signals = JobSignals(grace_seconds=settings.grace_seconds)
    rows = PendingStaging()
    app = new_app()
    app.include_router(rows_router(rows.stage, token=tokens.rows))
    observers = metrics_endpoint(app)
    lock = None
    try:
        # Before any Gym server starts: a root this job cannot use refuses at once.
        lock = claim_root(settings.directory)
        async with serve(app) as trainer_url:
            announce(events, trainer_url, observers)
            rows_url = f"{trainer_url}/rows"
            node_plan = node_kill_plan(seed=settings.seed, kills=node_kills)
            for _ in range(_MAX_GYM_RESTARTS):
                if ray_address is not None:
                    hosting = cluster_instances(
                        settings, tokens=tokens, rows_url=rows_url, address=ray_address,
                        events=events,
                    )  # fmt: skip
                    interruption = node_plan.pop(0) if node_plan else None
                elif use_ray:
                    hosting = ray_instances(settings, tokens=tokens, rows_url=rows_url)
                else:
                    hosting = http_instances(
                        settings, tokens=tokens, rows_url=rows_url, incarnation=incarnation
                    )
                async with hosting as hosted:
                    # After the hosts started: ray.init installs a SIGTERM handler of its own.
                    signals.install()
                    try:
                        return await _train(
                            settings, events, rows, hosted, signals, interruption, observers
                        )
                    except SnapshotRefusedByEnvironment as error:
                        # These Gym processes saw a restore; fresh ones take the next.
                        events.emit("restore_refused", snapshot=error.snapshot, reason=error.reason)
                        rows.target = None
                    except InstancesLost as lost:
                        # A node died: replacements on the other nodes restore, as the next run.
                        events.emit("instances_lost", instances=lost.instances, nodes=lost.nodes)
                        events.incarnation += 1
                        rows.target = None
            raise RuntimeError(f"Gym refused {_MAX_GYM_RESTARTS} snapshots in a row")
    except (StartRefused, SnapshotsFailing, RestoreFailed) as error:
        events.emit("stopped", error=type(error).__name__, reason=str(error))
        raise
    finally:
        if lock is not None:
            lock.release()
        signals.uninstall()
        events.close()


async def _train(
    settings: DemoSettings,
    events: EventLog,
    rows: PendingStaging,
    hosted: Hosted,
    signals: JobSignals,
    interruption: Interruption | None,
    observers: list[TelemetryObserver],
) -> int:
    directory = settings.directory
    facade = GymEnvironmentCheckpoint(
        hosted.instances,
        timeouts=CheckpointTimeouts(prepare_seconds=10.0, commit_seconds=60.0),
    )

    async def stop_gym(result: object) -> None:
        # The final snapshot is published and Gym still paused: stop it here,
        # so no turn runs past the snapshot (a preempted node loses it anyway).
        del result
        await hosted.stop()

    started = await start_trainer(
        make_tasks(settings),
        facade=facade,
        backend=hosted.backend,
        barrier=DataPlaneBarrier(),
        root=directory,
        data_plane_path=directory / "live.sqlite",
        staging=rows,
        keep_latest_k=settings.keep_latest_k,
        max_in_flight_per_instance=settings.in_flight_per_instance,
        snapshot_policy=SnapshotPolicy(
            every_seconds=settings.snapshot_every, min_running_ratio=settings.min_running_ratio
        ),
        signals=signals,
        on_final_snapshot=stop_gym,
        allow_fresh_start=settings.allow_fresh_start,
        observers=observers,
    )
    try:
        results, job = started.results, started.job
        events.restored(started.report, finished_before=len(results))
        job.on_progress = events.progress
        if interruption is not None and interruption.kind != KILL_IN_RESTORE:
            interrupter = Interrupter(
                interruption,
                total=settings.rollouts,
                finished=len(results),
                strike=hosted.strike or (lambda info: _strike(events, info)),
            )

            def progress(event: str, fields: Mapping[str, Any]) -> None:
                events.progress(event, fields)
                interrupter.progress(event, fields)

            job.on_progress = progress

        async def finished() -> None:
            # Every rollout sealed: results durable first, then the root's record.
            data = json.dumps(dict(results.items()), sort_keys=True).encode()
            atomic_write_bytes(directory / "results.json", data)
            record_finished(directory, results=data, rollouts=len(results))

        job.on_finished = finished
        report = await job.run()
        if report.preempted:
            return int(report.exit_code)
        events.emit("done", finished=len(results))
        return int(JobExit.FINISHED)
    finally:
        started.close()


def _strike(events: EventLog, info: Mapping[str, Any]) -> None:
    """The planned interruption: announced in the event log, then real."""
    events.emit("interrupting", **info)
    if info["kind"] == PREEMPT:
        os.kill(os.getpid(), signal.SIGTERM)  # through the job's own handler
    else:
        _kill_group()


def _kill_group() -> None:
    # The whole job: this process and every child in its group (the Gym
    # servers), like a node failure.
    os.killpg(os.getpgid(0), signal.SIGKILL)


def _install_crash(args: argparse.Namespace, settings: DemoSettings) -> Interruption | None:
    interruption = Interruption.from_arg(args.interrupt) if args.interrupt else None
    if interruption is not None and interruption.kind == KILL_IN_RESTORE:
        events = EventLog(settings.directory / EVENTS_NAME, incarnation=args.incarnation)
        point = interruption.restore_point

        def in_restore(name: str) -> None:
            if name == point:
                events.emit("interrupting", kind=KILL_IN_RESTORE, point=point, snapshots=0)
                _kill_group()

        crashpoints.install(in_restore)
    elif args.crash_at:
        point, _, nth = args.crash_at.partition(":")
        crashpoints.install(crashpoints.kill_at(point, nth=int(nth or 1)))
    return interruption


def main(argv: list[str] | None = None) -> int:
    tie_to_parent()  # dies with the demo that started it
    parser = argparse.ArgumentParser(prog="python -m envckpt.demo.trainer_process")
    parser.add_argument("--config", type=Path, required=True)
    add_run_arguments(parser)
    parser.add_argument("--crash-at", default=None, help="POINT[:K] to SIGKILL the job at")
    parser.add_argument("--ray", action="store_true", help="host the Gym instances in Ray actors")
    parser.add_argument("--ray-address", default=None, help="a multi-node Ray cluster to join")
    parser.add_argument("--node-kills", type=int, default=0, help="nodes to kill (--ray-address)")
    args = parser.parse_args(argv)
    settings = load_settings(args.config)
    if args.allow_fresh_start:
        settings = dataclasses.replace(settings, allow_fresh_start=True)
    try:
        record = read_finished(settings.directory)  # before anything is written
    except StartRefused as error:
        print(f"envckpt trainer: {error}", file=sys.stderr)
        return int(JobExit.START_REFUSED)
    if record is not None:
        print(f"envckpt trainer: {record.line(settings.directory)}")
        return int(JobExit.FINISHED)
    # From the demo (ENVCKPT_DEMO_TOKEN, ENVCKPT_DEMO_ROWS_TOKEN), else random:
    # this process is the only client of its Gym servers and its rows endpoint.
    tokens = JobTokens.from_env()
    log_path = settings.directory / f"trainer-{args.incarnation}.log"
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.WriteLoggerFactory(file=log_path.open("a")),
    )
    interruption = _install_crash(args, settings)
    try:
        return asyncio.run(
            run_job(
                settings,
                incarnation=args.incarnation,
                tokens=tokens,
                interruption=interruption,
                use_ray=args.ray,
                ray_address=args.ray_address,
                node_kills=args.node_kills,
            )
        )
    except (StartRefused, SnapshotsFailing, RestoreFailed) as error:
        print(f"envckpt trainer: {error}", file=sys.stderr)
        if isinstance(error, RestoreFailed):
            print(f"envckpt trainer: reason: {error.reason}", file=sys.stderr)
            print(f"envckpt trainer: next step: {error.action}", file=sys.stderr)
        code = exit_code_for(error)
        return int(code if code is not None else 1)


if __name__ == "__main__":
    sys.exit(main())
