"""Edges of envckpt.trainer.candidate the mutation campaign found untested.

Where each refusal points (the file it names in ``path``), how many problems a
refusal over many rollouts lists, and the hashing progress a caller asks for.
The snapshot here holds seven rollouts, all running on one instance.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint
from envckpt.facade.manifest import GymSnapshotManifest, InstanceRecord, write_manifest
from envckpt.participant import store
from envckpt.trainer.barrier import Cut, SectionKind
from envckpt.trainer.candidate import check_candidate
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.layout import DATA_PLANE_NAME, LEDGER_NAME, SIDECAR_DIR
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.results import RESULTS_SIDECAR, ResultStore, read_results_sidecar
from envckpt.trainer.snapshot_manifest import build_snapshot_manifest, write_snapshot_manifest

CHECKPOINT_ID = "rollouts-1"
INSTANCE = "math/replica-0"
ROLLOUTS = tuple(f"r{i}" for i in range(7))


async def snapshot(
    root: Path, *, in_ledger: bool = True, with_rows: bool = True, with_results: bool = True
) -> Path:
    """A published snapshot of ``ROLLOUTS`` held on one instance, each with row ``k-<id>``.

    ``in_ledger=False``: the ledger knows none of them (the Gym manifest still
    continues them); ``with_rows=False``: the data plane holds none of their rows.
    """
    path = root / "snapshots" / CHECKPOINT_ID
    path.mkdir(parents=True)
    cut = Cut(SectionKind.MUTATION)
    ledger = RecoveryLedger()
    for rollout_id in ROLLOUTS if in_ledger else ():
        ledger.reserve(cut, rollout_id, INSTANCE)
        ledger.dispatch(cut, rollout_id)
        ledger.add_staging_keys(cut, rollout_id, [f"k-{rollout_id}"])
    ledger.save(path / LEDGER_NAME)
    with SqliteDataPlane(root / "writer.sqlite") as plane:
        for rollout_id in ROLLOUTS if with_rows else ():
            plane.put(cut, f"k-{rollout_id}", rollout_id, b"tokens")
        await plane.snapshot_to(cut, path / DATA_PLANE_NAME)
    if with_results:
        (path / SIDECAR_DIR).mkdir()
        (path / SIDECAR_DIR / RESULTS_SIDECAR).write_bytes(ResultStore().to_bytes(cut))
    episodes = tuple(EnvironmentEpisode(rollout_id, 0) for rollout_id in ROLLOUTS)
    store.write_checkpoint(
        path / "gym-instances" / INSTANCE,
        kind="agent",
        instance="agent",
        checkpoint_id=CHECKPOINT_ID,
        records=[store.to_record(episode, {"turns": []}) for episode in episodes],
    )
    record = InstanceRecord(
        episodes=episodes,
        staging_keys=tuple(f"k-{rollout_id}" for rollout_id in ROLLOUTS),
        participants=("agent",),
    )
    write_manifest(path, GymSnapshotManifest(CHECKPOINT_ID, {INSTANCE: record}))
    manifest = build_snapshot_manifest(
        path, checkpoint_id=CHECKPOINT_ID, created_at=1_800_000_000.0, metrics={}
    )
    write_snapshot_manifest(path, manifest)
    return path


def refusal(path: Path, live: Path) -> CorruptCheckpoint:
    with pytest.raises(CorruptCheckpoint) as caught:
        check_candidate(
            path, data_plane_path=live, sidecar_readers={RESULTS_SIDECAR: read_results_sidecar}
        )
    return caught.value


@pytest.fixture
def live(tmp_path: Path) -> Path:
    (tmp_path / "run").mkdir()
    return tmp_path / "run" / "dataplane.sqlite"


async def test_a_missing_sidecar_is_refused_pointing_at_where_it_should_be(
    tmp_path: Path, live: Path
) -> None:
    """The refusal's path is the sidecar the reader expected."""
    path = await snapshot(tmp_path, with_results=False)
    error = refusal(path, live)
    assert error.path == str(path / SIDECAR_DIR / RESULTS_SIDECAR)


async def test_a_gym_manifest_continuing_many_unknown_rollouts_lists_five(
    tmp_path: Path, live: Path
) -> None:
    """Seven rollouts unknown to the ledger: the refusal lists the first five, sorted."""
    path = await snapshot(tmp_path, in_ledger=False)
    error = refusal(path, live)
    listed = [f"{rollout_id}: unknown to the ledger" for rollout_id in ROLLOUTS[:5]]
    assert error.message == f"the Gym manifest continues rollouts the ledger cannot: {listed}"


async def test_a_data_plane_lacking_many_kept_rows_names_five_and_points_at_it(
    tmp_path: Path, live: Path
) -> None:
    """Seven kept rows missing: the count, the first five keys sorted, the data plane's path."""
    path = await snapshot(tmp_path, with_rows=False)
    error = refusal(path, live)
    keys = [f"k-{rollout_id}" for rollout_id in ROLLOUTS[:5]]
    assert error.message == (f"the data plane lacks 7 staging rows the Gym manifest keeps: {keys}")
    assert error.path == str(path / DATA_PLANE_NAME)


async def test_the_hashing_progress_reaches_the_caller(tmp_path: Path, live: Path) -> None:
    """``on_bytes`` hears every byte of the files the snapshot manifest lists."""
    path = await snapshot(tmp_path)
    heard: list[int] = []
    checked = check_candidate(path, data_plane_path=live, on_bytes=heard.append)
    checked.discard()
    listed = sum((path / name).stat().st_size for name in checked.manifest.files)
    assert heard and sum(heard) == listed
