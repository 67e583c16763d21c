"""What in a snapshot root is envckpt's: the only entries it ever moves out or deletes.

    <root>/snapshots/<id>/                 a real directory whose MANIFEST.json
                                           verifies by itself and names <id>
    <root>/snapshots/.envckpt-probe-<hex>/ a probe a crash left behind
    <root>/.tmp/envckpt-<id>/              a snapshot being written (or .envckpt-probe-<hex>)
    <root>/.trash/envckpt-<id>/            a snapshot a prune or delete moved out

The snapshot's manifest is its ownership marker: a checksummed document of
envckpt's own kind, written last, naming the directory it sits in. Every
other entry is **foreign**: a stray file, a link (to anywhere), a FIFO, a
directory whose manifest is missing, damaged or over its cap, a ``.tmp``
entry without the prefix. Foreign entries are never removed: they are left
where they are and reported (``Foreign``; the ``left a foreign entry`` log
event; a line in ``envckpt snapshots prune``).

    listing = list_published(snapshots_fd, layout.snapshots)
    listing.snapshots       # restore candidates, newest first (owned and unverified)
    listing.owned()         # what a prune may remove, newest first
    listing.foreign         # left alone and reported

Reading goes through the directory's descriptor (``os.scandir(fd)``) and
``lstat``: nothing here follows a symbolic link.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envckpt import logs
from envckpt.errors import CorruptCheckpoint
from envckpt.ids import validate_checkpoint_id
from envckpt.trainer.snapshot_manifest import read_snapshot_manifest

# Every top-level entry envckpt makes under .tmp and .trash starts with this.
OWNED_PREFIX = "envckpt-"
# A probe's name under .tmp and snapshots/: a leading dot, so never a snapshot id.
PROBE_PREFIX = ".envckpt-probe-"


@dataclass(frozen=True, slots=True)
class Foreign:
    """An entry envckpt did not make (``why``): left where it is."""

    path: Path
    why: str


@dataclass(frozen=True, slots=True)
class Published:
    """A directory in ``snapshots/`` named like a snapshot id.

    ``created_at`` is its verified manifest's time; None when the manifest
    does not verify (``problem`` says why): then it is not provably
    envckpt's, is ordered by its mtime (``order``) and is never removed.
    """

    path: Path
    order: float
    created_at: float | None
    identity: tuple[int, int]
    problem: str = ""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def owned(self) -> bool:
        return self.created_at is not None

    def as_foreign(self) -> Foreign:
        return Foreign(self.path, f"its MANIFEST.json does not verify: {self.problem}")


@dataclass(frozen=True, slots=True)
class SnapshotsListing:
    """What ``snapshots/`` holds: snapshot directories newest first, and foreign entries."""

    snapshots: tuple[Published, ...]
    foreign: tuple[Foreign, ...]

    def owned(self) -> list[Published]:
        """The snapshots envckpt can prove it published, newest first."""
        return [snapshot for snapshot in self.snapshots if snapshot.owned]

    def unverified(self) -> list[Foreign]:
        """Snapshot-named directories whose manifest does not verify, as foreign entries."""
        return [snapshot.as_foreign() for snapshot in self.snapshots if not snapshot.owned]


def describe_mode(mode: int) -> str:
    """What kind of entry ``mode`` (an ``lstat`` mode) is, for a report."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((text for test, text in kinds if test(mode)), "a device or special file")


def list_published(snapshots_fd: int, directory: Path) -> SnapshotsListing:
    """The entries of ``snapshots/`` (open as ``snapshots_fd``; ``directory`` names it).

    Order: by the verified manifest's ``created_at``, else by the directory's
    own mtime, then by name; newest first. Probe leftovers are neither
    snapshots nor foreign (``clean_debris`` removes them).
    """
    snapshots: list[Published] = []
    foreign: list[Foreign] = []
    with os.scandir(snapshots_fd) as entries:
        for entry in entries:
            path = directory / entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(info.st_mode):
                foreign.append(Foreign(path, f"{describe_mode(info.st_mode)}, not a snapshot"))
                continue
            if entry.name.startswith(PROBE_PREFIX):
                continue
            try:
                validate_checkpoint_id(entry.name)
            except ValueError:
                foreign.append(Foreign(path, "a directory not named like a snapshot id"))
                continue
            snapshots.append(_published(path, info))
    snapshots.sort(key=lambda snapshot: (snapshot.order, snapshot.name), reverse=True)
    foreign.sort(key=lambda entry: entry.path.name)
    return SnapshotsListing(tuple(snapshots), tuple(foreign))


def _published(path: Path, info: os.stat_result) -> Published:
    identity = (info.st_dev, info.st_ino)
    try:
        created_at = read_snapshot_manifest(path).created_at
    except CorruptCheckpoint as error:
        return Published(path, info.st_mtime, None, identity, problem=error.message)
    except OSError as error:  # the directory vanished or cannot be read
        return Published(path, info.st_mtime, None, identity, problem=str(error))
    return Published(path, created_at, created_at, identity)


def is_owned_debris(name: str, mode: int) -> bool:
    """Whether a top-level entry of ``.tmp`` or ``.trash`` is one envckpt made."""
    return stat.S_ISDIR(mode) and name.startswith((OWNED_PREFIX, PROBE_PREFIX))


def report_foreign(foreign: Sequence[Foreign], *, during: str) -> None:
    """One ``left a foreign entry`` warning per entry envckpt left alone ``during`` an action."""
    log = logs.get_logger("envckpt.snapshot_root")
    for entry in foreign:
        log.warning("left a foreign entry", path=str(entry.path), why=entry.why, during=during)
