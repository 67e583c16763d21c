"""Tests for envckpt.fsutil: durable small-file writes (temp, fsync, rename, directory fsync)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envckpt import fsutil
from envckpt.fsutil import atomic_write_bytes, fsync_dir


def test_write_creates_parents_and_the_file(tmp_path: Path) -> None:
    """A new file appears under directories created for it, and nothing else is left."""
    target = tmp_path / "a" / "b" / "doc.json"
    atomic_write_bytes(target, b"first")
    assert target.read_bytes() == b"first"
    assert [p.name for p in target.parent.iterdir()] == ["doc.json"]


def test_write_replaces_an_existing_file(tmp_path: Path) -> None:
    """A second write replaces the content whole; no temp file stays behind."""
    target = tmp_path / "doc.json"
    atomic_write_bytes(target, b"old content, longer")
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path: Path) -> None:
    """Data that cannot be written leaves the old file as it was and no temp file."""
    target = tmp_path / "doc.json"
    atomic_write_bytes(target, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]


def test_a_failed_rename_removes_the_temp(tmp_path: Path) -> None:
    """A target that cannot be replaced (a non-empty directory) is refused; nothing is left."""
    target = tmp_path / "doc.json"
    target.mkdir()
    (target / "inside").write_bytes(b"x")
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]
    assert (target / "inside").read_bytes() == b"x"


def test_the_data_and_then_the_directory_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temp file is fsynced before the rename and the directory after it."""
    target = tmp_path / "doc.json"
    synced: list[tuple[str, bool]] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        # What the fd names, and whether the target already exists at that moment.
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), target.exists()))
        real_fsync(fd)

    monkeypatch.setattr(fsutil.os, "fsync", recording_fsync)
    atomic_write_bytes(target, b"data")
    assert len(synced) == 2
    (file_name, renamed_before_file_sync), (dir_name, renamed_before_dir_sync) = synced
    assert Path(file_name).parent == tmp_path and Path(file_name).name.endswith(".tmp")
    assert not renamed_before_file_sync
    assert Path(dir_name) == tmp_path and renamed_before_dir_sync


def test_fsync_dir_syncs_an_existing_directory(tmp_path: Path) -> None:
    """A directory syncs without error."""
    fsync_dir(tmp_path)


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_fsync_dir_raises_unless_best_effort(tmp_path: Path, kind: str) -> None:
    """A missing path or a plain file raises OSError; best_effort ignores it."""
    path = tmp_path / "missing"
    if kind == "file":
        path = tmp_path / "plain"
        path.write_bytes(b"x")
    with pytest.raises(OSError):
        fsync_dir(path)
    fsync_dir(path, best_effort=True)
