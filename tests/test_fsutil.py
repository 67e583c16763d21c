"""Tests for envckpt.fsutil: durable small-file writes (temp, fsync, rename, directory fsync),
and removal walks that never follow a link."""

from __future__ import annotations

import errno
import os
import stat
import sys
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


# ---- walks that never follow a link ------------------------------------------------


def test_open_directory_refuses_a_link_and_a_file(tmp_path: Path) -> None:
    """O_NOFOLLOW: a link to a directory is refused (ELOOP, or ENOTDIR as Linux says with
    O_DIRECTORY); a file is ENOTDIR; a directory opens."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_text("x")
    os.close(fsutil.open_directory(tmp_path / "real"))
    with pytest.raises(OSError) as caught:
        fsutil.open_directory(tmp_path / "link")
    assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)
    with pytest.raises(NotADirectoryError):
        fsutil.open_directory(tmp_path / "file")


def test_entry_mode_is_the_links_own(tmp_path: Path) -> None:
    """entry_mode answers for the link itself, and None for a missing name."""
    (tmp_path / "link").symlink_to(tmp_path)
    fd = fsutil.open_directory(tmp_path)
    try:
        mode = fsutil.entry_mode("link", dir_fd=fd)
        assert mode is not None and stat.S_ISLNK(mode)
        assert fsutil.entry_mode("missing", dir_fd=fd) is None
    finally:
        os.close(fd)


def _remove(parent: Path, name: str) -> None:
    fd = fsutil.open_directory(parent)
    try:
        fsutil.remove_tree(name, dir_fd=fd)
    finally:
        os.close(fd)


def test_remove_tree_unlinks_links_and_never_follows_them(tmp_path: Path) -> None:
    """Links to directories and files, dangling links and FIFOs go as themselves; every
    target outside stays whole."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "precious").write_text("keep")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "file").write_text("go")
    (tree / "a" / "to-dir").symlink_to(outside)
    (tree / "a" / "b" / "to-file").symlink_to(outside / "sub" / "precious")
    (tree / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tree / "a" / "fifo")
    _remove(tmp_path, "tree")
    assert not tree.exists()
    assert (outside / "sub" / "precious").read_text() == "keep"


def test_remove_tree_of_a_link_removes_only_the_link(tmp_path: Path) -> None:
    """Asked to remove a name that is a link to a directory, only the link goes."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "inside").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    _remove(tmp_path, "link")
    assert not (tmp_path / "link").is_symlink()
    assert (tmp_path / "real" / "inside").read_text() == "keep"
    _remove(tmp_path, "missing")  # absent: nothing to do


def test_remove_tree_goes_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    """Iterative: a chain of directories deeper than Python's recursion limit is removed."""
    depth = sys.getrecursionlimit() + 50
    fd = fsutil.open_directory(tmp_path)
    try:
        os.mkdir("deep", dir_fd=fd)
        level = fsutil.open_directory("deep", dir_fd=fd)
        for _ in range(depth):
            os.mkdir("d", dir_fd=level)
            inner = fsutil.open_directory("d", dir_fd=level)
            os.close(level)
            level = inner
        os.close(level)
        fsutil.remove_tree("deep", dir_fd=fd)
    finally:
        os.close(fd)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_swapped_for_a_link_mid_walk_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the lstat and the open, a directory becomes a link elsewhere: the walk stops
    with OSError and what the link points to is untouched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    real_listdir = os.listdir

    def swapping(fd: int) -> list[str]:
        names = real_listdir(fd)
        if "sub" in names:  # the attacker's moment: after the listing, before the lstat/open
            sub = tmp_path / "tree" / "sub"
            sub.rmdir()
            sub.symlink_to(outside)
        return names

    monkeypatch.setattr(fsutil.os, "listdir", swapping)
    _remove(tmp_path, "tree")  # the link is seen as a link: unlinked, not entered
    assert (outside / "precious").read_text() == "keep"
    monkeypatch.undo()
    (tmp_path / "tree2" / "sub").mkdir(parents=True)
    real_stat = os.stat
    swapped = False

    def swap_after_stat(name: str, **kwargs: object) -> os.stat_result:
        nonlocal swapped
        result = real_stat(name, **kwargs)  # type: ignore[arg-type]
        if name == "sub" and not swapped:
            swapped = True
            (tmp_path / "tree2" / "sub").rmdir()
            (tmp_path / "tree2" / "sub").symlink_to(outside)
        return result

    monkeypatch.setattr(fsutil.os, "stat", swap_after_stat)
    with pytest.raises(OSError):
        _remove(tmp_path, "tree2")
    assert (outside / "precious").read_text() == "keep"
