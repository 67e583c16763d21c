"""A training job over real nemo-gym deployments, as one process: no verdict, just the run.

    spec = JobSpec(directory=d, deployments=(DeploymentSpec("counter", config, agent="agent"),),
                   tasks=({"rollout_id": "c-0", "shard": "counter", "task": {...}},))
    spec.save(d / "job.json")
    python -m envckpt.nemo_gym.job --spec d/job.json --incarnation 1
    # or, in a process of your own: await run_job(spec, incarnation=1, emit=..., on_progress=...)

The process serves the trainer's token-row endpoint, launches every
deployment (``launcher.launch``, one process per server, children of this
process so one ``killpg`` takes the whole job down), then runs envckpt's own
trainer side unchanged: ``HttpTransport.from_nemo_gym_config`` per
deployment, ``GymCheckpointAdapter``, ``GymEnvironmentCheckpoint``,
``start_trainer`` (``Restorer`` first, then ``RolloutSnapshotter`` and
``RolloutJob``). It writes ``events.jsonl`` as it goes and ``results.json``
at the end (``on_progress`` also sees the trainer's progress events, e.g. to
interrupt the job at a planned moment); with ``control_run`` it then runs every task once more,
uninterrupted and without snapshots, on the same deployments
(``control.json``), for comparing rewards. The checks live with the caller.

The moment every rollout is sealed it writes ``results.json`` and records in
its snapshot root that it finished (``envckpt.trainer.finished``). Started
again after that (a scheduler's requeue), ``main`` prints ``already
finished`` and exits 0 before it writes anything. Exit codes are the
trainer's (``JobExit``): 3 the job cannot start as configured (the snapshot
root, a port the config names held by another process: ``PortInUse``), 4
snapshots kept failing, 5 the environment restore failed; each with one line
on stderr, no traceback. The process dies with the one that started it when
that one passed ``envckpt.process_tie.child_env``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import secrets
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from envckpt.fsutil import atomic_write_bytes
from envckpt.nemo_gym.job_spec import DeploymentSpec, JobSpec
from envckpt.nemo_gym.settings import write_token_file
from envckpt.process_tie import tie_to_parent
from envckpt.trainer.event_log import (
    EventLog,
    progress_event,
    restored_event,
)
from envckpt.trainer.finished import record_finished
from envckpt.trainer.job import RolloutTask

Emit = Callable[..., None]
Progress = Callable[[str, Mapping[str, Any]], None]
CONTROL_SUFFIX = ".control"


def incarnation_config(
    spec: JobSpec, deployment: DeploymentSpec, *, run_dir: Path, staging_url: str
) -> dict[str, Any]:
    """The deployment's config for one incarnation: staging, audit and capture paths filled in."""
    config = copy.deepcopy(dict(deployment.config))
    block = dict(config.get("envckpt") or {})
    block.update(
        instance_id=deployment.instance.instance_id,
        staging_url=staging_url,
        audit_dir=str(spec.directory / "audit"),
        checkpoint_root=str(spec.directory),  # participants write only under the job
        scripted_policy_latency=spec.policy_latency,
        model_calls=spec.model_calls,
    )
    config["envckpt"] = block
    capture = dict(config.get("token_id_capture") or {})
    if capture.get("enabled"):
        capture["dir"] = str(run_dir / "tokens")
    config["token_id_capture"] = capture
    return config


class RowSink:
    """Where token rows go: the trainer's ledger and data plane, or (control run) a dict.

    Rows of the control run belong to no ledger rollout, so they are kept apart.
    """

    def __init__(self, pending: Any) -> None:
        self.pending = pending
        self.control: dict[str, tuple[str, str]] | None = None

    async def stage(self, capture_key: str, staging_key: str, payload: str) -> None:
        if self.control is not None:
            self.control[staging_key] = (capture_key, payload)
            return
        await self.pending.stage(capture_key, staging_key, payload)


async def run_job(
    spec: JobSpec, *, incarnation: int, emit: Emit, on_progress: Progress | None = None
) -> dict[str, Any]:
    """Restore (or start fresh), finish every task, write results.json; see the module doc."""
    from envckpt.trainer.startup import PendingStaging, claim_root

    # Before any server starts: a root this job cannot use refuses at once
    # (the lock is re-entrant: start_trainer takes it again, in this process).
    lock = claim_root(spec.root)
    try:
        return await _run_job(
            spec,
            incarnation=incarnation,
            emit=emit,
            on_progress=on_progress,
            pending=PendingStaging(),
        )
    finally:
        lock.release()


async def _run_job(
    spec: JobSpec, *, incarnation: int, emit: Emit, on_progress: Progress | None, pending: Any
) -> dict[str, Any]:
    from fastapi import FastAPI

    from envckpt.http.serve import serve
    from envckpt.nemo_gym.staging import staging_router

    run_dir = spec.directory / f"run-{incarnation}"
    run_dir.mkdir(parents=True, exist_ok=True)
    control_token, staging_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    control_file = write_token_file(run_dir / "control.token", control_token)
    staging_file = write_token_file(run_dir / "staging.token", staging_token)
    rows = RowSink(pending)
    app = FastAPI()
    app.include_router(staging_router(rows.stage, token=staging_token))
    emit("started", pid=os.getpid())
    async with serve(app) as trainer_url:
        deployments = await _launch_all(
            spec,
            run_dir=run_dir,
            staging_url=f"{trainer_url}/rows",
            token_file=control_file,
            staging_token_file=staging_file,
        )
        emit("launched", servers={d.shard: launched.urls for d, launched in deployments.items()})
        try:
            return await _train(
                spec, deployments, rows, token=control_token, emit=emit, on_progress=on_progress
            )
        finally:
            await asyncio.gather(
                *(asyncio.to_thread(d.stop) for d in deployments.values()), return_exceptions=True
            )


async def _launch_all(
    spec: JobSpec,
    *,
    run_dir: Path,
    staging_url: str,
    token_file: Path,
    staging_token_file: Path,
) -> dict[DeploymentSpec, Any]:
    from envckpt.nemo_gym.launcher import launch

    async def one(deployment: DeploymentSpec) -> Any:
        directory = run_dir / deployment.shard
        config = incarnation_config(spec, deployment, run_dir=directory, staging_url=staging_url)
        return await asyncio.to_thread(
            launch,
            config,
            run_dir=directory,
            token_file=token_file,
            staging_token_file=staging_token_file,
        )

    launched = await asyncio.gather(*(one(d) for d in spec.deployments), return_exceptions=True)
    failures = [outcome for outcome in launched if isinstance(outcome, BaseException)]
    if failures:
        for outcome in launched:
            if not isinstance(outcome, BaseException):
                await asyncio.to_thread(outcome.stop)
        raise failures[0]
    return dict(zip(spec.deployments, launched, strict=True))


async def _train(
    spec: JobSpec,
    deployments: Mapping[DeploymentSpec, Any],
    rows: RowSink,
    *,
    token: str,
    emit: Emit,
    on_progress: Progress | None = None,
) -> dict[str, Any]:
    from envckpt.coordination.coordinator import Coordinator
    from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
    from envckpt.facade.instances import InstanceClient, LocalInstance
    from envckpt.gym.adapter import GymCheckpointAdapter
    from envckpt.http.client import HttpTransport
    from envckpt.nemo_gym.backend import NemoGymBackend
    from envckpt.trainer.barrier import DataPlaneBarrier
    from envckpt.trainer.startup import start_trainer

    transports = {
        d: HttpTransport.from_nemo_gym_config(launched.config, token=token)
        for d, launched in deployments.items()
    }
    instances: list[InstanceClient] = [
        LocalInstance(GymCheckpointAdapter(instance=d.instance, coordination=Coordinator(t)))
        for d, t in transports.items()
    ]
    backend = NemoGymBackend(
        {d.instance.instance_id: launched.urls[d.agent] for d, launched in deployments.items()}
    )
    facade = GymEnvironmentCheckpoint(
        instances,
        timeouts=CheckpointTimeouts(prepare_seconds=spec.prepare_seconds, commit_seconds=60.0),
    )

    def progress(event: str, fields: Mapping[str, Any]) -> None:
        logged = progress_event(event, fields)
        if logged is not None:
            emit(logged[0], **logged[1])
        if on_progress is not None:  # after the event is logged: it may end the process
            on_progress(event, fields)

    for d, transport in transports.items():
        await _require_agent_participant(d, transport)
    tasks = spec.rollout_tasks()
    try:
        started = await start_trainer(
            tasks,
            facade=facade,
            backend=backend,
            barrier=DataPlaneBarrier(),
            root=spec.root,
            data_plane_path=spec.directory / "live.sqlite",
            staging=rows.pending,
            keep_latest_k=spec.keep_latest_k,
            max_in_flight_per_instance=spec.in_flight_per_instance,
            on_progress=progress,
            allow_fresh_start=spec.allow_fresh_start,
        )
        event, fields = restored_event(started.report, finished_before=len(started.results))
        emit(event, **fields)

        async def finished() -> None:
            # Every rollout sealed: results durable first, then the root's record.
            data = json.dumps(dict(started.results.items()), sort_keys=True).encode()
            atomic_write_bytes(spec.directory / "results.json", data)
            record_finished(spec.root, results=data, rollouts=len(started.results))

        started.job.on_finished = finished
        try:
            await started.job.run(snapshot_every=spec.snapshot_every)
            results = dict(started.results.items())
        finally:
            started.report.data_plane.close()
        emit("done", finished=len(results))
        if spec.control_run:
            rows.control = {}
            control = await run_uninterrupted(backend, tasks)
            atomic_write_bytes(
                spec.directory / "control.json", json.dumps(control, sort_keys=True).encode()
            )
            emit("control_done", finished=len(control))
        return results
    finally:
        await backend.aclose()
        for transport in transports.values():
            await transport.aclose()


async def _require_agent_participant(deployment: DeploymentSpec, transport: Any) -> None:
    """The agent rollouts go to must take part in checkpoints, or no snapshot could restore them.

    An agent served unmodified (``plain_servers``) neither exports its runs
    nor parks them when the model closes for a checkpoint: refused at start.
    """
    from envckpt.trainer.job_errors import StartRefused

    reply = await transport.request(deployment.agent, "GET", "status", None, timeout=60.0)
    body = reply.body if isinstance(reply.body, Mapping) else {}
    if reply.status != 200 or body.get("kind") != "agent":
        raise StartRefused(
            f"deployment {deployment.shard}: its agent {deployment.agent} takes no part in "
            f"checkpoints (status: {reply.describe()}); a snapshot could not restore its "
            "rollouts: serve it checkpointable (not in envckpt.plain_servers)"
        )


async def run_uninterrupted(
    backend: Any, tasks: list[RolloutTask], *, concurrency: int = 8
) -> dict[str, Any]:
    """Every task once more as ``<rollout_id>.control``, attempt 0, no snapshot."""
    from envckpt.episodes import EnvironmentEpisode

    gate = asyncio.Semaphore(concurrency)

    async def one(task: RolloutTask) -> tuple[str, Any]:
        async with gate:
            episode = EnvironmentEpisode(f"{task.rollout_id}{CONTROL_SUFFIX}", 0)
            return task.rollout_id, await backend.run(task.instance_id, episode, task.task)

    return dict(await asyncio.gather(*(one(task) for task in tasks)))


def main(argv: list[str] | None = None) -> int:
    tie_to_parent()  # dies with the process that started it, if that one asked
    from envckpt.trainer.startup import add_start_arguments

    parser = argparse.ArgumentParser(prog="python -m envckpt.nemo_gym.job")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--incarnation", type=int, required=True)
    add_start_arguments(parser)
    args = parser.parse_args(argv)

    def run(spec: JobSpec, events: EventLog) -> None:
        asyncio.run(run_job(spec, incarnation=args.incarnation, emit=events.emit))

    from envckpt.nemo_gym.job_process import run_main

    return run_main(
        parser.prog, args.spec, args.incarnation, run, allow_fresh_start=args.allow_fresh_start
    )


if __name__ == "__main__":
    sys.exit(main())
