"""Tests for envckpt.trainer.root_entries: which entries of a snapshot root are envckpt's."""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.root_entries import (
    Foreign,
    describe_mode,
    is_owned_debris,
    list_published,
    report_foreign,
)
from envckpt.trainer.snapshot_manifest import MANIFEST_NAME

from helpers.snapshot_files import publish


def listing_of(layout: SnapshotLayout) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(owned names, unverified names, foreign (name, why)) of the layout's snapshots/."""
    fd = os.open(layout.snapshots, os.O_RDONLY | os.O_DIRECTORY)
    try:
        listing = list_published(fd, layout.snapshots)
    finally:
        os.close(fd)
    owned = [snapshot.name for snapshot in listing.owned()]
    unverified = [entry.path.name for entry in listing.unverified()]
    return owned, unverified, [(entry.path.name, entry.why) for entry in listing.foreign]


def test_only_a_directory_whose_manifest_names_it_is_owned(tmp_path: Path) -> None:
    """A published snapshot is owned; its copy under another name, a directory without a
    manifest and one with a truncated manifest are unverified; files, links, FIFOs and
    directories not named like an id are foreign; a probe leftover is neither."""
    layout = SnapshotLayout(tmp_path / "root")
    real = publish(layout, "ck-1", 1.0)
    shutil.copytree(real, layout.snapshots / "ck-copy")
    (layout.snapshots / "empty").mkdir()
    shutil.copytree(real, layout.snapshots / "ck-cut")
    path = layout.snapshots / "ck-cut" / MANIFEST_NAME
    path.write_bytes(path.read_bytes()[:-20])
    (layout.snapshots / "notes.txt").write_text("x")
    (layout.snapshots / "ck-link").symlink_to(real)
    (layout.snapshots / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(layout.snapshots / "fifo")
    (layout.snapshots / ".hidden").mkdir()
    (layout.snapshots / ".envckpt-probe-1").mkdir()
    owned, unverified, foreign = listing_of(layout)
    assert owned == ["ck-1"]
    assert sorted(unverified) == ["ck-copy", "ck-cut", "empty"]
    assert foreign == [
        (".hidden", "a directory not named like a snapshot id"),
        ("ck-link", "a symbolic link, not a snapshot"),
        ("dangling", "a symbolic link, not a snapshot"),
        ("fifo", "a FIFO, not a snapshot"),
        ("notes.txt", "a regular file, not a snapshot"),
    ]


def test_owned_snapshots_are_ordered_by_their_manifests_newest_first(tmp_path: Path) -> None:
    """created_at orders the owned ones whatever their mtime; ties by name."""
    layout = SnapshotLayout(tmp_path / "root")
    for name, created_at in (("b", 2.0), ("a", 2.0), ("c", 1.0), ("d", 3.0)):
        os.utime(publish(layout, name, created_at), (1e10 - created_at, 1e10 - created_at))
    assert listing_of(layout)[0] == ["d", "b", "a", "c"]


def test_only_prefixed_directories_are_debris() -> None:
    """envckpt- and .envckpt-probe- directories are envckpt's; files, links and other
    names are not, prefix or not."""
    directory = stat.S_IFDIR | 0o755
    assert is_owned_debris("envckpt-ck-1", directory)
    assert is_owned_debris(".envckpt-probe-abc", directory)
    assert not is_owned_debris("ck-1", directory)
    assert not is_owned_debris(".probe-abc", directory)  # the name before prefixes
    assert not is_owned_debris("envckpt-ck-1", stat.S_IFLNK | 0o777)
    assert not is_owned_debris("envckpt-ck-1", stat.S_IFREG | 0o644)


def test_describe_mode_names_every_kind(tmp_path: Path) -> None:
    """Each lstat kind reads as what it is."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "l").symlink_to(tmp_path / "f")
    os.mkfifo(tmp_path / "p")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "s"))
        kinds = {name: describe_mode(os.lstat(tmp_path / name).st_mode) for name in "flps"}
    kinds["d"] = describe_mode(os.lstat(tmp_path).st_mode)
    assert kinds == {
        "f": "a regular file",
        "l": "a symbolic link",
        "p": "a FIFO",
        "s": "a socket",
        "d": "a directory",
    }
    assert describe_mode(stat.S_IFCHR) == "a device or special file"


def test_each_foreign_entry_is_one_warning(tmp_path: Path) -> None:
    """report_foreign logs one "left a foreign entry" event per entry, with path and reason."""
    entries = [Foreign(tmp_path / "a", "a regular file"), Foreign(tmp_path / "b", "a FIFO")]
    with capture_logs() as logs:
        report_foreign(entries, during="prune")
    assert [(e["event"], e["log_level"], e["path"], e["why"], e["during"]) for e in logs] == [
        ("left a foreign entry", "warning", str(tmp_path / "a"), "a regular file", "prune"),
        ("left a foreign entry", "warning", str(tmp_path / "b"), "a FIFO", "prune"),
    ]


@pytest.mark.parametrize("damage", ["truncated", "over the cap"])
def test_an_unverified_snapshot_says_why(tmp_path: Path, damage: str) -> None:
    """The reason an unverified directory is not owned is the manifest reader's."""
    layout = SnapshotLayout(tmp_path / "root")
    published = publish(layout, "ck-1", 1.0)
    path = published / MANIFEST_NAME
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:10])
    else:
        with open(path, "r+b") as stream:
            stream.truncate(1 << 40)
    fd = os.open(layout.snapshots, os.O_RDONLY | os.O_DIRECTORY)
    try:
        [why] = [entry.why for entry in list_published(fd, layout.snapshots).unverified()]
    finally:
        os.close(fd)
    expected = "not valid JSON" if damage == "truncated" else "over its cap"
    assert why.startswith("its MANIFEST.json does not verify") and expected in why
