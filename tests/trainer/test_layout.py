"""Tests for envckpt.trainer.layout: publish, LATEST, retention and the top-level manifest."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from envckpt.errors import CorruptCheckpoint
from envckpt.trainer.layout import (
    LATEST_NAME,
    MANIFEST_KIND,
    MANIFEST_NAME,
    SCHEMA_VERSION,
    SnapshotLayout,
    build_snapshot_manifest,
    verify_snapshot,
)

RECORDS = "gym-instances/shard/replica-0/gym/agent/simple_agent/records-0123abcd.jsonl"
FILES: dict[str, bytes] = {
    "gym_checkpoint.json": b'{"kind": "envckpt.gym_checkpoint"}',
    "dataplane.sqlite": bytes(range(256)) * 8,
    "ledger.json": b'{"kind": "envckpt.ledger", "entries": []}\n',
    RECORDS: b'{"capture_key": "r1", "state": {"turn": 3}}\n',
    "gym-instances/shard/replica-0/gym/agent/simple_agent/manifest.json": b'{"record_count": 1}',
    "sidecars/results.json": b'{"results": {}}',
    # Only the top-level MANIFEST.json is left out of the digest list.
    "sidecars/MANIFEST.json": b"a sidecar that happens to share the name",
}


def fill(directory: Path, files: dict[str, bytes] = FILES) -> None:
    for name, data in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def publish(layout: SnapshotLayout, checkpoint_id: str, created_at: float) -> Path:
    temporary = layout.new_temporary(checkpoint_id)
    fill(temporary)
    manifest = build_snapshot_manifest(
        temporary,
        checkpoint_id=checkpoint_id,
        created_at=created_at,
        metrics={"snapshot_bytes": 42.0},
    )
    return layout.publish(temporary, manifest)


def rewrite_manifest(directory: Path, **changes: object) -> None:
    path = directory / MANIFEST_NAME
    document = json.loads(path.read_bytes())
    document.update(changes)
    path.write_text(json.dumps(document))


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20
    path.write_bytes(bytes(data))


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
    assert (layout.root / LATEST_NAME).read_text() == "ck-1"
    document = json.loads((final / MANIFEST_NAME).read_bytes())
    assert document == {
        "schema_version": SCHEMA_VERSION,
        "kind": MANIFEST_KIND,
        "checkpoint_id": "ck-1",
        "created_at": 100.0,
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for name, data in sorted(FILES.items())
        },
        "metrics": {"snapshot_bytes": 42.0},
    }


def test_a_failed_rename_publishes_nothing_and_keeps_latest(
    layout: SnapshotLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the rename fails the snapshot stays unpublished debris and LATEST is unchanged."""
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
    assert layout.latest() == "ck-1"
    assert layout.clean_debris() == 1
    assert not temporary.exists()


def test_latest_names_the_newest_published_snapshot(layout: SnapshotLayout) -> None:
    """LATEST is absent before the first publish and then names the last one published."""
    assert layout.latest() is None
    publish(layout, "ck-1", 1.0)
    assert layout.latest() == "ck-1"
    publish(layout, "ck-2", 2.0)
    assert layout.latest() == "ck-2"
    (layout.root / LATEST_NAME).write_text("")
    assert layout.latest() is None


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
    assert [path.name for path in layout.published()] == [
        "no-manifest",
        "y",
        "x",
        "b",
        "a",
        "garbage",
        "c",
    ]


def test_prune_keeps_the_newest_k(layout: SnapshotLayout) -> None:
    """prune deletes all but the newest K and returns what it deleted; K < 1 keeps one."""
    for index in range(4):
        publish(layout, f"ck-{index}", float(index))
    assert layout.prune(2) == ["ck-1", "ck-0"]
    assert [path.name for path in layout.published()] == ["ck-3", "ck-2"]
    assert layout.prune(5) == []
    assert layout.prune(0) == ["ck-2"]
    assert [path.name for path in layout.published()] == ["ck-3"]
    assert layout.latest() == "ck-3"


def test_clean_debris_removes_every_unpublished_leftover(layout: SnapshotLayout) -> None:
    """Everything under .tmp goes (directories and stray files); published snapshots stay."""
    assert layout.clean_debris() == 0
    publish(layout, "ck-1", 1.0)
    for name in ("ck-2", "ck-3"):
        fill(layout.new_temporary(name))
    (layout.temporary / ".ledger.json.tmp-1234").write_bytes(b"half a file")
    assert layout.clean_debris() == 3
    assert list(layout.temporary.iterdir()) == []
    assert [path.name for path in layout.published()] == ["ck-1"]
    verify_snapshot(layout.snapshots / "ck-1")


def test_new_temporary_refuses_unsafe_or_reused_ids(layout: SnapshotLayout) -> None:
    """A checkpoint id must be one safe path component and not already in use."""
    for bad in ("../escape", "", "a/b", ".hidden"):
        with pytest.raises(ValueError):
            layout.new_temporary(bad)
    layout.new_temporary("ck-1")
    with pytest.raises(FileExistsError):
        layout.new_temporary("ck-1")


def test_verify_returns_the_published_manifest(layout: SnapshotLayout) -> None:
    """An untouched snapshot verifies and yields its identity, time, digests and metrics."""
    final = publish(layout, "ck-1", 12.5)
    manifest = verify_snapshot(final)
    assert manifest.checkpoint_id == "ck-1" and manifest.created_at == 12.5
    assert manifest.metrics == {"snapshot_bytes": 42.0}
    assert set(manifest.files) == set(FILES)
    assert manifest.files[RECORDS] == (
        hashlib.sha256(FILES[RECORDS]).hexdigest(),
        len(FILES[RECORDS]),
    )


def _move(final: Path) -> Path:
    other = final.with_name("ck-other")
    final.rename(other)
    return other


Damage = Callable[[Path], object]
REFUSALS: dict[str, tuple[Damage, str]] = {
    "no-manifest": (lambda d: (d / MANIFEST_NAME).unlink(), "unpublished"),
    "unreadable-manifest": (
        lambda d: (d / MANIFEST_NAME).write_text("{truncated"),
        "unreadable",
    ),
    "foreign-kind": (lambda d: rewrite_manifest(d, kind="someone.else"), "foreign"),
    "other-schema": (lambda d: rewrite_manifest(d, schema_version=2), "schema_version"),
    "names-another-directory": (lambda d: rewrite_manifest(d, checkpoint_id="ck-9"), "ck-9"),
    "moved-directory": (_move, "directory is ck-other"),
    "no-file-list": (lambda d: rewrite_manifest(d, files=None), "invalid"),
    "ledger-byte": (lambda d: flip_byte(d / "ledger.json"), "ledger.json"),
    "dataplane-byte": (lambda d: flip_byte(d / "dataplane.sqlite"), "dataplane.sqlite"),
    "records-byte": (lambda d: flip_byte(d / RECORDS), "records-0123abcd"),
    "nested-manifest-byte": (lambda d: flip_byte(d / "sidecars" / MANIFEST_NAME), "sidecars"),
    "missing-file": (lambda d: (d / RECORDS).unlink(), "missing=['gym-instances"),
    "extra-file": (lambda d: (d / "sidecars" / "extra.bin").write_bytes(b"x"), "unlisted="),
    "same-size-rewrite": (
        lambda d: (d / "ledger.json").write_bytes(b"x" * len(FILES["ledger.json"])),
        "checksum mismatch",
    ),
}


@pytest.mark.parametrize("damage", sorted(REFUSALS))
def test_verify_refuses_any_damage(layout: SnapshotLayout, damage: str) -> None:
    """A snapshot must look exactly as published, else CorruptCheckpoint."""
    final = publish(layout, "ck-1", 1.0)
    change, reason = REFUSALS[damage]
    moved = change(final)
    with pytest.raises(CorruptCheckpoint, match=reason.replace("[", r"\[")):
        verify_snapshot(moved if isinstance(moved, Path) else final)
