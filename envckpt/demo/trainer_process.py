"""The demo's training job as a process: trainer plus its Gym servers as children.

    python -m envckpt.demo.trainer_process --config job.json --incarnation N [--crash-at P[:K]]

It starts its token-row endpoint, launches one ``envckpt.sim.server`` process
per Gym instance in its own process group, restores the newest usable
snapshot (or starts fresh), and runs every rollout to completion with
snapshots on a timer. ``--crash-at`` SIGKILLs the whole group (trainer and Gym
servers, like a node failure) the K-th time the named crash point is reached.
On success it writes ``results.json`` and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import structlog
from fastapi import FastAPI

from envckpt import crashpoints
from envckpt.demo.events import EventLog
from envckpt.demo.scenario import DemoSettings, make_tasks
from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import InstanceClient, LocalInstance
from envckpt.fsutil import atomic_write_bytes
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.http.serve import serve
from envckpt.machines.tables import LedgerStatus
from envckpt.sim.data_routes import rows_router
from envckpt.sim.http_gym import HttpGym
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.job import RolloutBackend
from envckpt.trainer.startup import PendingStaging, start_trainer

TOKEN_ENV = "ENVCKPT_DEMO_TOKEN"


def load_settings(path: Path) -> DemoSettings:
    raw = json.loads(path.read_text())
    raw["directory"] = Path(raw["directory"])
    return DemoSettings(**raw)


def save_settings(settings: DemoSettings, path: Path) -> None:
    raw = asdict(settings)
    raw["directory"] = str(settings.directory)
    atomic_write_bytes(path, json.dumps(raw, sort_keys=True, indent=1).encode())


class HttpBackend:
    """``RolloutBackend`` over Gym deployments served by other processes."""

    def __init__(self, gyms: Mapping[str, HttpGym]) -> None:
        self.gyms = gyms

    async def run(
        self, instance_id: str, episode: EnvironmentEpisode, task: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self.gyms[instance_id].run(episode, task)


@contextlib.asynccontextmanager
async def gym_processes(
    settings: DemoSettings, *, token: str, rows_url: str, incarnation: int
) -> AsyncIterator[dict[str, dict[str, str]]]:
    """One ``envckpt.sim.server`` child per instance; yields instance -> server URLs."""
    run_dir = settings.directory / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    children: list[subprocess.Popen[bytes]] = []
    ready: dict[str, Path] = {}
    env = dict(os.environ, ENVCKPT_GYM_TOKEN=token)
    try:
        for index, instance in enumerate(settings.instance_list()):
            ready_file = run_dir / f"gym-{index}-{incarnation}.json"
            ready_file.unlink(missing_ok=True)  # a killed server leaves its old one
            ready[instance.instance_id] = ready_file
            log = (run_dir / f"gym-{index}-{incarnation}.log").open("ab")
            children.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "envckpt.sim.server",
                        "--seed",
                        str(settings.gym_seed()),
                        "--audit",
                        str(settings.directory / "audit.jsonl"),
                        "--rows-url",
                        rows_url,
                        "--rows-token",
                        token,
                        "--tool-latency",
                        str(settings.tool_latency),
                        "--ready-file",
                        str(ready_file),
                    ],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        urls: dict[str, dict[str, str]] = {}
        for instance_id, ready_file in ready.items():
            for _ in range(600):
                if ready_file.exists():
                    break
                if any(child.poll() is not None for child in children):
                    raise RuntimeError("a Gym server process exited during startup")
                await asyncio.sleep(0.05)
            else:
                raise TimeoutError(f"Gym server for {instance_id} did not start in 30 s")
            urls[instance_id] = json.loads(ready_file.read_text())
        yield urls
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


class RayBackend:
    """``RolloutBackend`` over Gym deployments hosted in Ray actors."""

    def __init__(self, instances: Mapping[str, Any]) -> None:
        self.instances = instances

    async def run(
        self, instance_id: str, episode: EnvironmentEpisode, task: Mapping[str, Any]
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.instances[instance_id].run_rollout(episode, task)
        return result


Hosted = tuple[list[InstanceClient], RolloutBackend]


@contextlib.asynccontextmanager
async def http_instances(
    settings: DemoSettings, *, token: str, rows_url: str, incarnation: int
) -> AsyncIterator[Hosted]:
    """Gym servers as child processes, driven over HTTP."""
    async with gym_processes(
        settings, token=token, rows_url=rows_url, incarnation=incarnation
    ) as urls:
        gyms = {iid: HttpGym(server_urls, token=token) for iid, server_urls in urls.items()}
        instances: list[InstanceClient] = [
            LocalInstance(
                GymCheckpointAdapter(
                    instance=instance, coordination=gyms[instance.instance_id].coordinator
                )
            )
            for instance in settings.instance_list()
        ]
        try:
            yield instances, HttpBackend(gyms)
        finally:
            for gym in gyms.values():
                await gym.aclose()


@contextlib.asynccontextmanager
async def ray_instances(
    settings: DemoSettings, *, token: str, rows_url: str
) -> AsyncIterator[Hosted]:
    """One Ray actor per instance, each hosting its Gym deployment and adapter."""
    import ray

    from envckpt.sim.gym import GymConfig
    from envckpt.sim.ray_actors import spawn_instances

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        config = GymConfig(
            seed=settings.gym_seed(),
            tool_latency=settings.tool_latency,
            audit_path=str(settings.directory / "audit.jsonl"),
        )
        clients = spawn_instances(
            settings.instance_list(), config, rows_url=rows_url, rows_token=token
        )
        yield list(clients), RayBackend({c.instance_id: c for c in clients})
    finally:
        ray.shutdown()


async def run_job(
    settings: DemoSettings, *, incarnation: int, token: str, use_ray: bool = False
) -> int:
    """Restore (or start fresh), run every rollout to its end, write results.json."""
    events = EventLog(settings.directory / "events.jsonl", incarnation=incarnation)
    events.emit("started", pid=os.getpid(), ray=use_ray)
    rows = PendingStaging()
    app = FastAPI()
    app.include_router(rows_router(rows.stage, token=token))
    async with serve(app) as trainer_url:
        rows_url = f"{trainer_url}/rows"
        hosted = (
            ray_instances(settings, token=token, rows_url=rows_url)
            if use_ray
            else http_instances(settings, token=token, rows_url=rows_url, incarnation=incarnation)
        )
        async with hosted as (instances, backend):
            await _train(settings, events, rows, instances, backend)
    events.close()
    return 0


async def _train(
    settings: DemoSettings,
    events: EventLog,
    rows: PendingStaging,
    instances: list[InstanceClient],
    backend: RolloutBackend,
) -> None:
    directory = settings.directory
    facade = GymEnvironmentCheckpoint(
        instances, timeouts=CheckpointTimeouts(prepare_seconds=10.0, commit_seconds=60.0)
    )

    def progress(event: str, fields: Mapping[str, Any]) -> None:
        if event == "snapshot":
            result = fields["result"]
            events.emit(
                "snapshot",
                checkpoint_id=result.checkpoint_id,
                metrics=result.metrics,
                exported=result.exported_episodes,
                restarted=result.restarted_rollouts,
            )
        elif event in (LedgerStatus.SEALED, LedgerStatus.DISPATCHED, "snapshot_failed"):
            events.emit(event, **fields)

    started = await start_trainer(
        make_tasks(settings),
        facade=facade,
        backend=backend,
        barrier=DataPlaneBarrier(),
        root=directory / "snapshots",
        data_plane_path=directory / "live.sqlite",
        staging=rows,
        keep_latest_k=settings.keep_latest_k,
        max_in_flight_per_instance=settings.in_flight_per_instance,
        on_progress=progress,
    )
    report, results, job = started.report, started.results, started.job
    events.emit(
        "restored",
        snapshot=None if report.path is None else report.path.name,
        continued=0 if report.plan is None else len(report.plan.continued),
        abandoned=0 if report.plan is None else len(report.plan.abandoned),
        refused=report.refused,
        finished_before=len(results),
    )
    try:
        await job.run(snapshot_every=settings.snapshot_every)
        final = dict(results.items())
        atomic_write_bytes(directory / "results.json", json.dumps(final, sort_keys=True).encode())
        events.emit("done", finished=len(final))
    finally:
        report.data_plane.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envckpt.demo.trainer_process")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--incarnation", type=int, required=True)
    parser.add_argument("--crash-at", default=None, help="POINT[:K] to SIGKILL the job at")
    parser.add_argument("--ray", action="store_true", help="host the Gym instances in Ray actors")
    args = parser.parse_args(argv)
    settings = load_settings(args.config)
    token = os.environ.get(TOKEN_ENV) or "envckpt-demo-token"
    log_path = settings.directory / f"trainer-{args.incarnation}.log"
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.WriteLoggerFactory(file=log_path.open("a")),
    )
    if args.crash_at:
        point, _, nth = args.crash_at.partition(":")
        crashpoints.install(crashpoints.kill_at(point, nth=int(nth or 1)))
    return asyncio.run(
        run_job(settings, incarnation=args.incarnation, token=token, use_ray=args.ray)
    )


if __name__ == "__main__":
    sys.exit(main())
