"""Tests for envckpt.trainer.restorer: startup restore from the newest usable snapshot.

A module fixture runs one incarnation of the job with rollouts mid-flight,
takes two snapshots (``older``, then ``newer``, which also holds an orphan
staging row) and crashes it. Each test restores a copy of that directory into
fresh simulated Gym processes. The corruption tests damage one file of the
newest snapshot each, some at the byte level, others at the content level
with every digest recomputed, and the previous snapshot must be used.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envckpt import crashpoints
from envckpt.errors import IncompatibleCheckpoint
from envckpt.facade.manifest import MANIFEST_NAME as GYM_MANIFEST
from envckpt.facade.manifest import GymSnapshotManifest, read_manifest
from envckpt.interfaces import NoEnvironmentCheckpoint
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.job_errors import (
    AllSnapshotsRefused,
    JobExit,
    RestoreFailed,
    SnapshotRefusedByEnvironment,
    SnapshotRootLocked,
    exit_code_for,
)
from envckpt.trainer.ledger import LedgerStatus
from envckpt.trainer.restorer import Considered, Outcome, Restorer, RestoreReport
from envckpt.trainer.results import RESULTS_SIDECAR
from envckpt.trainer.snapshot_manifest import MANIFEST_NAME, verify_snapshot
from envckpt.trainer.snapshotter import DATA_PLANE_NAME, LEDGER_NAME, SIDECAR_DIR

from helpers.root_holder import held_by_another_process
from helpers.snapshot_corruption import CONTENT_CORRUPTIONS, ENVIRONMENT_REFUSED, records_file
from helpers.snapshot_rig import TURNS, Rig, mid_flight, running, wait_until
from helpers.tree_state import tree_state

ORPHAN = "orphan/t0"


@dataclass(frozen=True)
class Saved:
    """One published snapshot of the template run and the turns each rollout held then."""

    checkpoint_id: str
    held: dict[str, int]
    manifest: GymSnapshotManifest


@dataclass(frozen=True)
class Template:
    root: Path
    older: Saved
    newer: Saved


async def _snapshot(rig: Rig) -> Saved:
    async with rig.snapshotter.snapshot() as result:
        held = rig.turns_held()  # paused: exactly the turns the snapshot holds
    return Saved(result.checkpoint_id, held, read_manifest(result.path))


async def _crashed_run(root: Path) -> Template:
    rig = Rig(root).fresh()
    async with running(rig.job(rig.tasks(4))):
        await mid_flight(rig)
        older = await _snapshot(rig)
        async with rig.barrier.mutation() as cut:
            rig.plane.put(cut, ORPHAN, "orphan", b"a row no rollout references")
        await wait_until(
            lambda: all(rig.turns_held().get(k, TURNS) > n for k, n in older.held.items())
        )
        newer = await _snapshot(rig)
    await rig.crash()
    return Template(root, older, newer)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return asyncio.run(_crashed_run(tmp_path_factory.mktemp("template")))


@pytest.fixture
def run_dir(template: Template, tmp_path: Path) -> Path:
    """A private copy of the crashed run's files."""
    target = tmp_path / "run"
    shutil.copytree(template.root, target)
    return target


def snapshot_dir(root: Path, saved: Saved) -> Path:
    return root / "snap" / "snapshots" / saved.checkpoint_id


async def restore(root: Path) -> tuple[Rig, RestoreReport]:
    """Fresh Gym processes restore ``root``; the rig is attached to what was restored."""
    rig = Rig(root)
    return rig, await rig.restore()


def continued_from(manifest: GymSnapshotManifest) -> set[tuple[str, str, int]]:
    """The triples a restore of ``manifest`` must continue: each saved attempt + 1."""
    return {
        (instance_id, episode.rollout_id, episode.attempt + 1)
        for instance_id, record in manifest.instances.items()
        for episode in record.episodes
    }


async def test_no_snapshot_means_a_fresh_start_with_an_empty_ledger(tmp_path: Path) -> None:
    """Without a published snapshot the job starts fresh and the environment is not contacted."""
    restorer = Restorer(
        tmp_path / "snap", env_checkpoint=NoEnvironmentCheckpoint(), barrier=DataPlaneBarrier()
    )
    report = await restorer.restore(data_plane_path=tmp_path / "live.sqlite")
    with report.data_plane as plane:
        assert report.path is None and report.plan is None and report.manifest is None
        assert report.refused == [] and report.cleared_rows == 0
        assert len(report.ledger) == 0
        assert plane.keys() == frozenset()
        assert plane.path == tmp_path / "live.sqlite"


async def test_restore_continues_exactly_the_saved_rollouts_as_the_next_attempt(
    template: Template, run_dir: Path
) -> None:
    """Saved in-flight rollouts continue as attempt N+1 on their instance, at their saved turn."""
    rig, report = await restore(run_dir)
    newer = template.newer
    assert report.path == snapshot_dir(run_dir, newer)
    assert report.manifest is not None and report.manifest.checkpoint_id == newer.checkpoint_id
    assert report.refused == []
    plan = report.plan
    assert plan is not None
    assert {(e.instance_id, e.rollout_id, e.attempt) for e in plan.continued} == continued_from(
        newer.manifest
    )
    assert {e.rollout_id for e in plan.continued} == set(newer.held)
    assert plan.abandoned == ()
    for entry in plan.continued:
        assert entry.status is LedgerStatus.RESERVED and entry.restored
        assert rig.ledger.entry(entry.rollout_id) == entry
    redispatch = rig.ledger.redispatch_order()
    assert redispatch[: len(plan.continued)] == tuple(
        e for e in rig.ledger.entries() if e in plan.continued
    )
    # Each fresh process holds exactly its own restored rollouts, parked at the saved turn.
    for instance_id, gym in rig.gyms.items():
        mine = {e.episode.capture_key for e in plan.continued if e.instance_id == instance_id}
        assert set(gym.agent.sessions()) == mine
    tasks = {task.rollout_id: task for task in rig.tasks(4)}
    try:
        for entry in plan.continued:
            task = tasks[entry.rollout_id]
            result = await rig.gyms[entry.instance_id].run(entry.episode, task.task)
            assert result["resumed_from_turn"] == newer.held[entry.rollout_id] > 0
            assert result["transcript"] == rig.gyms[entry.instance_id].expected_transcript(
                entry.rollout_id, task.task
            )
            attempts = [turn["attempt"] for turn in result["turns"]]
            saved_turns = newer.held[entry.rollout_id]
            assert attempts == [0] * saved_turns + [1] * (len(attempts) - saved_turns)
    finally:
        rig.plane.close()


async def test_orphan_staging_rows_are_cleared_and_restored_keys_kept(
    template: Template, run_dir: Path
) -> None:
    """Rows nothing references are deleted at restore; the restored rollouts' rows stay."""
    saved_plane = snapshot_dir(run_dir, template.newer) / DATA_PLANE_NAME
    rig, report = await restore(run_dir)
    try:
        plan = report.plan
        assert plan is not None
        keys = report.data_plane.keys()
        assert ORPHAN not in keys
        assert report.cleared_rows >= 1
        restored_keys = template.newer.manifest.staging_keys()
        assert restored_keys and restored_keys <= keys
        assert keys <= plan.keep_staging_keys
        assert not keys & plan.clear_staging_keys
        # The snapshot itself is never modified by a restore.
        assert verify_snapshot(saved_plane.parent).checkpoint_id == template.newer.checkpoint_id
    finally:
        rig.plane.close()


def _flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    index = len(data) // 2 if offset is None else offset
    data[index] ^= 0x01
    path.write_bytes(bytes(data))


CORRUPTIONS: dict[str, Callable[[Path], object]] = {
    "ledger-byte": lambda s: _flip_byte(s / LEDGER_NAME),
    "dataplane-byte": lambda s: _flip_byte(s / DATA_PLANE_NAME),
    "records-byte": lambda s: _flip_byte(records_file(s)),
    "gym-manifest-byte": lambda s: _flip_byte(s / GYM_MANIFEST),
    "sidecar-byte": lambda s: _flip_byte(s / SIDECAR_DIR / RESULTS_SIDECAR),
    "manifest-deleted": lambda s: (s / MANIFEST_NAME).unlink(),
    "ledger-truncated": lambda s: os.truncate(s / LEDGER_NAME, 40),
    "records-deleted": lambda s: records_file(s).unlink(),
    "extra-file": lambda s: (s / "stray.txt").write_text("left behind"),
}


@pytest.mark.parametrize("corrupt", sorted(CORRUPTIONS))
async def test_a_corrupt_newest_snapshot_is_refused_whole_and_the_previous_one_used(
    template: Template, run_dir: Path, corrupt: str
) -> None:
    """Any damage to the newest snapshot refuses it whole; the older one is restored instead."""
    CORRUPTIONS[corrupt](snapshot_dir(run_dir, template.newer))
    rig, report = await restore(run_dir)
    try:
        assert_older_restored(rig, report, template)
        if corrupt != "manifest-deleted":  # see test_a_snapshot_without_its_manifest_is_reported
            assert [name for name, _ in report.refused] == [template.newer.checkpoint_id]
            assert report.refused[0][1]
    finally:
        rig.plane.close()


async def test_a_snapshot_without_its_manifest_is_reported_as_refused(
    template: Template, run_dir: Path
) -> None:
    """A newest snapshot whose MANIFEST.json was lost shows up in report.refused; without its
    manifest it is not provably envckpt's, so it is left where it is."""
    (snapshot_dir(run_dir, template.newer) / MANIFEST_NAME).unlink()
    rig, report = await restore(run_dir)
    try:
        assert report.path == snapshot_dir(run_dir, template.older)
        assert [name for name, _ in report.refused] == [template.newer.checkpoint_id]
        assert snapshot_dir(run_dir, template.newer).is_dir()
    finally:
        rig.plane.close()


async def test_every_snapshot_refused_refuses_the_start_and_moves_nothing(
    template: Template, run_dir: Path
) -> None:
    """When no snapshot verifies, the start is refused (exit 3) with one line per snapshot and
    why, every snapshot left where it was, the environment never contacted; again next time."""
    for saved in (template.newer, template.older):
        _flip_byte(snapshot_dir(run_dir, saved) / LEDGER_NAME)
    before = tree_state(run_dir / "snap" / "snapshots")
    for _ in range(2):
        rig = Rig(run_dir)
        with pytest.raises(AllSnapshotsRefused) as caught:
            await rig.restore()
        assert all(gym.agent.sessions() == {} for gym in rig.gyms.values())
    error = caught.value
    assert exit_code_for(error) is JobExit.START_REFUSED
    [head, *lines] = str(error).splitlines()
    assert "every snapshot" in head and "--allow-fresh-start" in head
    assert lines == [
        f"  refused {template.newer.checkpoint_id}: {error.refused[0][1]}",
        f"  refused {template.older.checkpoint_id}: {error.refused[1][1]}",
    ]
    assert all("checksum mismatch in ledger.json" in why for _, why in error.refused)
    assert tree_state(run_dir / "snap" / "snapshots") == before


async def test_every_snapshot_refused_starts_fresh_only_when_allowed(
    template: Template, run_dir: Path
) -> None:
    """allow_fresh_start: both are quarantined, the job starts fresh; a later start without it
    is refused again (refused/ holds them, nothing is published), naming them."""
    for saved in (template.newer, template.older):
        _flip_byte(snapshot_dir(run_dir, saved) / LEDGER_NAME)
    rig = Rig(run_dir)
    with capture_logs() as logs:
        report = await rig.restore(allow_fresh_start=True)
    try:
        assert report.path is None and report.plan is None
        assert [name for name, _ in report.refused] == [
            template.newer.checkpoint_id,
            template.older.checkpoint_id,
        ]
        assert len(report.ledger) == 0
        assert all(gym.agent.sessions() == {} for gym in rig.gyms.values())
        assert any("starting from scratch as allowed" in e["event"] for e in logs)
    finally:
        rig.plane.close()
    refused = run_dir / "snap" / "refused"
    assert sorted(p.name for p in refused.iterdir() if p.is_dir()) == sorted(
        [template.newer.checkpoint_id, template.older.checkpoint_id]
    )
    with pytest.raises(AllSnapshotsRefused) as caught:
        await Rig(run_dir).restore()
    assert "refused earlier" in str(caught.value)
    assert {name for name, _ in caught.value.refused} == {
        template.newer.checkpoint_id,
        template.older.checkpoint_id,
    }


async def test_unpublished_leftovers_are_removed(template: Template, run_dir: Path) -> None:
    """Temporary directories a crash left in .tmp are deleted and never considered; a
    directory without envckpt's prefix there is left, reported."""
    debris = run_dir / "snap" / ".tmp" / "envckpt-rollouts-crashed"
    shutil.copytree(snapshot_dir(run_dir, template.newer), debris)
    (debris / MANIFEST_NAME).unlink()
    mine = run_dir / "snap" / ".tmp" / "rollouts-mine"
    shutil.copytree(debris, mine)
    with capture_logs() as logs:
        rig, report = await restore(run_dir)
    try:
        assert [p.name for p in (run_dir / "snap" / ".tmp").iterdir()] == ["rollouts-mine"]
        assert report.path == snapshot_dir(run_dir, template.newer)
        assert report.refused == [] and report.debris_removed == 1
        assert [e["path"] for e in logs if e["event"] == "left a foreign entry"] == [str(mine)]
    finally:
        rig.plane.close()


async def test_a_backend_without_rollout_state_refuses_a_snapshot_that_holds_some(
    template: Template, run_dir: Path
) -> None:
    """Restoring Gym state into NoEnvironmentCheckpoint raises IncompatibleCheckpoint."""
    restorer = Restorer(
        run_dir / "snap", env_checkpoint=NoEnvironmentCheckpoint(), barrier=DataPlaneBarrier()
    )
    with pytest.raises(RestoreFailed) as caught:
        await restorer.restore(data_plane_path=run_dir / "live.sqlite")
    assert isinstance(caught.value.__cause__, IncompatibleCheckpoint)
    assert caught.value.snapshot == template.newer.checkpoint_id
    assert "same instances" in caught.value.action
    # Not the snapshot's fault: it stays published for the right deployment.
    assert snapshot_dir(run_dir, template.newer).is_dir()


def assert_older_restored(rig: Rig, report: RestoreReport, template: Template) -> None:
    """The older snapshot was restored, and nothing of the newer one reached Gym or the rows."""
    older = template.older
    assert report.path is not None and report.path.name == older.checkpoint_id
    plan = report.plan
    assert plan is not None
    assert {(e.instance_id, e.rollout_id, e.attempt) for e in plan.continued} == continued_from(
        older.manifest
    )
    for instance_id, gym in rig.gyms.items():
        turns = {key: len(state["turns"]) for key, state in gym.agent.sessions().items()}
        assert turns == {
            e.episode.capture_key: older.held[e.rollout_id]
            for e in plan.continued
            if e.instance_id == instance_id
        }
    keys = report.data_plane.keys()
    assert ORPHAN not in keys


TRAINER_SIDE = sorted(set(CONTENT_CORRUPTIONS) - ENVIRONMENT_REFUSED)


@pytest.mark.parametrize("corruption", TRAINER_SIDE)
async def test_content_corruption_with_recomputed_digests_falls_back_to_the_previous_snapshot(
    template: Template, run_dir: Path, corruption: str
) -> None:
    """Wrong content that every digest vouches for is refused before Gym hears of it."""
    newer = snapshot_dir(run_dir, template.newer)
    CONTENT_CORRUPTIONS[corruption][1](newer)
    if corruption != "manifest-names-another-snapshot":
        verify_snapshot(newer)  # the digests all agree: only the content is wrong
    rig, report = await restore(run_dir)
    try:
        assert_older_restored(rig, report, template)
        assert report.considered == [
            Considered(template.newer.checkpoint_id, Outcome.REFUSED, report.considered[0].reason),
            Considered(template.older.checkpoint_id, Outcome.CHOSEN),
        ]
        assert report.considered[0].reason
        if corruption == "manifest-names-another-snapshot":
            # Its manifest does not name it: not provably envckpt's, so left where it is.
            assert newer.is_dir()
            return
        # Moved aside: it holds no keep-K slot and is never tried again.
        assert not newer.exists()
        refused = run_dir / "snap" / "refused"
        assert (refused / template.newer.checkpoint_id).is_dir()
        reason = (refused / f"{template.newer.checkpoint_id}.reason.txt").read_text()
        assert reason.strip() == report.considered[0].reason
    finally:
        rig.plane.close()


async def test_records_gym_refuses_are_quarantined_and_the_next_start_uses_the_previous(
    template: Template, run_dir: Path
) -> None:
    """Gym's refusal is abandoned and reported with the next step; the next start lands."""
    newer = snapshot_dir(run_dir, template.newer)
    CONTENT_CORRUPTIONS["records-hold-a-state-gym-refuses"][1](newer)
    verify_snapshot(newer)
    first = Rig(run_dir)
    with pytest.raises(SnapshotRefusedByEnvironment) as caught:
        await first.restore()
    error = caught.value
    assert error.snapshot == template.newer.checkpoint_id
    assert "CorruptCheckpoint" in error.reason and "restart the Gym servers" in error.action
    # Whatever Gym restored was dropped: no session, every participant open again.
    for gym in first.gyms.values():
        assert gym.agent.sessions() == {} and gym.tool.sessions() == {}
        assert {core.phase for core in gym.cores.values()} == {"idle"}
    assert not newer.exists()
    second, report = await restore(run_dir)
    try:
        assert_older_restored(second, report, template)
        assert report.considered == [Considered(template.older.checkpoint_id, Outcome.CHOSEN)]
    finally:
        second.plane.close()


async def test_an_error_inside_the_environment_restore_drops_what_it_restored(
    template: Template, run_dir: Path
) -> None:
    """A failure after Gym restored makes every instance retire the restored attempts."""

    def fail(point: str) -> None:
        if point == "restore.environment_restored":
            raise RuntimeError("the trainer failed mid-restore")

    crashpoints.install(fail)
    rig = Rig(run_dir)
    try:
        with pytest.raises(RestoreFailed) as caught:
            await rig.restore()
    finally:
        crashpoints.install(None)
    assert "the trainer failed mid-restore" in caught.value.reason
    assert "snapshot was kept" in caught.value.action
    assert snapshot_dir(run_dir, template.newer).is_dir()
    for instance_id, record in template.newer.manifest.instances.items():
        gym = rig.gyms[instance_id]
        assert gym.agent.sessions() == {} and gym.model.staging_ledger() == {}
        for episode in record.episodes:
            for core in gym.cores.values():
                assert core.fence.mark(episode.rollout_id) == episode.attempt + 1
        assert {core.phase for core in gym.cores.values()} == {"idle"}


async def test_a_fresh_start_discards_what_a_crashed_run_left_in_the_live_data_plane(
    tmp_path: Path,
) -> None:
    """With no snapshot, rows a dead run wrote to the live file are not carried over."""
    live = tmp_path / "live.sqlite"
    async with DataPlaneBarrier().mutation() as cut:
        with SqliteDataPlane(live) as plane:
            plane.put(cut, "stale/t0", "stale", b"written before a crash")
    restorer = Restorer(
        tmp_path / "snap", env_checkpoint=NoEnvironmentCheckpoint(), barrier=DataPlaneBarrier()
    )
    report = await restorer.restore(data_plane_path=live)
    with report.data_plane as plane:
        assert plane.keys() == frozenset()


async def test_the_root_lock_is_taken_before_debris_is_cleaned(
    template: Template, run_dir: Path
) -> None:
    """A second trainer is refused with the holder named, and the first one's .tmp survives."""
    root = run_dir / "snap"
    in_flight = root / ".tmp" / "rollouts-in-flight"
    in_flight.mkdir(parents=True)
    with held_by_another_process(root) as holder_pid:
        rig = Rig(run_dir)
        with pytest.raises(SnapshotRootLocked) as caught:
            await rig.restore()
    assert caught.value.pid == holder_pid and caught.value.host and caught.value.since
    assert in_flight.is_dir()


def test_an_outcome_given_as_text_is_held_as_its_named_value() -> None:
    """A Considered built with "refused" counts among the report's refused snapshots."""
    considered = Considered("rollouts-2", "refused", "bad")  # type: ignore[arg-type]
    assert considered.outcome is Outcome.REFUSED
    with pytest.raises(ValueError, match="bogus"):
        Considered("rollouts-2", "bogus")  # type: ignore[arg-type]
