"""Tests for envckpt.trainer.catalog: a snapshot root read by step, newest and id."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envckpt.facade.manifest import MANIFEST_NAME as GYM_MANIFEST
from envckpt.trainer.catalog import EntryStatus, SnapshotCatalog, SnapshotEntry
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.snapshot_manifest import MANIFEST_NAME

from helpers.snapshot_files import flip_byte, publish
from helpers.stepped_root import stepped_root


@pytest.fixture
async def root(tmp_path: Path) -> tuple[Path, list[str]]:
    return await stepped_root(tmp_path)


async def test_all_lists_every_snapshot_oldest_first_with_its_step_and_contents(
    root: tuple[Path, list[str]],
) -> None:
    """Each entry carries id, step, policy version, size, instances and continued episodes."""
    path, ids = root
    entries = SnapshotCatalog(path).all()
    assert [entry.checkpoint_id for entry in entries] == [ids[0], ids[1], ids[2]]
    assert [entry.step for entry in entries] == [10, 20, 30]
    assert [entry.policy_version for entry in entries] == ["v10", "v20", "v30"]
    assert sorted(ids) == ids, "ids sort by step"
    for entry in entries:
        assert entry.status is EntryStatus.OK and entry.usable and entry.problem == ""
        assert set(entry.instances) == {"shard/replica-0", "shard/replica-1"}
        assert entry.episodes >= 2 and entry.restarts == 0
        assert entry.size == sum(size for _, size in entry.manifest.files.values()) > 0
        assert entry.created_at is not None and entry.files == len(entry.manifest.files)
    assert len(SnapshotCatalog(path)) == 3


async def test_latest_get_and_steps_find_the_snapshot_asked_for(
    root: tuple[Path, list[str]],
) -> None:
    """latest() is the newest; get(step) the snapshot of that step; steps() every step once."""
    path, ids = root
    catalog = SnapshotCatalog(path)
    latest = catalog.latest()
    assert latest is not None and latest.checkpoint_id == ids[2]
    assert catalog.get(20).checkpoint_id == ids[1]
    assert catalog.steps() == [10, 20, 30]
    with pytest.raises(KeyError, match="step 25"):
        catalog.get(25)
    assert catalog.entry(ids[0]).step == 10
    for unknown in ("rollouts-nope", "../escape"):
        with pytest.raises(KeyError):
            catalog.entry(unknown)


async def test_a_damaged_newest_snapshot_is_listed_but_never_latest(
    root: tuple[Path, list[str]],
) -> None:
    """A MANIFEST.json that does not read marks the entry damaged; latest() skips it."""
    path, ids = root
    flip_byte(SnapshotLayout(path).snapshots / ids[2] / MANIFEST_NAME)
    catalog = SnapshotCatalog(path)
    damaged = catalog.entry(ids[2])
    assert damaged.status is EntryStatus.DAMAGED and not damaged.usable
    assert damaged.problem.startswith("MANIFEST.json: ") and damaged.step is None
    assert damaged.size > 0, "the size on disk stands in for the manifest's"
    latest = catalog.latest()
    assert latest is not None and latest.checkpoint_id == ids[1]
    with pytest.raises(KeyError):
        catalog.get(30)


async def test_a_damaged_gym_manifest_is_a_damaged_entry(
    root: tuple[Path, list[str]],
) -> None:
    """gym_checkpoint.json that does not read is named as the problem."""
    path, ids = root
    flip_byte(SnapshotLayout(path).snapshots / ids[1] / GYM_MANIFEST)
    entry = SnapshotCatalog(path).entry(ids[1])
    assert entry.status is EntryStatus.DAMAGED and entry.problem.startswith(f"{GYM_MANIFEST}: ")
    assert entry.step == 20, "what MANIFEST.json says still reads"


async def test_refused_snapshots_are_listed_with_their_reason(
    root: tuple[Path, list[str]],
) -> None:
    """A snapshot a restore quarantined leaves the published ones and shows why."""
    path, ids = root
    layout = SnapshotLayout(path)
    layout.quarantine(layout.snapshots / ids[0], "CorruptCheckpoint: ledger damaged")
    catalog = SnapshotCatalog(path)
    assert [entry.checkpoint_id for entry in catalog.all()] == [ids[1], ids[2]]
    [refused] = catalog.refused()
    assert (refused.checkpoint_id, refused.status, refused.step) == (
        ids[0],
        EntryStatus.REFUSED,
        10,
    )
    assert refused.problem == "CorruptCheckpoint: ledger damaged"


def test_an_empty_or_missing_root_has_no_snapshots(tmp_path: Path) -> None:
    """No snapshots/ directory: nothing listed, no latest, nothing refused."""
    catalog = SnapshotCatalog(tmp_path / "nowhere")
    assert catalog.all() == [] and catalog.latest() is None and catalog.refused() == []
    assert catalog.steps() == [] and len(catalog) == 0


async def test_snapshots_without_a_step_sort_by_time(tmp_path: Path) -> None:
    """Snapshots taken without a step list by creation time, step None, ids unnumbered."""
    path, ids = await stepped_root(tmp_path, steps=(None, None))
    catalog = SnapshotCatalog(path)
    entries = catalog.all()
    assert [entry.checkpoint_id for entry in entries] == ids
    assert [(entry.step, entry.policy_version) for entry in entries] == [(None, None)] * 2
    assert all(not name.startswith("rollouts-step") for name in ids)
    latest = catalog.latest()
    assert latest is not None and latest.checkpoint_id == ids[1] and catalog.steps() == []


async def test_a_renamed_snapshot_directory_is_damaged(tmp_path: Path) -> None:
    """A directory whose manifest names another snapshot is listed as damaged, with why."""
    path, ids = await stepped_root(tmp_path, steps=(1,))
    layout = SnapshotLayout(path)
    shutil.move(layout.snapshots / ids[0], layout.snapshots / "renamed-1")
    [entry] = SnapshotCatalog(path).all()
    assert entry.status is EntryStatus.DAMAGED and "directory is renamed-1" in entry.problem


def test_foreign_entries_are_named_and_never_listed_as_snapshots(tmp_path: Path) -> None:
    """A stray file, a link to a snapshot and a directory without a manifest: foreign()
    names them (the directory also lists, damaged); entry() never resolves through a link."""
    layout = SnapshotLayout(tmp_path / "root")
    real = publish(layout, "ck-1", 1.0)
    (layout.snapshots / "notes.txt").write_text("x")
    (layout.snapshots / "ck-link").symlink_to(real)
    (layout.snapshots / "ck-empty").mkdir()
    catalog = SnapshotCatalog(layout.root)
    assert sorted(entry.path.name for entry in catalog.foreign()) == [
        "ck-empty",
        "ck-link",
        "notes.txt",
    ]
    assert sorted(entry.checkpoint_id for entry in catalog.all()) == ["ck-1", "ck-empty"]
    with pytest.raises(KeyError):
        catalog.entry("ck-link")
    assert catalog.entry("ck-1").checkpoint_id == "ck-1"


def test_a_status_given_as_text_is_held_as_its_named_value(tmp_path: Path) -> None:
    """ "ok" built by hand is EntryStatus.OK (so usable); an unknown status is a ValueError."""
    entry = SnapshotEntry("rollouts-1", tmp_path, "ok")  # type: ignore[arg-type]
    assert entry.status is EntryStatus.OK and entry.usable
    with pytest.raises(ValueError, match="bogus"):
        SnapshotEntry("rollouts-1", tmp_path, "bogus")  # type: ignore[arg-type]
