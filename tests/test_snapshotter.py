"""Tests for envckpt.trainer.snapshotter: rollout snapshots of real simulated Gym instances.

``Rig`` wires one "incarnation" the way ``envckpt.demo.inprocess`` does: N
``SimulatedGym`` deployments (tool latency keeps rollouts mid-flight), the
facade over them, the barrier, ledger, SQLite data plane, result store and a
snapshotter; ``fresh()`` starts with empty trainer state, ``restore()`` from
the newest usable snapshot. ``test_restorer`` and ``test_job`` reuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from envckpt.clock import SystemClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.facade.manifest import MANIFEST_NAME as GYM_MANIFEST
from envckpt.facade.manifest import read_manifest
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.gym.simulated import (
    AGENT_SERVER,
    MODEL_SERVER,
    RESOURCES_SERVER,
    SimulatedGym,
    expected_transcript,
)
from envckpt.interfaces import MutationCut, NoEnvironmentCheckpoint
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.job import RolloutJob, RolloutTask, StagingRecorder
from envckpt.trainer.layout import SnapshotLayout, verify_snapshot
from envckpt.trainer.ledger import LedgerStatus, RecoveryLedger
from envckpt.trainer.restorer import Restorer, RestoreReport
from envckpt.trainer.results import RESULTS_SIDECAR, ResultStore
from envckpt.trainer.snapshotter import (
    DATA_PLANE_NAME,
    LEDGER_NAME,
    SIDECAR_DIR,
    RolloutSnapshotter,
)

SEED = 3
TURNS = 10
PARTICIPANTS = ((MODEL_SERVER, "model"), (AGENT_SERVER, "agent"), (RESOURCES_SERVER, "resources"))


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

    async def restore(self) -> RestoreReport:
        """Start from the newest usable snapshot, as a restarted job does."""
        await self.facade.check_startup()
        restorer = Restorer(self.snapshot_root, env_checkpoint=self.facade, barrier=self.barrier)
        report = await restorer.restore(data_plane_path=self.live_path)
        results = ResultStore()
        if report.path is not None:
            sidecar = report.path / SIDECAR_DIR / RESULTS_SIDECAR
            results = ResultStore.from_bytes(sidecar.read_bytes())
        self.attach(report.ledger, report.data_plane, results)
        return report

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


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(tmp_path).fresh()
    yield rig
    rig.plane.close()


async def test_a_snapshot_publishes_a_verified_directory_with_every_part(rig: Rig) -> None:
    """A mid-flight snapshot holds the facade manifest, data plane, ledger, sidecars and records."""
    tasks = rig.tasks(4)
    async with running(rig.job(tasks)) as job_task:
        await mid_flight(rig)
        result = await rig.snapshotter.take()
        await job_task
    manifest = verify_snapshot(result.path)
    assert result.path == rig.snapshot_root / "snapshots" / result.checkpoint_id
    assert rig.layout.latest() == result.checkpoint_id
    assert manifest.checkpoint_id == result.checkpoint_id
    files = set(manifest.files)
    assert {GYM_MANIFEST, DATA_PLANE_NAME, LEDGER_NAME, f"{SIDECAR_DIR}/{RESULTS_SIDECAR}"} <= files
    for instance_id in rig.ids:
        for server, kind in PARTICIPANTS:
            prefix = f"gym-instances/{instance_id}/gym/{kind}/{server}/"
            assert f"{prefix}manifest.json" in files
            assert any(name.startswith(f"{prefix}records-") for name in files)
    # The environment's manifest and the trainer's ledger describe the same rollouts.
    gym_manifest = read_manifest(result.path)
    saved = RecoveryLedger.load(result.path / LEDGER_NAME)
    for instance_id in rig.ids:
        dispatched = tuple(
            sorted(
                e.episode
                for e in saved.entries()
                if e.instance_id == instance_id and e.status is LedgerStatus.DISPATCHED
            )
        )
        assert gym_manifest.instances[instance_id].episodes == dispatched
        assert dispatched, "the snapshot was meant to catch rollouts mid-flight"
    assert result.exported_episodes == sum(
        len(record.episodes) for record in gym_manifest.instances.values()
    )
    # Every staging key the environment kept has its row in the saved data plane.
    copy = SqliteDataPlane.restore_from(result.path / DATA_PLANE_NAME, rig.root / "copy.sqlite")
    with copy:
        assert gym_manifest.staging_keys() <= copy.keys()
        assert gym_manifest.staging_keys()
    assert rig.snapshotter.history == [result]
    assert_finished_correctly(rig, tasks)


async def test_dispatch_is_closed_and_the_environment_paused_inside_the_snapshot(rig: Rig) -> None:
    """Inside the context the gate is shut and every participant committed; after, both reopen."""
    tasks = rig.tasks(4)
    gate = rig.snapshotter.dispatch
    async with running(rig.job(tasks)) as job_task:
        await mid_flight(rig)
        held: dict[str, int] = {}
        async with rig.snapshotter.snapshot() as result:
            assert not gate.is_open
            waiter = asyncio.create_task(gate.wait_open())
            assert rig.phases() == {"committed"}
            assert result.path.is_dir() and rig.layout.latest() == result.checkpoint_id
            assert "snapshot_paused_seconds" not in result.metrics
            held = rig.turns_held()
            await asyncio.sleep(0.05)
            assert rig.turns_held() == held, "no rollout advanced while paused"
            assert not waiter.done()
        assert gate.is_open
        await asyncio.wait_for(waiter, 1.0)
        assert rig.phases() == {"idle"}
        await job_task
    assert_finished_correctly(rig, tasks)


async def test_metrics_report_pause_phases_bytes_and_counts(rig: Rig) -> None:
    """Metrics hold paused seconds, per-phase seconds, bytes and exported/restarted counts."""
    async with running(rig.job(rig.tasks(4))) as job_task:
        await mid_flight(rig)
        result = await rig.snapshotter.take()
        await job_task
    metrics = result.metrics
    for name in (
        "snapshot_paused_seconds",
        "snapshot_env_seconds",
        "snapshot_cut_wait_seconds",
        "snapshot_cut_seconds",
        "snapshot_publish_seconds",
        "env_retire_seconds",
        "env_prepare_seconds",
        "env_commit_seconds",
    ):
        assert metrics[name] >= 0.0, name
    paused = metrics["snapshot_paused_seconds"]
    assert metrics["env_paused_seconds"] == paused
    assert paused >= metrics["snapshot_env_seconds"] + metrics["snapshot_cut_seconds"]
    assert metrics["snapshot_env_seconds"] >= metrics["env_prepare_seconds"]
    on_disk = sum(
        p.stat().st_size
        for p in result.path.rglob("*")
        if p.is_file() and p.relative_to(result.path).as_posix() != "MANIFEST.json"
    )
    assert metrics["snapshot_bytes"] == on_disk
    assert 0 < metrics["snapshot_trainer_bytes"] < metrics["snapshot_bytes"]
    assert metrics["env_exported_episodes"] == result.exported_episodes > 0
    assert metrics["env_restarted_rollouts"] == result.restarted_rollouts == 0
    assert metrics["env_instances"] == len(rig.ids)
    # The metrics known before publishing are recorded in the top-level manifest too.
    recorded = verify_snapshot(result.path).metrics
    assert recorded["snapshot_trainer_bytes"] == metrics["snapshot_trainer_bytes"]


async def test_restart_only_resources_count_restarted_rollouts(tmp_path: Path) -> None:
    """With restart_only resources the in-flight rollouts are counted as restarts, not exports."""
    rig = Rig(tmp_path, resources_mode="restart_only").fresh()
    try:
        async with running(rig.job(rig.tasks(4))) as job_task:
            await mid_flight(rig)
            result = await rig.snapshotter.take()
            await job_task
        saved = RecoveryLedger.load(result.path / LEDGER_NAME)
        dispatched = [e for e in saved.entries() if e.status is LedgerStatus.DISPATCHED]
        assert result.restarted_rollouts > 0
        assert result.exported_episodes + result.restarted_rollouts == len(dispatched)
        assert result.metrics["env_restarted_rollouts"] == result.restarted_rollouts
        assert result.metrics["env_exported_episodes"] == result.exported_episodes
        verify_snapshot(result.path)
    finally:
        rig.plane.close()


# ---------------------------------------------------------------- failures


@contextlib.asynccontextmanager
async def commit_fault(rig: Rig) -> AsyncIterator[None]:
    rig.gyms[rig.ids[1]].faults.add("crash_before_publish", server=AGENT_SERVER, times=2)
    yield
    rig.gyms[rig.ids[1]].faults.clear()


@contextlib.asynccontextmanager
async def agent_episode_in_flight(rig: Rig) -> AsyncIterator[None]:
    rig.facade.timeouts = CheckpointTimeouts(prepare_seconds=0.1, commit_seconds=10.0)
    async with rig.gyms[rig.ids[0]].agent.core.admit(EnvironmentEpisode("held", 0)):
        yield


@contextlib.asynccontextmanager
async def ledger_names_an_unseen_rollout(rig: Rig) -> AsyncIterator[None]:
    async with rig.barrier.mutation() as cut:
        rig.ledger.reserve(cut, "ghost", rig.ids[0])
        rig.ledger.dispatch(cut, "ghost")
    yield
    async with rig.barrier.mutation() as cut:
        rig.ledger.abandon(cut, "ghost")


@contextlib.asynccontextmanager
async def sidecar_fails(rig: Rig) -> AsyncIterator[None]:
    def broken(cut: MutationCut) -> bytes:
        raise OSError("disk full")

    rig.snapshotter.sidecars["broken"] = broken
    yield
    del rig.snapshotter.sidecars["broken"]


@pytest.mark.parametrize(
    ("inject", "retryable"),
    [
        (commit_fault, True),
        (agent_episode_in_flight, True),
        (ledger_names_an_unseen_rollout, True),
        (sidecar_fails, False),
    ],
    ids=["commit-fault", "not-ready", "cut-check-refuses", "trainer-save-fails"],
)
async def test_a_failure_before_publish_publishes_nothing_and_keeps_latest(
    rig: Rig, inject: Callable[[Rig], contextlib.AbstractAsyncContextManager[None]], retryable: bool
) -> None:
    """A failed snapshot leaves no temporary dir, keeps LATEST, counts failures, reopens all."""
    first = await rig.snapshotter.take()
    async with inject(rig):
        for count in (1, 2):
            with capture_logs() as logs, pytest.raises(Exception) as caught:
                await rig.snapshotter.take()
            assert rig.facade.is_unavailable(caught.value) is retryable
            assert rig.snapshotter.consecutive_failures == count
            assert list(rig.layout.temporary.iterdir()) == []
            assert [p.name for p in rig.layout.published()] == [first.checkpoint_id]
            assert rig.layout.latest() == first.checkpoint_id
            assert rig.snapshotter.dispatch.is_open
            assert rig.phases() == {"idle"}
            failed = [e for e in logs if e["event"] == "snapshot failed; nothing published"]
            assert len(failed) == 1 and failed[0]["retryable"] is retryable
            assert failed[0]["consecutive_failures"] == count
    second = await rig.snapshotter.take()
    assert rig.snapshotter.consecutive_failures == 0
    assert rig.layout.latest() == second.checkpoint_id
    assert rig.snapshotter.history == [first, second]


async def test_a_failure_inside_the_context_after_publish_keeps_the_snapshot(rig: Rig) -> None:
    """An error raised in the body after publishing resumes and reopens, but keeps the snapshot."""
    with pytest.raises(KeyError):
        async with rig.snapshotter.snapshot() as result:
            raise KeyError("trainer failed while paused")
    assert rig.layout.latest() == result.checkpoint_id
    verify_snapshot(result.path)
    assert rig.snapshotter.dispatch.is_open and rig.phases() == {"idle"}
    assert rig.snapshotter.consecutive_failures == 0


async def test_sidecars_are_written_under_the_live_checkpoint_cut(rig: Rig) -> None:
    """Each sidecar is produced under the checkpoint cut and saved under sidecars/."""
    seen: list[bool] = []

    def sidecar(cut: MutationCut) -> bytes:
        cut.require_live()
        seen.append(rig.barrier.checkpoint_active)
        return b"trainer step 7"

    rig.snapshotter.sidecars["optimizer-step"] = sidecar
    result = await rig.snapshotter.take()
    assert seen == [True]
    assert (result.path / SIDECAR_DIR / "optimizer-step").read_bytes() == b"trainer step 7"
    assert f"{SIDECAR_DIR}/optimizer-step" in verify_snapshot(result.path).files


async def test_keep_latest_k_prunes_older_snapshots(tmp_path: Path) -> None:
    """Only the newest keep_latest_k snapshots stay; LATEST names the newest."""
    rig = Rig(tmp_path, keep_latest_k=2).fresh()
    try:
        taken = [await rig.snapshotter.take() for _ in range(3)]
        assert [p.name for p in rig.layout.published()] == [
            taken[2].checkpoint_id,
            taken[1].checkpoint_id,
        ]
        assert not taken[0].path.exists()
        assert rig.layout.latest() == taken[2].checkpoint_id
    finally:
        rig.plane.close()
    with pytest.raises(ValueError):
        RolloutSnapshotter(
            tmp_path,
            env_checkpoint=NoEnvironmentCheckpoint(),
            barrier=rig.barrier,
            ledger=rig.ledger,
            data_plane=rig.plane,
            keep_latest_k=0,
        )


async def test_back_to_back_snapshots_warn_about_a_mostly_paused_environment(rig: Rig) -> None:
    """A snapshot taken right after another warns; one after a long run does not."""
    clock = ShiftedClock()
    snapshotter = RolloutSnapshotter(
        rig.snapshot_root,
        env_checkpoint=rig.facade,
        barrier=rig.barrier,
        ledger=rig.ledger,
        data_plane=rig.plane,
        clock=clock,
    )
    warning = "the environment spent longer paused than running since the last snapshot"
    with capture_logs() as first_logs:
        await snapshotter.take()
    assert not [e for e in first_logs if e["event"] == warning]
    with capture_logs() as back_to_back:
        await snapshotter.take()
    warned = [e for e in back_to_back if e["event"] == warning]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning"
    assert warned[0]["paused_seconds"] >= warned[0]["running_seconds"]
    clock.offset += 1000.0  # the environment ran for a long time
    with capture_logs() as after_a_run:
        await snapshotter.take()
    assert not [e for e in after_a_run if e["event"] == warning]


async def test_without_environment_state_a_snapshot_still_saves_the_trainer_state(
    tmp_path: Path,
) -> None:
    """With NoEnvironmentCheckpoint the data plane and ledger are still saved and published."""
    barrier = DataPlaneBarrier()
    with SqliteDataPlane(tmp_path / "live.sqlite") as plane:
        ledger = RecoveryLedger(data_plane=plane)
        async with barrier.mutation() as cut:
            ledger.reserve(cut, "r1", "shard/replica-0")
            ledger.dispatch(cut, "r1")
            plane.put(cut, "r1/t0", "r1", b"row")
            ledger.add_staging_keys(cut, "r1", ["r1/t0"])
        snapshotter = RolloutSnapshotter(
            tmp_path / "snap",
            env_checkpoint=NoEnvironmentCheckpoint(),
            barrier=barrier,
            ledger=ledger,
            data_plane=plane,
        )
        result = await snapshotter.take()
    assert set(verify_snapshot(result.path).files) == {DATA_PLANE_NAME, LEDGER_NAME}
    assert result.exported_episodes == result.restarted_rollouts == 0
    assert not [name for name in result.metrics if name.startswith("env_")]
    assert result.metrics["snapshot_paused_seconds"] >= 0.0
    saved = RecoveryLedger.load(result.path / LEDGER_NAME)
    assert saved.entries() == ledger.entries()
    with SqliteDataPlane.restore_from(
        result.path / DATA_PLANE_NAME, tmp_path / "copy.sqlite"
    ) as copy:
        assert copy.keys() == {"r1/t0"}


class SlowResume:
    """An ``InstanceClient`` whose resume takes a while (and says when it started)."""

    def __init__(self, inner: LocalInstance, started: asyncio.Event) -> None:
        self.inner = inner
        self.started = started

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def instance_id(self) -> str:
        return self.inner.instance_id

    async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        self.started.set()
        await asyncio.sleep(0.1)
        await self.inner.resume(checkpoint_id, deadline_ts=deadline_ts)


async def test_a_snapshot_cancelled_while_resuming_leaves_the_environment_running(
    rig: Rig,
) -> None:
    """Cancelling a snapshot during its resume (as RolloutJob.run does at its end) resumes Gym."""
    started = asyncio.Event()
    facade = GymEnvironmentCheckpoint(
        [
            SlowResume(
                LocalInstance(
                    GymCheckpointAdapter(instance=instance, coordination=gym.coordinator)
                ),
                started,
            )
            for instance, gym in zip(rig.instances, rig.gyms.values(), strict=True)
        ],
        rig.ledger,
    )
    snapshotter = RolloutSnapshotter(
        rig.snapshot_root,
        env_checkpoint=facade,
        barrier=rig.barrier,
        ledger=rig.ledger,
        data_plane=rig.plane,
    )
    taking = asyncio.create_task(snapshotter.take())
    await started.wait()
    taking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await taking
    assert rig.layout.latest() is not None  # it was published before the cancel
    assert rig.phases() == {"idle"}
    await snapshotter.take()
