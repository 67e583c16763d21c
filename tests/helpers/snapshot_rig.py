"""A trainer rig over simulated Gym instances, shared by the trainer tests.

``Rig`` wires one "incarnation" the way ``envckpt.demo.inprocess`` does: N
``SimulatedGym`` deployments (tool latency keeps rollouts mid-flight), the
facade over them, the barrier, ledger, SQLite data plane, result store and a
snapshotter; ``fresh()`` starts with empty trainer state, ``restore()`` from
the newest usable snapshot. ``dispatched_r1`` is the trainer state alone: a
data plane, its ledger and barrier, with one rollout sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from envckpt.clock import SystemClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.sim.gym import (
    AGENT_SERVER,
    MODEL_SERVER,
    RESOURCES_SERVER,
    SimulatedGym,
    expected_transcript,
)
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.job import RolloutJob, RolloutTask, StagingRecorder
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.restorer import Restorer, RestoreReport
from envckpt.trainer.results import RESULTS_SIDECAR, ResultStore, read_results_sidecar
from envckpt.trainer.snapshotter import RolloutSnapshotter

SEED = 3
TURNS = 10
PARTICIPANTS = ((MODEL_SERVER, "model"), (AGENT_SERVER, "agent"), (RESOURCES_SERVER, "resources"))


@contextlib.asynccontextmanager
async def dispatched_r1(
    path: Path,
) -> AsyncIterator[tuple[DataPlaneBarrier, SqliteDataPlane, RecoveryLedger]]:
    """A SQLite data plane at ``path``, a ledger over it and a barrier, with r1 reserved on
    shard/replica-0 and dispatched; the plane is closed on leaving."""
    barrier = DataPlaneBarrier()
    with SqliteDataPlane(path) as plane:
        ledger = RecoveryLedger(data_plane=plane)
        async with barrier.mutation() as cut:
            ledger.reserve(cut, "r1", "shard/replica-0")
            ledger.dispatch(cut, "r1")
        yield barrier, plane, ledger


class LateSink:
    """The model's staging sink; its recorder is attached once the trainer state exists."""

    def __init__(self) -> None:
        self.target: StagingRecorder | None = None

    async def stage(self, capture_key: str, staging_key: str, payload: str) -> None:
        assert self.target is not None, "staging before the trainer attached its state"
        await self.target.stage(capture_key, staging_key, payload)


class GymBackend:
    """``RolloutBackend`` over the rig's simulated Gym deployments."""

    def __init__(self, gyms: dict[str, SimulatedGym]) -> None:
        self.gyms = gyms

    async def run(self, instance_id: str, episode: EnvironmentEpisode, task: Any) -> dict[str, Any]:
        return await self.gyms[instance_id].run(episode, task)


class Rig:
    """One incarnation of a training job: Gym processes, facade, trainer state."""

    def __init__(
        self,
        root: Path,
        *,
        instances: int = 2,
        tool_latency: float = 0.02,
        resources_mode: str = "export_restore",
        keep_latest_k: int = 3,
    ) -> None:
        self.root = root
        self.keep_latest_k = keep_latest_k
        self.instances = [GymCheckpointInstance("shard", index) for index in range(instances)]
        self.ids = [instance.instance_id for instance in self.instances]
        self.sink = LateSink()
        self.gyms = {
            instance_id: SimulatedGym(
                seed=SEED,
                tool_latency=tool_latency,
                resources_mode=resources_mode,
                park_poll_seconds=0.005,
                staging_sink=self.sink,
                audit_path=root / "audit.jsonl",
            )
            for instance_id in self.ids
        }
        self.facade = GymEnvironmentCheckpoint(
            [
                LocalInstance(GymCheckpointAdapter(instance=instance, coordination=gym.coordinator))
                for instance, gym in zip(self.instances, self.gyms.values(), strict=True)
            ],
            timeouts=CheckpointTimeouts(prepare_seconds=5.0, commit_seconds=10.0),
        )
        self.barrier = DataPlaneBarrier()
        self.snapshot_root = root / "snap"
        self.layout = SnapshotLayout(self.snapshot_root)
        self.live_path = root / "live.sqlite"

    def fresh(self) -> Rig:
        """Start with empty trainer state (no restore)."""
        plane = SqliteDataPlane(self.live_path)
        self.attach(RecoveryLedger(data_plane=plane), plane, ResultStore())
        return self

    async def restore(self, *, allow_fresh_start: bool = False) -> RestoreReport:
        """Start from the newest usable snapshot, as a restarted job does."""
        await self.facade.check_startup()
        restorer = self.restorer(allow_fresh_start=allow_fresh_start)
        report = await restorer.restore(data_plane_path=self.live_path)
        results = report.sidecars.get(RESULTS_SIDECAR, ResultStore())
        assert isinstance(results, ResultStore)
        self.attach(report.ledger, report.data_plane, results)
        return report

    def restorer(self, *, allow_fresh_start: bool = False) -> Restorer:
        """The restorer a started trainer uses: results sidecar checked against the ledger."""
        return Restorer(
            self.snapshot_root,
            env_checkpoint=self.facade,
            barrier=self.barrier,
            sidecar_readers={RESULTS_SIDECAR: read_results_sidecar},
            allow_fresh_start=allow_fresh_start,
        )

    def attach(self, ledger: RecoveryLedger, plane: SqliteDataPlane, results: ResultStore) -> None:
        self.ledger, self.plane, self.results = ledger, plane, results
        self.facade.inventory = ledger
        self.sink.target = StagingRecorder(barrier=self.barrier, ledger=ledger, data_plane=plane)
        self.snapshotter = RolloutSnapshotter(
            self.snapshot_root,
            env_checkpoint=self.facade,
            barrier=self.barrier,
            ledger=ledger,
            data_plane=plane,
            keep_latest_k=self.keep_latest_k,
            sidecars={RESULTS_SIDECAR: results.to_bytes},
        )

    def tasks(self, count: int, *, turns: int = TURNS) -> list[RolloutTask]:
        return [
            RolloutTask(
                rollout_id=f"r{index}",
                instance_id=self.ids[index % len(self.ids)],
                task={"prompt": f"task {index}", "turns": turns},
            )
            for index in range(count)
        ]

    def job(self, tasks: list[RolloutTask], **kwargs: Any) -> RolloutJob:
        kwargs.setdefault("backend", GymBackend(self.gyms))
        return RolloutJob(
            tasks,
            ledger=self.ledger,
            data_plane=self.plane,
            barrier=self.barrier,
            snapshotter=self.snapshotter,
            results=self.results,
            **kwargs,
        )

    def phases(self) -> set[str]:
        return {core.phase for gym in self.gyms.values() for core in gym.cores.values()}

    def turns_held(self) -> dict[str, int]:
        """Capture key -> turns taken, of every agent session on every instance."""
        return {
            key: len(state["turns"])
            for gym in self.gyms.values()
            for key, state in gym.agent.sessions().items()
        }

    async def crash(self) -> None:
        """Lose every process: running rollouts die, only files survive."""
        for gym in self.gyms.values():
            await gym.shutdown()
        self.plane.close()


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        await asyncio.sleep(0.002)


@contextlib.asynccontextmanager
async def running(job: RolloutJob, **kwargs: Any) -> AsyncIterator[asyncio.Task[Any]]:
    """Run ``job`` in the background; cancel it if the block leaves it unfinished."""
    task = asyncio.create_task(job.run(**kwargs))
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def mid_flight(rig: Rig, *, per_instance: int = 1) -> None:
    """Wait until every instance holds ``per_instance`` sessions past their first turn."""

    def ready() -> bool:
        return all(
            sum(1 for s in gym.agent.sessions().values() if 0 < len(s["turns"]) < TURNS - 2)
            >= per_instance
            for gym in rig.gyms.values()
        )

    await wait_until(ready)


def assert_finished_correctly(rig: Rig, tasks: list[RolloutTask]) -> None:
    assert len(rig.results) == len(tasks)
    for task in tasks:
        result = rig.results.get(task.rollout_id)
        assert result is not None
        assert result["transcript"] == expected_transcript(task.rollout_id, task.task, seed=SEED)


class ShiftedClock(SystemClock):
    """The system clock plus an offset a test can move forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return super().now() + self.offset
