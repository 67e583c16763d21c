"""Tests for envckpt.trainer.startup: restore-then-build in one call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.checkpoint import GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.sim.gym import SimulatedGym
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.job import RolloutTask
from envckpt.trainer.job_errors import SnapshotRootLocked, SnapshotRootUnusable
from envckpt.trainer.root_guard import RootLock
from envckpt.trainer.startup import PendingStaging, start_trainer

from helpers.root_holder import held_by_another_process

INSTANCE = GymCheckpointInstance("shard", 0)


class Backend:
    def __init__(self, gym: SimulatedGym) -> None:
        self.gym = gym

    async def run(self, instance_id: str, episode: EnvironmentEpisode, task: dict) -> dict:  # type: ignore[type-arg]
        return await self.gym.run(episode, task)


async def test_pending_staging_refuses_rows_before_restore() -> None:
    """A token row that arrives before the ledger exists is refused, not lost silently."""
    with pytest.raises(RuntimeError, match="before the trainer restored"):
        await PendingStaging().stage("r1", "r1/t0", "{}")


async def test_a_fresh_start_builds_a_job_that_finishes_and_stages_rows(tmp_path: Path) -> None:
    """With no snapshot the job starts empty, finishes, and its rows reach the data plane."""
    staging = PendingStaging()
    gym = SimulatedGym(seed=3, staging_sink=staging)
    facade = GymEnvironmentCheckpoint(
        [LocalInstance(GymCheckpointAdapter(instance=INSTANCE, coordination=gym.coordinator))]
    )
    task = {"prompt": "p", "turns": 3}
    started = await start_trainer(
        [RolloutTask("r1", INSTANCE.instance_id, task)],
        facade=facade,
        backend=Backend(gym),
        barrier=DataPlaneBarrier(),
        root=tmp_path / "snapshots",
        data_plane_path=tmp_path / "live.sqlite",
        staging=staging,
    )
    assert started.report.path is None and len(started.results) == 0
    assert facade.inventory is started.report.ledger
    await started.job.run()
    result = started.results.get("r1")
    assert result is not None and result["transcript"] == gym.expected_transcript("r1", task)
    assert set(started.report.data_plane.keys()) >= set(result["staging_keys"])
    assert started.lock.held
    started.close()
    assert not started.lock.held


def _start(tmp_path: Path, root: Path) -> Any:
    staging = PendingStaging()
    gym = SimulatedGym(seed=3, staging_sink=staging)
    facade = GymEnvironmentCheckpoint(
        [LocalInstance(GymCheckpointAdapter(instance=INSTANCE, coordination=gym.coordinator))]
    )
    return start_trainer(
        [RolloutTask("r1", INSTANCE.instance_id, {"prompt": "p", "turns": 3})],
        facade=facade,
        backend=Backend(gym),
        barrier=DataPlaneBarrier(),
        root=root,
        data_plane_path=tmp_path / "live.sqlite",
        staging=staging,
    )


async def test_an_unusable_snapshot_root_refuses_to_start_before_anything_runs(
    tmp_path: Path,
) -> None:
    """snapshots/ being a file fails the probe: SnapshotRootUnusable, and the lock is let go."""
    root = tmp_path / "snap"
    root.mkdir()
    (root / "snapshots").write_text("a file where snapshots should go")
    with pytest.raises(SnapshotRootUnusable) as caught:
        await _start(tmp_path, root)
    assert caught.value.step == "create snapshots/"
    assert not (tmp_path / "live.sqlite").exists()
    with RootLock.acquire(root) as lock:
        assert lock.held


async def test_a_root_another_trainer_holds_refuses_to_start(tmp_path: Path) -> None:
    """A second trainer on the same root gets SnapshotRootLocked and touches nothing."""
    root = tmp_path / "snap"
    debris = root / ".tmp" / "rollouts-in-flight"
    debris.mkdir(parents=True)
    with held_by_another_process(root) as pid, pytest.raises(SnapshotRootLocked) as caught:
        await _start(tmp_path, root)
    assert caught.value.pid == pid
    assert debris.is_dir()
