"""Gym instances in Ray actors: snapshot them mid-rollout, replace the actors, continue.

    python examples/ray_instances.py

Each Gym instance lives in its own Ray actor (``InstanceActor`` hosting the
deployment and its ``GymCheckpointAdapter``, here the simulated Gym);
the trainer's facade holds one ``RayInstance`` client per actor, and every
call crosses the actor boundary with a deadline and typed, picklable errors.

1. Start rollouts in two actors; snapshot the environment while they run.
2. Kill both actors (their processes die, rollouts and all).
3. Start replacement actors and restore the snapshot into them: each saved
   rollout continues as attempt + 1 from its saved turn and finishes.

Needs ``envckpt[ray]`` (and the simulated Gym's ``envckpt[http]`` modules).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from pathlib import Path

import ray

from envckpt import (
    CheckpointTimeouts,
    EnvironmentEpisode,
    GymCheckpointInstance,
    GymEnvironmentCheckpoint,
    InMemoryInventory,
)
from envckpt.sim.gym import GymConfig, SimulatedGym
from envckpt.sim.ray_actors import SimRayInstance, spawn_instances

INSTANCES = [GymCheckpointInstance("shard", 0), GymCheckpointInstance("shard", 1)]
TASK = {"prompt": "cross the river", "turns": 30}
CONFIG = GymConfig(seed=13, tool_latency=0.01, park_poll_seconds=0.002)
TIMEOUTS = CheckpointTimeouts(prepare_seconds=20, commit_seconds=20, restore_seconds=20)


class NoCut:
    """The trainer's data-plane cut; this example keeps no trainer state beside Gym's."""

    def require_live(self) -> None:
        return None


async def mid_flight(client: SimRayInstance) -> None:
    """Until every rollout of the actor has taken a turn (and is far from done)."""
    for _ in range(2000):
        sessions = await client.agent_sessions()
        if sessions and all(0 < len(s["turns"]) < 20 for s in sessions.values()):
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("rollouts did not start")


async def main(snapshot: Path) -> int:
    inventory = InMemoryInventory()  # a trainer passes its RecoveryLedger here
    clients = spawn_instances(INSTANCES, CONFIG)
    facade = GymEnvironmentCheckpoint(clients, inventory, timeouts=TIMEOUTS)
    await facade.check_startup()
    for client in clients:
        for n in range(2):
            episode = EnvironmentEpisode(f"{client.instance_id.replace('/', '-')}-r{n}", 0)
            await client.start_rollout(episode, TASK)
            inventory.add(client.instance_id, episode)
    await asyncio.gather(*(mid_flight(client) for client in clients))
    async with facade.snapshot(snapshot) as taken:
        assert taken is not None
        await taken.check_against_cut(NoCut())
        print(f"snapshot: {taken.exported_episodes} rollouts saved mid-flight")

    for client in clients:
        ray.kill(client.handle)  # the actors' processes die
    replacements = spawn_instances(INSTANCES, CONFIG)
    restarted = GymEnvironmentCheckpoint(replacements, inventory, timeouts=TIMEOUTS)
    await restarted.check_startup()
    async with restarted.restored(snapshot) as restored:
        continued = sorted(restored.continued_attempts)
    print(f"restored into new actors: {len(continued)} rollouts continue")

    by_id = {client.instance_id: client for client in replacements}
    expected = SimulatedGym.from_config(CONFIG)
    finished = 0
    for instance_id, rollout_id, attempt in continued:
        episode = EnvironmentEpisode(rollout_id, attempt + 1)
        await by_id[instance_id].start_rollout(episode, TASK)
        result = await by_id[instance_id].wait_rollout(episode, 60.0)
        same = result["transcript"] == expected.expected_transcript(rollout_id, TASK)
        print(
            f"  {episode.capture_key}: resumed at turn {result['resumed_from_turn']}, "
            f"{'transcript as if never interrupted' if same else 'TRANSCRIPT DIFFERS'}"
        )
        finished += same
    for client in replacements:
        ray.kill(client.handle)
    return 0 if finished == len(continued) == 4 else 1


if __name__ == "__main__":
    started = time.monotonic()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        _node_ip_address="127.0.0.1",
    )
    try:
        code = asyncio.run(main(Path(tempfile.mkdtemp(prefix="envckpt-ray-")) / "snapshot"))
    finally:
        ray.shutdown()
    print(f"done in {time.monotonic() - started:.1f} s")
    raise SystemExit(code)
