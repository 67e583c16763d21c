"""Tests for envckpt.trainer.layout: publish, listing, prune through the trash, quarantine."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from envckpt import crashpoints
from envckpt.crashpoints import SimulatedCrash
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.snapshot_manifest import (
    MANIFEST_KIND,
    MANIFEST_NAME,
    SCHEMA_VERSION,
    build_snapshot_manifest,
    verify_snapshot,
)

from helpers.snapshot_files import FILES, fill, publish


@pytest.fixture
def layout(tmp_path: Path) -> SnapshotLayout:
    return SnapshotLayout(tmp_path / "root")


def test_publish_writes_the_manifest_then_renames_the_directory_into_place(
    layout: SnapshotLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the rename the temporary directory already verifies; the same directory is moved."""
    temporary = layout.new_temporary("ck-1")
    fill(temporary)
    inode = temporary.stat().st_ino
    manifest = build_snapshot_manifest(
        temporary, checkpoint_id="ck-1", created_at=100.0, metrics={"snapshot_bytes": 42.0}
    )
    assert not (temporary / MANIFEST_NAME).exists()
    renames: list[tuple[Path, Path]] = []
    real_rename = os.rename

    def spy(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        source, target = Path(source), Path(target)
        assert verify_snapshot(source) == manifest
        assert not target.exists()
        renames.append((source, target))
        real_rename(source, target)

    monkeypatch.setattr(os, "rename", spy)
    final = layout.publish(temporary, manifest)
    assert renames == [(temporary, layout.snapshots / "ck-1")]
    assert final == layout.snapshots / "ck-1"
    assert final.stat().st_ino == inode
    assert not temporary.exists()
    document = json.loads((final / MANIFEST_NAME).read_bytes())
    assert document["kind"] == MANIFEST_KIND and document["schema_version"] == SCHEMA_VERSION
    assert document["checkpoint_id"] == "ck-1" and document["created_at"] == 100.0


def test_no_latest_pointer_is_written(layout: SnapshotLayout) -> None:
    """The newest snapshot comes from listing verified manifests; no LATEST file goes stale."""
    assert layout.newest() is None
    publish(layout, "ck-1", 1.0)
    publish(layout, "ck-2", 2.0)
    assert layout.newest() == "ck-2"
    assert not (layout.root / "LATEST").exists()


def test_a_failed_rename_publishes_nothing(
    layout: SnapshotLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the rename fails the snapshot stays unpublished debris; the newest is unchanged."""
    publish(layout, "ck-1", 1.0)
    temporary = layout.new_temporary("ck-2")
    fill(temporary)
    manifest = build_snapshot_manifest(temporary, checkpoint_id="ck-2", created_at=2.0, metrics={})

    def refuse(source: object, target: object) -> None:
        raise OSError("EXDEV")

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(OSError, match="EXDEV"):
        layout.publish(temporary, manifest)
    monkeypatch.undo()
    assert [path.name for path in layout.published()] == ["ck-1"]
    assert layout.newest() == "ck-1"
    assert layout.clean_debris() == 1
    assert not temporary.exists()


def test_published_lists_newest_first_by_manifest_time_then_name(layout: SnapshotLayout) -> None:
    """Order is by created_at, ties by name; a directory without a valid manifest by its mtime."""
    assert layout.published() == []
    for checkpoint_id, created_at in (("b", 30.0), ("c", 10.0), ("a", 20.0), ("x", 40.0)):
        publish(layout, checkpoint_id, created_at)
    publish(layout, "y", 40.0)
    (layout.snapshots / "no-manifest").mkdir()
    (layout.snapshots / "garbage").mkdir()
    (layout.snapshots / "garbage" / MANIFEST_NAME).write_text("{not json")
    os.utime(layout.snapshots / "no-manifest", (50.0, 50.0))
    os.utime(layout.snapshots / "garbage", (15.0, 15.0))
    (layout.snapshots / ".probe-left-behind").mkdir()
    assert [path.name for path in layout.published()] == [
        "no-manifest",
        "y",
        "x",
        "b",
        "a",
        "garbage",
        "c",
    ]


def test_an_edited_created_at_does_not_reorder_the_candidates(layout: SnapshotLayout) -> None:
    """A manifest whose created_at was edited fails its own checksum: ordered by mtime, refused."""
    publish(layout, "ck-old", 1.0)
    newer = publish(layout, "ck-new", 2.0)
    path = layout.snapshots / "ck-old" / MANIFEST_NAME
    path.write_text(path.read_text().replace('"created_at": 1.0', '"created_at": 9.0'))
    os.utime(layout.snapshots / "ck-old", (0.5, 0.5))
    assert [p.name for p in layout.published()] == ["ck-new", "ck-old"]
    verify_snapshot(newer)


def test_prune_keeps_the_newest_k(layout: SnapshotLayout) -> None:
    """prune removes all but the newest K and returns them; K < 1 keeps one; the trash empties."""
    for index in range(4):
        publish(layout, f"ck-{index}", float(index))
    assert layout.prune(2) == ["ck-1", "ck-0"]
    assert [path.name for path in layout.published()] == ["ck-3", "ck-2"]
    assert layout.prune(5) == []
    assert layout.prune(0) == ["ck-2"]
    assert [path.name for path in layout.published()] == ["ck-3"]
    assert list(layout.trash.iterdir()) == []


def test_a_crash_mid_prune_never_leaves_half_a_snapshot_among_the_published(
    layout: SnapshotLayout,
) -> None:
    """The pruned snapshot leaves snapshots/ by a rename before any delete; a restart clears it."""
    for index in range(3):
        publish(layout, f"ck-{index}", float(index))
    crashpoints.install(crashpoints.raise_at("prune.in_trash"))
    try:
        with pytest.raises(SimulatedCrash):
            layout.prune(2)
    finally:
        crashpoints.install(None)
    assert [path.name for path in layout.published()] == ["ck-2", "ck-1"]
    for path in layout.published():
        verify_snapshot(path)
    assert [path.name for path in layout.trash.iterdir()] == ["ck-0"]
    assert layout.clean_debris() == 1
    assert list(layout.trash.iterdir()) == []


def test_quarantine_moves_a_refused_snapshot_aside_with_its_reason(layout: SnapshotLayout) -> None:
    """A refused snapshot leaves the published ones (no keep-K slot) and keeps its files."""
    publish(layout, "ck-1", 1.0)
    bad = publish(layout, "ck-2", 2.0)
    moved = layout.quarantine(bad, "ledger.json: checksum mismatch")
    assert [path.name for path in layout.published()] == ["ck-1"]
    assert moved == layout.refused / "ck-2"
    assert (moved / "ledger.json").read_bytes() == FILES["ledger.json"]
    assert (layout.refused / "ck-2.reason.txt").read_text() == "ledger.json: checksum mismatch\n"


def test_clean_debris_removes_every_unpublished_leftover(layout: SnapshotLayout) -> None:
    """Everything under .tmp and .trash goes, and probe leftovers; published snapshots stay."""
    assert layout.clean_debris() == 0
    publish(layout, "ck-1", 1.0)
    for name in ("ck-2", "ck-3"):
        fill(layout.new_temporary(name))
    (layout.temporary / ".ledger.json.tmp-1234").write_bytes(b"half a file")
    layout.trash.mkdir()
    shutil.copytree(layout.snapshots / "ck-1", layout.trash / "ck-0")
    (layout.snapshots / ".probe-abc").mkdir()
    assert layout.clean_debris() == 5
    assert list(layout.temporary.iterdir()) == [] and list(layout.trash.iterdir()) == []
    assert [path.name for path in layout.published()] == ["ck-1"]
    assert [path.name for path in layout.snapshots.iterdir()] == ["ck-1"]
    verify_snapshot(layout.snapshots / "ck-1")


def test_new_temporary_refuses_unsafe_or_reused_ids(layout: SnapshotLayout) -> None:
    """A checkpoint id must be one safe path component and not already in use."""
    for bad in ("../escape", "", "a/b", ".hidden"):
        with pytest.raises(ValueError):
            layout.new_temporary(bad)
    layout.new_temporary("ck-1")
    with pytest.raises(FileExistsError):
        layout.new_temporary("ck-1")


def test_delete_removes_one_snapshot_through_the_trash(layout: SnapshotLayout) -> None:
    """delete(id) renames the snapshot into .trash, then removes it; the others stay."""
    publish(layout, "ck-1", 1.0)
    publish(layout, "ck-2", 2.0)
    layout.delete("ck-1")
    assert [path.name for path in layout.published()] == ["ck-2"]
    assert not (layout.trash / "ck-1").exists()
    with pytest.raises(FileNotFoundError, match="ck-1"):
        layout.delete("ck-1")
    with pytest.raises(ValueError):
        layout.delete("../ck-2")


def test_a_crash_inside_delete_leaves_the_snapshot_out_of_the_published_ones(
    layout: SnapshotLayout,
) -> None:
    """Killed between the rename and the removal, the snapshot is only in .trash."""
    publish(layout, "ck-1", 1.0)
    crashpoints.install(crashpoints.raise_at("prune.in_trash"))
    try:
        with pytest.raises(SimulatedCrash):
            layout.delete("ck-1")
    finally:
        crashpoints.install(None)
    assert layout.published() == [] and (layout.trash / "ck-1").is_dir()
    assert layout.clean_debris() == 1 and not (layout.trash / "ck-1").exists()
