"""Tests for envckpt.trainer.startup: restore-then-build in one call."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from envckpt.demo.processes import start_job
from envckpt.demo.scenario import SETTINGS_NAME, DemoSettings, save_settings
from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.checkpoint import GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.sim.gym import SimulatedGym
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.job import RolloutTask
from envckpt.trainer.job_errors import (
    AllSnapshotsRefused,
    JobExit,
    SnapshotRootLocked,
    SnapshotRootUnusable,
)
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.root_guard import RootLock
from envckpt.trainer.startup import PendingStaging, add_start_arguments, start_trainer

from helpers.root_holder import held_by_another_process
from helpers.snapshot_files import publish
from helpers.tree_state import tree_state

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


def _start(tmp_path: Path, root: Path, **kwargs: Any) -> Any:
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
        **kwargs,
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


def _all_refused_root(root: Path) -> list[str]:
    """A root of two published snapshots whose ledgers no restore accepts; their ids."""
    layout = SnapshotLayout(root)
    ids = ["rollouts-step0000000001-aaa", "rollouts-step0000000002-bbb"]
    for index, checkpoint_id in enumerate(ids):
        publish(layout, checkpoint_id, float(index + 1))
    return ids


async def test_every_snapshot_refused_refuses_the_start_unless_a_fresh_one_is_allowed(
    tmp_path: Path,
) -> None:
    """start_trainer raises AllSnapshotsRefused (the lock let go, nothing run); with
    allow_fresh_start it starts from scratch and the snapshots move to refused/."""
    root = tmp_path / "snap"
    ids = _all_refused_root(root)
    with pytest.raises(AllSnapshotsRefused) as caught:
        await _start(tmp_path, root)
    assert [name for name, _ in caught.value.refused] == list(reversed(ids))
    with RootLock.acquire(root) as lock:
        assert lock.held
    started = await _start(tmp_path, root, allow_fresh_start=True)
    try:
        assert started.report.path is None and len(started.report.refused) == 2
    finally:
        started.close()
    assert sorted(name for name, _ in SnapshotLayout(root).refused_entries()) == ids


def test_start_arguments_add_the_fresh_start_flag() -> None:
    """--allow-fresh-start parses to allow_fresh_start; it is off by default."""
    parser = argparse.ArgumentParser()
    add_start_arguments(parser)
    assert parser.parse_args([]).allow_fresh_start is False
    assert parser.parse_args(["--allow-fresh-start"]).allow_fresh_start is True


def test_a_trainer_process_with_every_snapshot_refused_exits_3_one_line_each(
    tmp_path: Path,
) -> None:
    """The red-team case through a real entry point (the demo's trainer process, a
    subprocess with its Gym server child): exit 3, a summary line and one line per refused
    snapshot with why, no traceback; every snapshot still where it was."""
    settings = DemoSettings(instances=1, rollouts=2, directory=tmp_path / "job")
    settings.directory.mkdir()
    ids = _all_refused_root(settings.directory)
    save_settings(settings, settings.directory / SETTINGS_NAME)
    before = tree_state(settings.directory / "snapshots")
    trainer = start_job(settings, 1)  # as the demo starts it; its output goes to a log
    code = trainer.wait(timeout=180)
    output = (settings.directory / "trainer-1.out").read_text()
    assert code == int(JobExit.START_REFUSED), output
    [head, *lines] = output.splitlines()
    assert head.startswith("envckpt trainer: every snapshot in ") and "--allow-fresh-start" in head
    assert [line.split(":")[0] for line in lines] == [f"  refused {ids[1]}", f"  refused {ids[0]}"]
    assert all("ledger" in line for line in lines)
    assert tree_state(settings.directory / "snapshots") == before
