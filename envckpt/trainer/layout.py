"""The trainer's snapshot root: publish, list, prune through a trash, quarantine, clean up.

    <root>/snapshots/<checkpoint_id>/       published snapshots (never modified)
        gym_checkpoint.json                 the facade's manifest
        gym-instances/<shard>/replica-<i>/  participant records, written by Gym
        dataplane.sqlite  ledger.json  sidecars/<name>
        MANIFEST.json                       written last: every file's sha256 and size
    <root>/.tmp/envckpt-<checkpoint_id>/    unpublished (deleted on failure)
    <root>/.trash/envckpt-<checkpoint_id>/  leaving: pruned, deleted after the rename
    <root>/refused/<checkpoint_id>/         a restore refused its content (kept to inspect)
    <root>/.lock                            the running trainer's lock (``root_guard``)
    <root>/FINISHED.json  telemetry.jsonl   the job's finished record, every record

Publishing is an atomic rename of the finished temporary directory; a crash
before it leaves only ``.tmp`` debris. Pruning is the same in reverse: a
snapshot first leaves ``snapshots/`` by a rename into ``.trash``, and only then
is it deleted, so a crash mid-delete never leaves half a snapshot among the
published ones. Only a started trainer holding the root lock cleans ``.tmp``
and ``.trash`` (``clean_debris``).

**Only what envckpt made** is ever moved out or deleted (``root_entries``):
a snapshot directory whose ``MANIFEST.json`` verifies and names it, a
``.tmp``/``.trash`` directory with envckpt's prefix, a probe. Anything else
in the root is left and reported. Every operation works on descriptors of
the root's directories opened with ``O_NOFOLLOW`` and on entries relative to
them (``dir_fd``): a ``snapshots``, ``.tmp``, ``.trash`` or ``refused`` that
is a symbolic link raises ``SnapshotRootUnsafe`` naming it, and a link
inside is removed as a link, never followed (``fsutil.remove_tree``). The
root itself may be a link: the operator chose it.

There is no ``LATEST`` pointer: a second record of "the newest" would go
stale after a crash between the rename and its own write. The candidates are
listed and ordered by their verified manifests' ``created_at`` (snapshot ids
carry the trainer's step when it was given, so they sort by step as well;
``envckpt.trainer.catalog`` reads them by step).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from envckpt import logs
from envckpt.crashpoints import crashpoint
from envckpt.fsutil import atomic_write_bytes, entry_mode, open_directory, remove_tree
from envckpt.ids import validate_checkpoint_id
from envckpt.telemetry.log import TELEMETRY_NAME
from envckpt.trainer.finished import FINISHED_NAME
from envckpt.trainer.job_errors import SnapshotNotOwned, SnapshotRootUnsafe
from envckpt.trainer.root_entries import (
    OWNED_PREFIX,
    PROBE_PREFIX,
    Foreign,
    Published,
    SnapshotsListing,
    describe_mode,
    is_owned_debris,
    list_published,
    report_foreign,
)
from envckpt.trainer.snapshot_manifest import SnapshotManifest, write_snapshot_manifest

SNAPSHOTS_DIR = "snapshots"
TEMPORARY_DIR = ".tmp"
TRASH_DIR = ".trash"
REFUSED_DIR = "refused"
LOCK_NAME = ".lock"
# The directories of a root that must never be symbolic links.
ROOT_DIRS = (SNAPSHOTS_DIR, TEMPORARY_DIR, TRASH_DIR, REFUSED_DIR)
# The files envckpt keeps at a root: a link in their place would have a start
# truncate, append to or trust a file outside the root.
ROOT_FILES = (LOCK_NAME, FINISHED_NAME, TELEMETRY_NAME)
# What the trainer itself saves into every snapshot.
DATA_PLANE_NAME = "dataplane.sqlite"
LEDGER_NAME = "ledger.json"
SIDECAR_DIR = "sidecars"


@dataclass(frozen=True, slots=True)
class Removal:
    """What a prune or a cleanup removed (names), and the foreign entries it left."""

    removed: tuple[str, ...] = ()
    left: tuple[Foreign, ...] = ()


class SnapshotLayout:
    """Paths under one snapshot root, and the file operations on them."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.snapshots = self.root / SNAPSHOTS_DIR
        self.temporary = self.root / TEMPORARY_DIR
        self.trash = self.root / TRASH_DIR
        self.refused = self.root / REFUSED_DIR
        self.lock_path = self.root / LOCK_NAME
        # Foreign entries a prune already reported: a trainer prunes after every
        # snapshot, and one warning per entry says it (the Removal lists them all).
        self._reported: set[tuple[Path, str]] = set()

    # ---- the root's directories ----------------------------------------------

    def check_safe(self) -> None:
        """``SnapshotRootUnsafe`` if a directory or file of the root is a symbolic link."""
        for name in (*ROOT_DIRS, *ROOT_FILES):
            if (self.root / name).is_symlink():
                raise self.unsafe(name)

    def unsafe(self, name: str) -> SnapshotRootUnsafe:
        path = self.root / name
        return SnapshotRootUnsafe(
            f"{path} is a symbolic link; envckpt never follows one inside a snapshot root "
            "(it would write or delete outside it): replace it with a real "
            + ("file" if name in ROOT_FILES else "directory"),
            root=str(self.root),
            path=str(path),
        )

    @contextlib.contextmanager
    def directory(self, name: str, *, create: bool = False) -> Iterator[int | None]:
        """A descriptor of ``<root>/<name>`` opened without following a link; None if absent.

        ``create``: make it (and the root) first. ``SnapshotRootUnsafe`` if it is a link.
        """
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        try:
            root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if create:
                raise
            yield None
            return
        try:
            if entry_mode(name, dir_fd=root_fd) is None:
                if not create:
                    yield None
                    return
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=root_fd)
            mode = entry_mode(name, dir_fd=root_fd)
            if mode is not None and stat.S_ISLNK(mode):
                raise self.unsafe(name)
            fd = open_directory(name, dir_fd=root_fd)
        finally:
            os.close(root_fd)
        try:
            yield fd
        finally:
            os.close(fd)

    # ---- writing a snapshot ------------------------------------------------

    def new_temporary(self, checkpoint_id: str) -> Path:
        """A fresh ``.tmp/envckpt-<id>`` directory; ``FileExistsError`` if the id was used."""
        name = OWNED_PREFIX + validate_checkpoint_id(checkpoint_id)
        with self.directory(TEMPORARY_DIR, create=True) as fd:
            os.mkdir(name, dir_fd=fd)
        return self.temporary / name

    def discard(self, path: Path) -> None:
        """Delete an unpublished temporary directory; a failure is logged, never raised."""
        if path.parent != self.temporary or not path.name.startswith(OWNED_PREFIX):
            raise ValueError(f"{path} is not a temporary directory of {self.root}")
        try:
            with self.directory(TEMPORARY_DIR) as fd:
                if fd is not None:
                    remove_tree(path.name, dir_fd=fd)
        except (OSError, SnapshotRootUnsafe) as error:
            logs.get_logger("envckpt.snapshot_root").warning(
                "could not delete an unpublished snapshot; the next start does",
                path=str(path),
                error=str(error),
            )

    def publish(self, temporary: Path, manifest: SnapshotManifest) -> Path:
        """Write the manifest last, then rename the directory into place."""
        if temporary.parent != self.temporary:
            raise ValueError(f"{temporary} is not a temporary directory of {self.root}")
        write_snapshot_manifest(temporary, manifest)
        name = validate_checkpoint_id(manifest.checkpoint_id)
        with (
            self.directory(SNAPSHOTS_DIR, create=True) as snapshots_fd,
            self.directory(TEMPORARY_DIR) as temporary_fd,
        ):
            if temporary_fd is None:
                raise FileNotFoundError(f"{self.temporary} is gone")
            assert snapshots_fd is not None
            os.rename(temporary.name, name, src_dir_fd=temporary_fd, dst_dir_fd=snapshots_fd)
            os.fsync(snapshots_fd)
            os.fsync(temporary_fd)
        return self.snapshots / name

    # ---- reading -------------------------------------------------------------

    def scan(self) -> SnapshotsListing:
        """What ``snapshots/`` holds (``root_entries.list_published``); empty if it is absent."""
        with self.directory(SNAPSHOTS_DIR) as fd:
            if fd is None:
                return SnapshotsListing((), ())
            return list_published(fd, self.snapshots)

    def published(self) -> list[Path]:
        """Published snapshot directories, newest first (by manifest time, then name).

        Names that are not checkpoint ids, links and files are not snapshots.
        A directory whose manifest does not verify is ordered by its own
        mtime, so a damaged newest snapshot is tried (refused, reported)
        before the older ones.
        """
        return [snapshot.path for snapshot in self.scan().snapshots]

    def newest(self) -> str | None:
        """The name of the newest published snapshot, or None."""
        published = self.published()
        return published[0].name if published else None

    def refused_entries(self) -> list[tuple[str, str]]:
        """(name, reason) of every snapshot directory in ``refused/``, by name.

        The reason is the first line of ``<name>.reason.txt`` ("" if none):
        read without following a link, at most 4 KiB of it.
        """
        with self.directory(REFUSED_DIR) as fd:
            if fd is None:
                return []
            with os.scandir(fd) as entries:
                names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
            return [(name, _reason(fd, f"{name}.reason.txt")) for name in names]

    # ---- leaving the published namespace -----------------------------------

    def prune(self, keep_latest_k: int) -> Removal:
        """Remove all but the newest ``keep_latest_k`` of envckpt's snapshots.

        Only snapshots whose manifest verifies count and go, ordered by their
        manifests' time; every other entry is left and reported. Each leaves
        ``snapshots/`` by one atomic rename into ``.trash`` first; the delete
        that follows may be cut short by a crash without harm.
        """
        with self.directory(SNAPSHOTS_DIR) as snapshots_fd:
            if snapshots_fd is None:
                return Removal()
            listing = list_published(snapshots_fd, self.snapshots)
            left = (*listing.foreign, *listing.unverified())
            fresh = [entry for entry in left if (entry.path, entry.why) not in self._reported]
            self._reported.update((entry.path, entry.why) for entry in fresh)
            report_foreign(fresh, during="prune")
            removed = []
            for snapshot in listing.owned()[max(1, keep_latest_k) :]:
                if self._discard_published(snapshots_fd, snapshot):
                    removed.append(snapshot.name)
        return Removal(tuple(removed), left)

    def delete(self, checkpoint_id: str) -> None:
        """Remove one published snapshot, as ``prune`` does: out by a rename, then deleted.

        ``FileNotFoundError`` if no published snapshot has that id;
        ``SnapshotNotOwned`` if the entry is not one envckpt published.
        """
        name = validate_checkpoint_id(checkpoint_id)
        with self.directory(SNAPSHOTS_DIR) as snapshots_fd:
            if snapshots_fd is None or entry_mode(name, dir_fd=snapshots_fd) is None:
                raise FileNotFoundError(
                    f"no published snapshot {checkpoint_id} in {self.snapshots}"
                )
            listing = list_published(snapshots_fd, self.snapshots)
            found = [entry for entry in listing.snapshots if entry.name == name]
            why = next((e.why for e in listing.foreign if e.path.name == name), "")
            if found and not found[0].owned:
                why = found[0].as_foreign().why
            if not found or why:
                path = self.snapshots / name
                report_foreign([Foreign(path, why)], during="delete")
                raise SnapshotNotOwned(
                    f"refused to delete {path}: {why}; envckpt deletes only snapshots it "
                    "published (remove it by hand if it is yours to remove)",
                    path=str(path),
                    why=why,
                )
            if not self._discard_published(snapshots_fd, found[0]):
                raise FileNotFoundError(f"{self.snapshots / name} changed while being deleted")

    def quarantine(self, path: Path, reason: str) -> Path:
        """Move a snapshot whose content was refused into ``refused/``, the reason beside it."""
        if path.parent != self.snapshots:
            raise ValueError(f"{path} is not a published snapshot of {self.root}")
        with (
            self.directory(SNAPSHOTS_DIR) as snapshots_fd,
            self.directory(REFUSED_DIR, create=True) as refused_fd,
        ):
            if snapshots_fd is None:
                raise FileNotFoundError(f"{self.snapshots} is gone")
            assert refused_fd is not None
            target = _free_name(refused_fd, path.name)
            os.rename(path.name, target, src_dir_fd=snapshots_fd, dst_dir_fd=refused_fd)
            os.fsync(snapshots_fd)
            os.fsync(refused_fd)
        moved = self.refused / target
        atomic_write_bytes(self.refused / f"{target}.reason.txt", reason.encode() + b"\n")
        return moved

    def clean_debris(self) -> Removal:
        """Remove what crashes left: unpublished and half-deleted directories, probes.

        Only envckpt's own entries go (``envckpt-`` and probe directories);
        anything else in ``.tmp`` or ``.trash`` is left and reported. Only the
        trainer holding the root lock may call this: another trainer's
        ``.tmp`` would be deleted under it.
        """
        removed: list[str] = []
        left: list[Foreign] = []
        for name in (TEMPORARY_DIR, TRASH_DIR, SNAPSHOTS_DIR):
            with self.directory(name) as fd:
                if fd is not None:
                    self._sweep(fd, self.root / name, removed, left)
        report_foreign(left, during="cleanup")
        return Removal(tuple(removed), tuple(left))

    # ---- helpers ---------------------------------------------------------------

    def _sweep(self, fd: int, directory: Path, removed: list[str], left: list[Foreign]) -> None:
        in_snapshots = directory == self.snapshots
        with os.scandir(fd) as entries:
            names = sorted(entry.name for entry in entries)
        for name in names:
            mode = entry_mode(name, dir_fd=fd)
            if mode is None:
                continue
            if in_snapshots:
                if not (name.startswith(PROBE_PREFIX) and stat.S_ISDIR(mode)):
                    continue  # snapshots and foreign entries: list_published reports them
            elif not is_owned_debris(name, mode):
                why = f"{describe_mode(mode)} envckpt did not make"
                left.append(Foreign(directory / name, why))
                continue
            try:
                remove_tree(name, dir_fd=fd)
            except OSError as error:
                left.append(Foreign(directory / name, f"could not be removed: {error}"))
                continue
            removed.append(f"{directory.name}/{name}")

    def _discard_published(self, snapshots_fd: int, snapshot: Published) -> bool:
        """Rename ``snapshot`` into the trash, then delete it; False if it was swapped meanwhile."""
        with self.directory(TRASH_DIR, create=True) as trash_fd:
            assert trash_fd is not None
            target = _free_name(trash_fd, OWNED_PREFIX + snapshot.name)
            os.rename(snapshot.name, target, src_dir_fd=snapshots_fd, dst_dir_fd=trash_fd)
            moved = os.stat(target, dir_fd=trash_fd, follow_symlinks=False)
            if (moved.st_dev, moved.st_ino) != snapshot.identity:
                # Replaced between listing and rename: not what was verified. Put it back.
                os.rename(target, snapshot.name, src_dir_fd=trash_fd, dst_dir_fd=snapshots_fd)
                report_foreign(
                    [Foreign(snapshot.path, "replaced while being pruned")], during="prune"
                )
                return False
            os.fsync(snapshots_fd)
            os.fsync(trash_fd)
            crashpoint("prune.in_trash")
            try:
                remove_tree(target, dir_fd=trash_fd)
            except OSError as error:
                logs.get_logger("envckpt.snapshot_root").warning(
                    "could not delete a pruned snapshot; the next start does",
                    path=str(self.trash / target),
                    error=str(error),
                )
        return True


def _free_name(dir_fd: int, name: str) -> str:
    """``name``, or ``name.<n>`` for the first n not taken in ``dir_fd``."""
    candidate, suffix = name, 0
    while entry_mode(candidate, dir_fd=dir_fd) is not None:
        suffix += 1
        candidate = f"{name}.{suffix}"
    return candidate


def _reason(dir_fd: int, name: str) -> str:
    """The first line of the small text file ``name`` of ``dir_fd``; "" if unreadable."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        text = os.read(fd, 4096).decode("utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)
    return text.splitlines()[0] if text else ""
