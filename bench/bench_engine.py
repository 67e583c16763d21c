"""Engine overhead: a snapshot cycle with the state machines on vs bare coordination.

    python bench/bench_engine.py [--quick] [--episodes N] [--cycles N]

Both sides drive the same in-process Gym deployment (a policy model, an agent
and a tool) holding N parked episodes through prepare -> commit -> resume:

* bare: ``Coordinator`` calls only;
* engine: ``GymCheckpointAdapter`` (legality check, the call, the reply
  checks, the transition and its log event).

Printed: the median cycle time of each and engine/bare (target <= 1.05).
Logging is filtered at WARNING, as a production trainer would; the second
ratio keeps the per-transition events and renders them as JSON to /dev/null.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import structlog

from envckpt.episodes import EnvironmentEpisode
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.sim.gym import SimulatedGym


async def _parked_gym(episodes: int) -> tuple[SimulatedGym, list[EnvironmentEpisode]]:
    """A deployment whose rollouts all parked mid-way (turn 2 of 4)."""
    gym = SimulatedGym(seed=1, judge=False)
    scope = [EnvironmentEpisode(f"r{i}", 0) for i in range(episodes)]
    participants = await gym.coordinator.discover()
    runs = [gym.start(episode, {"prompt": f"p{i}", "turns": 4}) for i, episode in enumerate(scope)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    # Park everything with one prepare/resume-free trick: prepare and keep it.
    deadline = gym.clock.now() + 60
    await gym.coordinator.prepare(participants, "warm", deadline_ts=deadline)
    await gym.coordinator.resume(participants, "warm", deadline_ts=deadline)
    for run in runs:
        run.cancel()
    await asyncio.gather(*runs, return_exceptions=True)
    return gym, scope


async def _bare_cycle(
    gym: SimulatedGym, scope: list[EnvironmentEpisode], root: Path, n: int
) -> float:
    participants = await gym.coordinator.discover()
    cid = f"bare-{n}"
    start = time.perf_counter()
    deadline = gym.clock.now() + 60
    result = await gym.coordinator.prepare(participants, cid, deadline_ts=deadline)
    await gym.coordinator.commit(
        participants, cid, str(root / cid), result.continued(scope), deadline_ts=deadline
    )
    await gym.coordinator.resume(participants, cid, deadline_ts=deadline)
    return time.perf_counter() - start


async def _engine_cycle(
    adapter: GymCheckpointAdapter, scope: list[EnvironmentEpisode], root: Path, n: int
) -> float:
    cid = f"engine-{n}"
    start = time.perf_counter()
    deadline = time.time() + 60
    result = await adapter.prepare(cid, deadline_ts=deadline)
    await adapter.commit(cid, root / cid, result.continued(scope), deadline_ts=deadline)
    await adapter.resume(cid, deadline_ts=deadline)
    return time.perf_counter() - start


async def _measure(episodes: int, cycles: int) -> tuple[float, float]:
    gym, scope = await _parked_gym(episodes)
    adapter = GymCheckpointAdapter(
        instance=GymCheckpointInstance("bench", 0), coordination=gym.coordinator
    )
    await adapter.discover()
    bare: list[float] = []
    engine: list[float] = []
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for n in range(cycles):  # interleaved, so drift hits both alike
            bare.append(await _bare_cycle(gym, scope, root, n))
            engine.append(await _engine_cycle(adapter, scope, root, n))
    return statistics.median(bare), statistics.median(engine)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_engine")
    parser.add_argument("--quick", action="store_true", help="fewer episodes and cycles")
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--cycles", type=int, default=None)
    args = parser.parse_args(argv)
    episodes = args.episodes or (50 if args.quick else 400)
    cycles = args.cycles or (7 if args.quick else 21)

    previous = structlog.get_config()
    try:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
        bare, engine = asyncio.run(_measure(episodes, cycles))
        with open(os.devnull, "w") as sink:
            structlog.configure(
                wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
                processors=[structlog.processors.JSONRenderer()],
                logger_factory=structlog.WriteLoggerFactory(file=sink),
            )
            bare_logged, engine_logged = asyncio.run(_measure(episodes, cycles))
    finally:
        structlog.configure(**previous)
    print(f"episodes={episodes} cycles={cycles} (median of each)")
    print(f"  bare coordination     {bare * 1000:8.2f} ms")
    print(f"  engine (machines on)  {engine * 1000:8.2f} ms   engine/bare = {engine / bare:.3f}")
    print(
        f"  with transition log   {engine_logged * 1000:8.2f} ms   "
        f"engine/bare = {engine_logged / bare_logged:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
