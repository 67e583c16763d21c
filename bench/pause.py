"""The snapshot pause over HTTP: envckpt against the honest floor, and against a raw client.

Up to four variants, interleaved, each driving N Gym instances at once (one
server process per instance, ``bench/server_process.py``; this process is the
coordinator and runs nothing else meanwhile):

* ``envckpt``: envckpt's ``Coordinator`` over ``HttpTransport`` (one per
  instance, as a trainer holds them) to envckpt participants;
* ``trainer``: the trainer's path to the same participants: one
  ``GymEnvironmentCheckpoint.snapshot`` over a ``GymCheckpointAdapter`` per
  instance (lifecycle machines, the fan-out, the session machine, the lease
  renewer and ``gym_checkpoint.json`` on top of the coordinators);
* ``raw->envckpt``: the minimal client of ``bench/raw_http.py`` to the same
  envckpt participants (what the coordinator side costs);
* ``floor``: the minimal client to the floor's endpoints (``bench/floor_app.py``),
  which write byte-identical records with the same fsyncs.

A run is one snapshot of every instance: staged prepare, commit, reverse
resume, from the first request to the last reply (the pause the trainer
sees). CPU seconds are kept too, of this process (the coordinator's cost)
and of this process plus the instances' server processes (all the work a
snapshot takes): load on a shared machine distorts them less than wall
time. Before
each run the previous checkpoints are deleted and the disk is synced,
untimed. ``pause/floor`` = envckpt / floor; ``coordinator/raw`` = envckpt /
raw->envckpt; ``trainer/floor`` = trainer / floor.

This process follows the guidance for a trainer of many instances
(docs/integration.md, "Very many instances"): once every variant has
discovered its instances, what startup built is frozen (``gc.freeze()``), so
full collections walk only what the runs allocate. Without it a full
collection walks every long-lived client object, and at 1000 instances
the collector took about a third of the coordinator's CPU, its full
collections a fifth (1.1 s of 5.5 s per snapshot): issue 24's super-linear
growth. Frozen, a full collection at 256 instances took 6-11 ms, not 70-110;
at 1000, full collections took 0.56 s per snapshot, not 1.1 (what is left is
the runs' own objects: some 3000 requests in flight).

    runs, cpu = asyncio.run(measure(envckpt_fleet, floor_fleet, count=8, rounds=5, root=dir))
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bench.fleet import Fleet
from bench.raw_http import RawClient, raw_cycle
from bench.states import rollout_ids
from bench.stats import interleave_async
from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.types import Participants
from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.checkpoint import GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.http.client import HttpTransport
from envckpt.inventory import InMemoryInventory

DEADLINE_SECONDS = 300.0
# Control round trips per instance and snapshot: prepare, commit, resume to 3 participants.
CALLS_PER_INSTANCE = 9
SHARD = "bench"


def instance_dir(root: Path, checkpoint_id: str, index: int) -> str:
    """Where instance ``index`` commits, as the adapter lays it out."""
    return str(GymCheckpointInstance(SHARD, index).checkpoint_dir(root / checkpoint_id))


def trainer_facade(
    transports: Sequence[HttpTransport], episodes: Sequence[EnvironmentEpisode]
) -> GymEnvironmentCheckpoint:
    """The trainer's checkpoint over one adapter per transport; every instance holds
    ``episodes`` live in the inventory, as the trainer's ledger would list them."""
    inventory = InMemoryInventory()
    instances = []
    for index, transport in enumerate(transports):
        instance = GymCheckpointInstance(SHARD, index)
        coordination = Coordinator(transport, instance_id=instance.instance_id)
        instances.append(
            LocalInstance(GymCheckpointAdapter(instance=instance, coordination=coordination))
        )
        for episode in episodes:
            inventory.add(instance.instance_id, episode)
    return GymEnvironmentCheckpoint(instances, inventory)


class _Driver:
    """The coordinators and raw clients of the first ``count`` instances of two fleets."""

    def __init__(
        self, envckpt: Fleet, floor: Fleet, *, count: int, root: Path, trainer: bool = False
    ) -> None:
        self.count = count
        self.root = root
        self.token = envckpt.token
        self.ids = rollout_ids(envckpt.episodes)
        self.episodes = tuple(EnvironmentEpisode(rid, 0) for rid in self.ids)
        self.transports = [HttpTransport(u, token=self.token) for u in envckpt.urls[:count]]
        self.coordinators = [Coordinator(t) for t in self.transports]
        self.raw_envckpt = [RawClient(u, token=self.token) for u in envckpt.urls[:count]]
        self.raw_floor = [RawClient(u, token=floor.token) for u in floor.urls[:count]]
        self.participants: list[Participants] = []
        # Its own transports: the trainer's pools are not warmed by the other variants.
        self.trainer_transports = [HttpTransport(u, token=self.token) for u in envckpt.urls[:count]]
        self.trainer = trainer_facade(self.trainer_transports, self.episodes)

    async def start(self) -> None:
        self.participants = list(await asyncio.gather(*(c.discover() for c in self.coordinators)))
        if self.trainer_transports:
            await self.trainer.check_startup()

    async def aclose(self) -> None:
        clients = [*self.raw_envckpt, *self.raw_floor]
        await asyncio.gather(*(t.aclose() for t in [*self.transports, *self.trainer_transports]))
        await asyncio.gather(*(c.aclose() for c in clients))

    def _checkpoint(self, checkpoint_id: str | None) -> tuple[str, float]:
        """The id (a new one unless given) and deadline of a run; its directory exists."""
        checkpoint_id = checkpoint_id or f"bench-{uuid.uuid4().hex[:12]}"
        (self.root / checkpoint_id).mkdir(exist_ok=True)
        return checkpoint_id, time.time() + DEADLINE_SECONDS

    async def envckpt_run(self, checkpoint_id: str | None = None) -> float:
        cid, deadline = self._checkpoint(checkpoint_id)

        async def one(index: int) -> None:
            coordinator, participants = self.coordinators[index], self.participants[index]
            result = await coordinator.prepare(participants, cid, deadline_ts=deadline)
            if not result.prepared:
                raise RuntimeError(f"instance {index} not prepared: {result.blockers()}")
            await coordinator.commit(
                participants,
                cid,
                instance_dir(self.root, cid, index),
                self.episodes,
                deadline_ts=deadline,
            )
            await coordinator.resume(participants, cid, deadline_ts=deadline)

        start = time.perf_counter()
        await asyncio.gather(*(one(index) for index in range(self.count)))
        return time.perf_counter() - start

    async def trainer_run(self) -> float:
        """One snapshot through the trainer's path: entered, then left (which resumes)."""
        path = self.root / f"bench-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        start = time.perf_counter()
        async with self.trainer.snapshot(path) as snapshot:
            if snapshot is None:
                raise RuntimeError("the trainer's checkpoint has no instances")
        return time.perf_counter() - start

    async def raw_run(
        self, clients: Sequence[RawClient], checkpoint_id: str | None = None
    ) -> float:
        cid, deadline = self._checkpoint(checkpoint_id)
        start = time.perf_counter()
        await asyncio.gather(
            *(
                raw_cycle(
                    client,
                    checkpoint_id=cid,
                    checkpoint_dir=instance_dir(self.root, cid, index),
                    rollout_ids=self.ids,
                    deadline_ts=deadline,
                )
                for index, client in enumerate(clients)
            )
        )
        return time.perf_counter() - start

    async def clean(self) -> None:
        """Delete every checkpoint so far and flush the disk (untimed, before each run)."""

        def work() -> None:
            for entry in self.root.iterdir():
                shutil.rmtree(entry, ignore_errors=True)
            os.sync()

        await asyncio.to_thread(work)


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


async def check_same_bytes(driver: _Driver) -> None:
    """One snapshot with one id through envckpt and through the floor: files must match.

    A floor that wrote less (or other) bytes than envckpt would flatter it.
    """
    cid = f"bench-same-{uuid.uuid4().hex[:8]}"
    trees = []
    for run in (driver.envckpt_run, lambda c: driver.raw_run(driver.raw_floor, c)):
        await run(cid)
        trees.append(_tree(driver.root / cid))
        shutil.rmtree(driver.root / cid)
    if trees[0] != trees[1] or not trees[0]:
        differ = (
            sorted(set(trees[0]).symmetric_difference(trees[1]))[:4]
            or [name for name in trees[0] if trees[0][name] != trees[1].get(name)][:4]
        )
        raise RuntimeError(f"the floor does not write envckpt's bytes: {differ}")


async def measure(
    envckpt: Fleet,
    floor: Fleet,
    *,
    count: int,
    rounds: int,
    root: Path,
    with_raw_envckpt: bool = True,
    with_trainer: bool = False,
    check_bytes: bool = False,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Interleaved pauses (seconds) of each variant over ``count`` instances, and CPU
    seconds per run: this (the coordinator's) process under the variant's name, and
    with the instances' server processes under "<name> total"."""
    driver = _Driver(envckpt, floor, count=count, root=root, trainer=with_trainer)
    cpu: dict[str, list[float]] = {}

    def timed(
        name: str, run: Callable[[], Awaitable[float]], servers: Fleet
    ) -> Callable[[], Awaitable[float]]:
        cpu[name] = []
        cpu[f"{name} total"] = []

        async def timed_run() -> float:
            started, served = time.process_time(), servers.cpu_seconds(count)
            wall = await run()
            spent = time.process_time() - started
            cpu[name].append(spent)
            cpu[f"{name} total"].append(spent + servers.cpu_seconds(count) - served)
            return wall

        return timed_run

    try:
        await driver.start()
        # The long-lived objects startup built: out of the collector's way (see above).
        gc.collect()
        gc.freeze()
        if check_bytes:
            await check_same_bytes(driver)
        variants = {
            "envckpt": timed("envckpt", driver.envckpt_run, envckpt),
            "floor": timed("floor", lambda: driver.raw_run(driver.raw_floor), floor),
        }
        if with_raw_envckpt:
            variants["raw->envckpt"] = timed(
                "raw->envckpt", lambda: driver.raw_run(driver.raw_envckpt), envckpt
            )
        if with_trainer:
            variants["trainer"] = timed("trainer", driver.trainer_run, envckpt)
        runs = await interleave_async(variants, rounds=rounds, between=driver.clean)
    finally:
        gc.unfreeze()
        await driver.clean()
        await driver.aclose()
    # The warm-up round's CPU times go the way of its wall times.
    return runs, {name: values[-rounds:] for name, values in cpu.items()}
