"""Tests for envckpt.trainer.snapshotter: rollout snapshots of real simulated Gym instances."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import GymCheckpointUnavailable
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.facade.manifest import MANIFEST_NAME as GYM_MANIFEST
from envckpt.facade.manifest import read_manifest
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.interfaces import MutationCut, NoEnvironmentCheckpoint
from envckpt.sim.gym import (
    AGENT_SERVER,
)
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.ledger import LedgerStatus, RecoveryLedger
from envckpt.trainer.results import RESULTS_SIDECAR
from envckpt.trainer.snapshot_manifest import verify_snapshot
from envckpt.trainer.snapshotter import (
    DATA_PLANE_NAME,
    LEDGER_NAME,
    SIDECAR_DIR,
    RolloutSnapshotter,
)

from helpers.snapshot_rig import (
    PARTICIPANTS,
    Rig,
    ShiftedClock,
    assert_finished_correctly,
    dispatched_r1,
    mid_flight,
    running,
)


async def test_a_snapshot_publishes_a_verified_directory_with_every_part(rig: Rig) -> None:
    """A mid-flight snapshot holds the facade manifest, data plane, ledger, sidecars and records."""
    tasks = rig.tasks(4)
    async with running(rig.job(tasks)) as job_task:
        await mid_flight(rig)
        result = await rig.snapshotter.take()
        await job_task
    manifest = verify_snapshot(result.path)
    assert result.path == rig.snapshot_root / "snapshots" / result.checkpoint_id
    assert rig.layout.newest() == result.checkpoint_id
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
            assert result.path.is_dir() and rig.layout.newest() == result.checkpoint_id
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
    # take() resumes early: the pause holds the environment's phases, not the trainer's.
    assert paused >= metrics["snapshot_env_seconds"]
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
async def test_a_failure_before_publish_publishes_nothing_and_is_logged_once(
    rig: Rig, inject: Callable[[Rig], contextlib.AbstractAsyncContextManager[None]], retryable: bool
) -> None:
    """A failed snapshot leaves no temporary dir, one snapshot_failed event, counts, reopens all."""
    first = await rig.snapshotter.take()
    async with inject(rig):
        for count in (1, 2):
            with capture_logs() as logs, pytest.raises(Exception) as caught:
                await rig.snapshotter.take()
            assert rig.facade.is_unavailable(caught.value) is retryable
            assert rig.snapshotter.consecutive_failures == count
            assert list(rig.layout.temporary.iterdir()) == []
            assert [p.name for p in rig.layout.published()] == [first.checkpoint_id]
            assert rig.layout.newest() == first.checkpoint_id
            assert rig.snapshotter.dispatch.is_open
            assert rig.phases() == {"idle"}
            failed = [e for e in logs if e["event"] == "snapshot_failed"]
            assert len(failed) == 1 and failed[0]["retryable"] is retryable
            assert failed[0]["consecutive_failures"] == count
            assert failed[0]["failures_total"] == count
            assert failed[0]["reason"] == f"{type(caught.value).__name__}: {caught.value}"
            assert rig.snapshotter.last_failure == failed[0]["reason"]
    second = await rig.snapshotter.take()
    assert rig.snapshotter.consecutive_failures == 0
    assert rig.layout.newest() == second.checkpoint_id
    assert rig.snapshotter.history == [first, second]


async def test_a_failure_inside_the_context_after_publish_keeps_the_snapshot(rig: Rig) -> None:
    """An error raised in the body after publishing resumes and reopens, but keeps the snapshot."""
    with pytest.raises(KeyError):
        async with rig.snapshotter.snapshot() as result:
            raise KeyError("trainer failed while paused")
    assert rig.layout.newest() == result.checkpoint_id
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
    """Only the newest keep_latest_k snapshots stay; the pruned ones went through the trash."""
    rig = Rig(tmp_path, keep_latest_k=2).fresh()
    try:
        taken = [await rig.snapshotter.take() for _ in range(3)]
        assert [p.name for p in rig.layout.published()] == [
            taken[2].checkpoint_id,
            taken[1].checkpoint_id,
        ]
        assert not taken[0].path.exists()
        assert rig.layout.newest() == taken[2].checkpoint_id
        assert list(rig.layout.trash.iterdir()) == []
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
        await snapshotter.take(reason="timer")
    assert not [e for e in first_logs if e["event"] == warning]
    with capture_logs() as requested:
        await snapshotter.take()  # asked for (SIGUSR1, preemption): no timer to blame
    assert not [e for e in requested if e["event"] == warning]
    with capture_logs() as back_to_back:
        async with snapshotter.snapshot(reason="timer"):
            await asyncio.sleep(0.2)  # paused far longer than it ran since the last one
    warned = [e for e in back_to_back if e["event"] == warning]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning"
    assert warned[0]["paused_seconds"] >= warned[0]["running_seconds"]
    clock.offset += 1000.0  # the environment ran for a long time
    with capture_logs() as after_a_run:
        await snapshotter.take(reason="timer")
    assert not [e for e in after_a_run if e["event"] == warning]


async def test_without_environment_state_a_snapshot_still_saves_the_trainer_state(
    tmp_path: Path,
) -> None:
    """With NoEnvironmentCheckpoint the data plane and ledger are still saved and published."""
    async with dispatched_r1(tmp_path / "live.sqlite") as (barrier, plane, ledger):
        async with barrier.mutation() as cut:
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


def snapshotter_over(rig: Rig, wrap: Callable[[LocalInstance], Any]) -> RolloutSnapshotter:
    """A snapshotter of the rig's trainer state over its Gym instances, each client wrapped."""
    facade = GymEnvironmentCheckpoint(
        [
            wrap(
                LocalInstance(GymCheckpointAdapter(instance=instance, coordination=gym.coordinator))
            )
            for instance, gym in zip(rig.instances, rig.gyms.values(), strict=True)
        ],
        rig.ledger,
    )
    return RolloutSnapshotter(
        rig.snapshot_root,
        env_checkpoint=facade,
        barrier=rig.barrier,
        ledger=rig.ledger,
        data_plane=rig.plane,
    )


async def test_a_snapshot_cancelled_while_resuming_leaves_the_environment_running(
    rig: Rig,
) -> None:
    """Cancelling a snapshot during its resume (as RolloutJob.run does at its end) resumes Gym."""
    started = asyncio.Event()
    snapshotter = snapshotter_over(rig, lambda inner: SlowResume(inner, started))

    async def snapshot_and_leave() -> None:
        async with snapshotter.snapshot():
            pass

    taking = asyncio.create_task(snapshot_and_leave())
    await started.wait()
    taking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await taking
    assert rig.layout.newest() is not None  # it was published before the cancel
    assert rig.phases() == {"idle"}
    await snapshotter.take()


async def test_take_cancelled_while_resuming_early_resumes_and_is_whole_or_absent(
    rig: Rig,
) -> None:
    """take() resumes while it writes the trainer's state: cancelled meanwhile, it waits for
    the resume, leaves no temporary directory, and Gym runs."""
    started = asyncio.Event()
    snapshotter = snapshotter_over(rig, lambda inner: SlowResume(inner, started))
    taking = asyncio.create_task(snapshotter.take())
    await started.wait()
    taking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await taking
    assert rig.phases() == {"idle"}
    assert list(rig.layout.temporary.iterdir()) == []
    for published in rig.layout.published():
        verify_snapshot(published)
    await snapshotter.take()


@pytest.mark.parametrize("early", [True, False], ids=["take", "snapshot"])
async def test_take_resumes_the_environment_while_the_trainer_state_is_written(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, early: bool
) -> None:
    """take() resumes Gym once the capture is checked under the cut, so the trainer's own
    writing is out of the pause; snapshot() keeps Gym paused through its block."""
    seen: list[set[str]] = []
    real_copy = rig.plane.snapshot_to

    async def slow_copy(cut: MutationCut, path: Path) -> int:
        await asyncio.sleep(0.3)  # the resume runs meanwhile
        return await real_copy(cut, path)

    def sidecar(cut: MutationCut) -> bytes:
        cut.require_live()  # still under the cut, whatever the environment does
        seen.append(rig.phases())
        return b"{}"

    monkeypatch.setattr(rig.plane, "snapshot_to", slow_copy)
    rig.snapshotter.sidecars["probe"] = sidecar
    if early:
        result = await rig.snapshotter.take()
    else:
        async with rig.snapshotter.snapshot() as result:
            pass
    metrics = result.metrics
    paused = metrics["snapshot_paused_seconds"]
    if early:
        assert seen == [{"idle"}]
        assert paused < metrics["snapshot_env_seconds"] + metrics["snapshot_cut_seconds"]
    else:
        assert seen == [{"committed"}]
        assert paused >= metrics["snapshot_env_seconds"] + metrics["snapshot_cut_seconds"]
    verify_snapshot(result.path)
    assert rig.phases() == {"idle"} and rig.snapshotter.dispatch.is_open


async def test_a_temporary_directory_that_cannot_be_made_is_a_logged_failure(rig: Rig) -> None:
    """Even the first step failing (.tmp is a file) is one snapshot_failed event, counted."""
    rig.layout.temporary.parent.mkdir(parents=True, exist_ok=True)
    rig.layout.temporary.write_text("not a directory")
    with capture_logs() as logs, pytest.raises(OSError):
        await rig.snapshotter.take()
    failed = [e for e in logs if e["event"] == "snapshot_failed"]
    assert len(failed) == 1 and failed[0]["phase"] == "begin"
    assert "FileExistsError" in failed[0]["reason"] or "NotADirectoryError" in failed[0]["reason"]
    assert rig.snapshotter.consecutive_failures == rig.snapshotter.failures_total == 1
    assert rig.snapshotter.dispatch.is_open and rig.phases() == {"idle"}


async def test_a_snapshot_cancelled_while_publishing_is_whole_or_absent(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancellation during the rename waits for it: the snapshot is published whole."""
    renaming = asyncio.Event()
    loop = asyncio.get_running_loop()
    real_publish = rig.snapshotter.layout.publish

    def slow_publish(temporary: Path, manifest: Any) -> Path:
        loop.call_soon_threadsafe(renaming.set)
        time.sleep(0.2)
        return real_publish(temporary, manifest)

    monkeypatch.setattr(rig.snapshotter.layout, "publish", slow_publish)
    taking = asyncio.create_task(rig.snapshotter.take())
    await renaming.wait()
    taking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await taking
    published = rig.layout.published()
    assert len(published) == 1
    verify_snapshot(published[0])
    assert rig.snapshotter.failures_total == 0  # published: not a failed snapshot
    assert list(rig.layout.temporary.iterdir()) == []
    assert rig.phases() == {"idle"} and rig.snapshotter.dispatch.is_open


async def test_take_returns_a_published_snapshot_whose_resume_failed(rig: Rig) -> None:
    """Resume failing after publish leaves the snapshot, records the error, counts no failure."""

    class NoResume(SlowResume):
        async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> None:
            raise GymCheckpointUnavailable("resume lost", operation="resume")

    snapshotter = snapshotter_over(rig, lambda inner: NoResume(inner, asyncio.Event()))
    result = await snapshotter.take()
    assert "resume lost" in result.resume_error
    verify_snapshot(result.path)
    assert snapshotter.failures_total == 0 and snapshotter.history == [result]


async def test_snapshots_record_the_trainers_step_and_ids_sort_by_it(rig: Rig) -> None:
    """set_step and take(step=...) land in MANIFEST.json and in the result; ids sort by step."""
    rig.snapshotter.set_step(9, policy_version="policy-9")
    first = await rig.snapshotter.take()
    second = await rig.snapshotter.take(step=10)
    third = await rig.snapshotter.take(step=100, policy_version="policy-100")
    manifests = [verify_snapshot(r.path) for r in (first, second, third)]
    assert [(m.step, m.policy_version) for m in manifests] == [
        (9, "policy-9"),
        (10, "policy-9"),
        (100, "policy-100"),
    ]
    assert [(r.step, r.policy_version) for r in (first, second)] == [
        (9, "policy-9"),
        (10, "policy-9"),
    ]
    assert first.checkpoint_id.startswith("rollouts-step0000000009-")
    ids = [r.checkpoint_id for r in (third, first, second)]
    assert sorted(ids) == [first.checkpoint_id, second.checkpoint_id, third.checkpoint_id]
    assert rig.snapshotter.step == 9, "a step given to one call does not stick"


async def test_a_bad_step_is_refused_before_anything_is_written(rig: Rig) -> None:
    """A negative step raises ValueError at the call; no snapshot directory appears."""
    with pytest.raises(ValueError, match="step"):
        rig.snapshotter.set_step(-1)
    with pytest.raises(ValueError, match="step"):
        await rig.snapshotter.take(step=-5)
    assert rig.layout.published() == [] and rig.snapshotter.failures_total == 0


QUIET_SNAPSHOT = """
import asyncio, sys
from pathlib import Path
from helpers.snapshot_rig import Rig, mid_flight, running

async def main(directory):
    rig = Rig(Path(directory)).fresh()
    async with running(rig.job(rig.tasks(4))):
        await mid_flight(rig)
        await rig.snapshotter.take()
    await rig.crash()
    restored = await Rig(Path(directory)).restore()
    assert restored.path is not None

asyncio.run(main(sys.argv[1]))
"""


def test_a_host_that_configures_no_logging_sees_nothing(tmp_path: Path) -> None:
    """Snapshot and restore inside a program that never configured logging print nothing."""
    import os
    import subprocess
    import sys

    tests = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", QUIET_SNAPSHOT, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")
