"""Where the demo job's Gym instances live: server processes on loopback, or Ray actors.

    async with http_instances(settings, tokens=tokens, rows_url=u, incarnation=n) as hosted:
        facade = GymEnvironmentCheckpoint(hosted.instances)
        ...                                  # hosted.backend runs rollouts
        await hosted.stop()                  # stop the Gym servers now (a preempted node)

Each Gym server is a child ``python -m envckpt.sim.server`` process of the
trainer, in the trainer's process group, so a SIGKILL of the group takes
both down, as a node failure would; each also dies with the trainer alone
(``envckpt.process_tie``). Its tokens (``JobTokens``: one for the
control plane, another for the trainer's rows endpoint) reach it through its
environment, never its command line, and its participants may only write
under the demo's directory (``--checkpoint-root``). Each writes its events as
JSON lines to ``run/gym-<index>-<incarnation>.jsonl`` (every participant
transition, named by server and Gym instance), which ``envckpt statecharts
--overlay`` draws.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt.demo.scenario import DemoSettings
from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.instances import InstanceClient, LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.http.tokens import (
    GYM_ROWS_TOKEN_ENV,
    GYM_TOKEN_ENV,
    new_token,
    require_strong_token,
)
from envckpt.process_tie import child_env
from envckpt.sim.http_gym import HttpBackend, HttpGym
from envckpt.trainer.job import RolloutBackend

# How the demo hands its tokens to the trainer process (never on a command line).
CONTROL_TOKEN_ENV = "ENVCKPT_DEMO_TOKEN"
ROWS_TOKEN_ENV = "ENVCKPT_DEMO_ROWS_TOKEN"


@dataclass(frozen=True, slots=True)
class JobTokens:
    """The job's two secrets: the Gym control plane's, and the trainer's rows endpoint's."""

    control: str
    rows: str

    def __post_init__(self) -> None:
        require_strong_token(self.control, what="control token")
        require_strong_token(self.rows, what="rows token")
        if self.control == self.rows:
            raise ValueError("the control and rows tokens must differ")

    def __repr__(self) -> str:  # never shown, not even in a traceback's locals
        return "JobTokens(control=<hidden>, rows=<hidden>)"

    @classmethod
    def fresh(cls) -> JobTokens:
        """Two new random tokens (the demo makes one pair per run)."""
        return cls(new_token(), new_token())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JobTokens:
        """The pair the demo passed to this trainer process, or a fresh one."""
        env = os.environ if environ is None else environ
        control, rows = env.get(CONTROL_TOKEN_ENV, ""), env.get(ROWS_TOKEN_ENV, "")
        return cls(control, rows) if control or rows else cls.fresh()

    def trainer_env(self) -> dict[str, str]:
        """Environment entries passing the pair to a trainer process."""
        return {CONTROL_TOKEN_ENV: self.control, ROWS_TOKEN_ENV: self.rows}


@dataclass
class Hosted:
    """The instances the facade drives, the backend that runs rollouts, and how to stop them.

    ``strike``, when given, is how a planned kill strikes this hosting (a Ray
    cluster loses a node: ``demo.node_loss``) instead of the whole job's group.
    """

    instances: list[InstanceClient]
    backend: RolloutBackend
    stop: Callable[[], Awaitable[None]]
    strike: Callable[[Mapping[str, Any]], None] | None = None


@contextlib.asynccontextmanager
async def gym_processes(
    settings: DemoSettings, *, tokens: JobTokens, rows_url: str, incarnation: int
) -> AsyncIterator[tuple[dict[str, dict[str, str]], list[subprocess.Popen[bytes]]]]:
    """One ``envckpt.sim.server`` child per instance; yields instance -> URLs, and the children."""
    run_dir = settings.directory / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    children: list[subprocess.Popen[bytes]] = []
    ready: dict[str, Path] = {}
    env = {k: v for k, v in os.environ.items() if k not in (CONTROL_TOKEN_ENV, ROWS_TOKEN_ENV)}
    env.update({GYM_TOKEN_ENV: tokens.control, GYM_ROWS_TOKEN_ENV: tokens.rows})
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
                        "--checkpoint-root",
                        str(settings.directory),
                        "--tool-latency",
                        str(settings.tool_latency),
                        "--ready-file",
                        str(ready_file),
                        "--instance-id",
                        instance.instance_id,
                        # JSON lines `envckpt statecharts --overlay` reads, one file per process.
                        "--log-json",
                        str(run_dir / f"gym-{index}-{incarnation}.jsonl"),
                    ],
                    env=child_env(env),  # dies with this trainer (process_tie)
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
        yield urls, children
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


@contextlib.asynccontextmanager
async def http_instances(
    settings: DemoSettings, *, tokens: JobTokens, rows_url: str, incarnation: int
) -> AsyncIterator[Hosted]:
    """Gym servers as child processes, driven over HTTP."""
    async with gym_processes(
        settings, tokens=tokens, rows_url=rows_url, incarnation=incarnation
    ) as (urls, children):
        gyms = {
            iid: HttpGym(server_urls, token=tokens.control) for iid, server_urls in urls.items()
        }

        async def stop() -> None:
            for child in children:
                with contextlib.suppress(ProcessLookupError):
                    child.kill()
            for child in children:
                await asyncio.to_thread(child.wait)

        instances: list[InstanceClient] = [
            LocalInstance(
                GymCheckpointAdapter(
                    instance=instance, coordination=gyms[instance.instance_id].coordinator
                )
            )
            for instance in settings.instance_list()
        ]
        try:
            yield Hosted(instances, HttpBackend(gyms), stop)
        finally:
            for gym in gyms.values():
                await gym.aclose()


@contextlib.asynccontextmanager
async def ray_instances(
    settings: DemoSettings, *, tokens: JobTokens, rows_url: str
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
            settings.instance_list(), config, rows_url=rows_url, rows_token=tokens.rows
        )

        async def stop() -> None:
            for client in clients:
                ray.kill(client.handle)

        yield Hosted(list(clients), RayBackend({c.instance_id: c for c in clients}), stop)
    finally:
        ray.shutdown()
