"""A training job over HTTP Gym servers: rollout snapshots, a crash, a restore, the end.

    python examples/trainer_over_http.py [--dir DIR]

Two simulated Gym deployments (policy model, agent, tool and judge, each a
real HTTP server on loopback) stand in for nemo-gym. The trainer reaches
each one as NeMo RL does, through nemo-gym's ``ServerClient`` and the
control token (``GymCheckpointAdapter(instance=, client=, auth_token=)``),
and reads its settings from a ``checkpointing:`` YAML block.

1. The job runs multi-turn rollouts; snapshots are taken on a timer, each
   recording the trainer's step.
2. Once a snapshot holds rollouts in flight, everything "crashes": the job is
   cancelled, the Gym servers stop, the trainer lets go of its state.
3. Fresh Gym servers and a fresh trainer restore the newest snapshot: the
   rollouts it saved continue at their saved turn, and the job finishes.

Needs ``envckpt[http]``; nemo-gym is used when installed (otherwise an
object with the same ``global_config_dict`` stands in for ``ServerClient``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from envckpt import (
    DataPlaneBarrier,
    GymCheckpointAdapter,
    GymCheckpointInstance,
    GymEnvironmentCheckpoint,
    LocalInstance,
    PendingStaging,
    RolloutTask,
    SnapshotCatalog,
    load_config,
    start_trainer,
)
from envckpt.sim.http_gym import HttpBackend, HttpGym
from envckpt.sim.server import GymServers

TOKEN = "example-control-token-7f3a9c"  # in production: a secret from the environment
INSTANCES = [GymCheckpointInstance("math", 0), GymCheckpointInstance("math", 1)]
ROLLOUTS, TURNS, ROLLOUTS_PER_STEP = 8, 12, 2
TASKS = {f"task-{n}": {"prompt": f"p{n}", "turns": TURNS} for n in range(ROLLOUTS)}
CONFIG = """
checkpointing:
  root: {root}
  keep_latest_k: 3
  max_in_flight_per_instance: 2
  snapshots:
    every_seconds: 0.3
  timeouts:
    prepare_seconds: 10
    commit_seconds: 30
"""


def server_client(urls: Mapping[str, str]) -> Any:
    """nemo-gym's ``ServerClient`` for these servers, as a NeMo RL trainer holds one."""
    config: dict[str, Any] = {"head_server": {"host": "127.0.0.1", "port": 1}}
    for name, url in urls.items():
        parts = urlsplit(url)
        server_type = "responses_api_agents" if "agent" in name else "resources_servers"
        config[name] = {server_type: {name: {"host": parts.hostname, "port": parts.port}}}
    try:
        from nemo_gym.config_types import BaseServerConfig
        from nemo_gym.server_utils import ServerClient
        from omegaconf import OmegaConf
    except ImportError:  # without nemo-gym: what envckpt reads of a ServerClient
        return SimpleNamespace(global_config_dict=config)
    return ServerClient(
        head_server_config=BaseServerConfig(**config["head_server"]),
        global_config_dict=OmegaConf.create(config),
    )


async def incarnation(
    root: Path, servers: list[GymServers], staging: PendingStaging, *, crash: bool
) -> dict[str, Any]:
    """One run of the job: restore (or start fresh), run; with ``crash``, die mid-way."""
    config = load_config(root / "run.yaml")
    adapters = [
        GymCheckpointAdapter(instance=i, client=server_client(s.urls), auth_token=TOKEN)
        for i, s in zip(INSTANCES, servers, strict=True)
    ]
    facade = GymEnvironmentCheckpoint(
        [LocalInstance(adapter) for adapter in adapters], timeouts=config.checkpoint_timeouts()
    )
    gyms = {
        i.instance_id: HttpGym(s.urls, token=TOKEN) for i, s in zip(INSTANCES, servers, strict=True)
    }
    tasks = [
        RolloutTask(rollout_id, INSTANCES[n % 2].instance_id, task)
        for n, (rollout_id, task) in enumerate(TASKS.items())
    ]
    started = await start_trainer(
        tasks,
        facade=facade,
        backend=HttpBackend(gyms),
        barrier=DataPlaneBarrier(),
        staging=staging,
        **config.start_trainer_kwargs(),
    )
    report = started.report
    snapshotter = started.job.snapshotter
    holding = asyncio.Event()

    def progress(event: str, fields: Mapping[str, Any]) -> None:
        # The trainer's step: one optimizer step per ROLLOUTS_PER_STEP finished rollouts.
        snapshotter.set_step(len(started.results) // ROLLOUTS_PER_STEP)
        if event == "snapshot" and fields["result"].exported_episodes > 0:
            holding.set()

    started.job.on_progress = progress
    try:
        job = asyncio.create_task(started.job.run())
        if crash:
            held = asyncio.ensure_future(holding.wait())
            await asyncio.wait({job, held}, return_when=asyncio.FIRST_COMPLETED)
            held.cancel()
            job.cancel()  # the process dies: rollouts in flight are lost with it
        await asyncio.gather(job, return_exceptions=crash)
        return {
            "restored": None if report.path is None else report.path.name,
            "continued": 0 if report.plan is None else len(report.plan.continued),
            "finished": len(started.results),
            "results": dict(started.results.items()),
        }
    finally:
        started.close()
        for gym in gyms.values():
            await gym.aclose()
        for adapter in adapters:
            await adapter.aclose()


async def main(directory: Path) -> int:
    # The crash cuts requests in flight; uvicorn would print each one's traceback
    # (it sets its loggers' level when a server starts, so a filter, not a level).
    logging.getLogger("uvicorn.error").addFilter(lambda record: record.exc_info is None)
    root = directory / "job"
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.yaml").write_text(CONFIG.format(root=root))
    staging = PendingStaging()  # the policy model ships token rows here
    # Participants write checkpoints only under their root (here: the job's directory).
    # A tool call of 50 ms makes a rollout last about 0.6 s: several 0.3 s snapshots
    # fall inside the job even on a busy machine (at 20 ms it could end before one held
    # a rollout, and then there is nothing to crash on).
    servers = [
        GymServers(
            token=TOKEN, seed=5, tool_latency=0.05, staging_sink=staging, checkpoint_root=root
        )
        for _ in INSTANCES
    ]
    for server in servers:
        await server.start()
    first = await incarnation(root, servers, staging, crash=True)
    for server in servers:
        await server.stop()  # the crash took the Gym processes too
    print(f"run 1: crashed after {first['finished']} of {ROLLOUTS} rollouts")

    fresh = [server.fresh() for server in servers]
    for server in fresh:
        await server.start()
    try:
        second = await incarnation(root, fresh, staging, crash=False)
    finally:
        for server in fresh:
            await server.stop()
    print(
        f"run 2: restored {second['restored']}, {second['continued']} rollouts continued at "
        f"their saved turn, {second['finished']} of {ROLLOUTS} finished"
    )
    for entry in SnapshotCatalog(root).all():
        print(f"snapshot {entry.checkpoint_id}: step {entry.step}, {entry.episodes} episodes")
    wrong = [
        rollout_id
        for rollout_id, result in second["results"].items()
        if result["transcript"] != fresh[0].expected_transcript(rollout_id, TASKS[rollout_id])
    ]
    ok = second["finished"] == ROLLOUTS and second["continued"] > 0 and not wrong
    print("every transcript equals an uninterrupted run" if ok else f"FAILED: {wrong}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where the job's files go")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="envckpt-example-"))
    raise SystemExit(asyncio.run(main(directory)))
