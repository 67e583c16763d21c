"""The trainer's snapshot root: publish, list, prune through a trash, quarantine, clean up.

    <root>/snapshots/<checkpoint_id>/       published snapshots (never modified)
        gym_checkpoint.json                 the facade's manifest
        gym-instances/<shard>/replica-<i>/  participant records, written by Gym
        dataplane.sqlite  ledger.json  sidecars/<name>
        MANIFEST.json                       written last: every file's sha256 and size
    <root>/.tmp/<checkpoint_id>/            unpublished (deleted on failure)
    <root>/.trash/<checkpoint_id>/          leaving: pruned, deleted after the rename
    <root>/refused/<checkpoint_id>/         a restore refused its content (kept to inspect)
    <root>/.lock                            the running trainer's lock (``root_guard``)

Publishing is an atomic rename of the finished temporary directory; a crash
before it leaves only ``.tmp`` debris. Pruning is the same in reverse: a
snapshot first leaves ``snapshots/`` by a rename into ``.trash``, and only then
is it deleted, so a crash mid-delete never leaves half a snapshot among the
published ones. Only a started trainer holding the root lock cleans ``.tmp``
and ``.trash`` (``clean_debris``).

There is no ``LATEST`` pointer: a second record of "the newest" would go
stale after a crash between the rename and its own write. The candidates are
listed and ordered by their verified manifests' ``created_at`` (snapshot ids
carry the trainer's step when it was given, so they sort by step as well;
``envckpt.trainer.catalog`` reads them by step).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from envckpt.crashpoints import crashpoint
from envckpt.fsutil import atomic_write_bytes, fsync_dir
from envckpt.ids import validate_checkpoint_id
from envckpt.trainer.snapshot_manifest import (
    SnapshotManifest,
    read_created_at,
    write_snapshot_manifest,
)

SNAPSHOTS_DIR = "snapshots"
TEMPORARY_DIR = ".tmp"
TRASH_DIR = ".trash"
REFUSED_DIR = "refused"
LOCK_NAME = ".lock"
# What the trainer itself saves into every snapshot.
DATA_PLANE_NAME = "dataplane.sqlite"
LEDGER_NAME = "ledger.json"
SIDECAR_DIR = "sidecars"


class SnapshotLayout:
    """Paths under one snapshot root, and the file operations on them."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.snapshots = self.root / SNAPSHOTS_DIR
        self.temporary = self.root / TEMPORARY_DIR
        self.trash = self.root / TRASH_DIR
        self.refused = self.root / REFUSED_DIR
        self.lock_path = self.root / LOCK_NAME

    # ---- writing a snapshot ------------------------------------------------

    def new_temporary(self, checkpoint_id: str) -> Path:
        path = self.temporary / validate_checkpoint_id(checkpoint_id)
        path.mkdir(parents=True)
        return path

    def discard(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def publish(self, temporary: Path, manifest: SnapshotManifest) -> Path:
        """Write the manifest last, then rename the directory into place."""
        write_snapshot_manifest(temporary, manifest)
        self.snapshots.mkdir(parents=True, exist_ok=True)
        final = self.snapshots / manifest.checkpoint_id
        os.rename(temporary, final)
        fsync_dir(self.snapshots)
        fsync_dir(self.temporary)
        return final

    # ---- reading -------------------------------------------------------------

    def published(self) -> list[Path]:
        """Published snapshot directories, newest first (by manifest time, then name).

        Names that are not checkpoint ids (probe leftovers) are not snapshots.
        A directory whose manifest does not verify is ordered by its own
        mtime, so a damaged newest snapshot is tried (refused, reported)
        before the older ones.
        """
        if not self.snapshots.is_dir():
            return []
        entries: list[tuple[float, str, Path]] = []
        for child in self.snapshots.iterdir():
            try:
                validate_checkpoint_id(child.name)
            except ValueError:
                continue
            created = read_created_at(child)
            if created is None:
                created = 0.0
                with contextlib.suppress(OSError):
                    created = child.stat().st_mtime
            entries.append((created, child.name, child))
        return [path for _, _, path in sorted(entries, reverse=True)]

    def newest(self) -> str | None:
        """The name of the newest published snapshot, or None."""
        published = self.published()
        return published[0].name if published else None

    # ---- leaving the published namespace -----------------------------------

    def prune(self, keep_latest_k: int) -> list[str]:
        """Remove all but the newest ``keep_latest_k`` snapshots; return their names.

        Each leaves ``snapshots/`` by one atomic rename into ``.trash`` first;
        the delete that follows may be cut short by a crash without harm.
        """
        doomed = self.published()[max(1, keep_latest_k) :]
        for path in doomed:
            moved = self._move_out(path, self.trash)
            crashpoint("prune.in_trash")
            shutil.rmtree(moved, ignore_errors=True)
        return [path.name for path in doomed]

    def delete(self, checkpoint_id: str) -> None:
        """Remove one published snapshot, as ``prune`` does: out by a rename, then deleted.

        ``FileNotFoundError`` if no published snapshot has that id.
        """
        path = self.snapshots / validate_checkpoint_id(checkpoint_id)
        if not path.is_dir():
            raise FileNotFoundError(f"no published snapshot {checkpoint_id} in {self.snapshots}")
        moved = self._move_out(path, self.trash)
        crashpoint("prune.in_trash")
        shutil.rmtree(moved, ignore_errors=True)

    def quarantine(self, path: Path, reason: str) -> Path:
        """Move a snapshot whose content was refused into ``refused/``, the reason beside it."""
        moved = self._move_out(path, self.refused)
        atomic_write_bytes(moved.with_name(f"{moved.name}.reason.txt"), reason.encode() + b"\n")
        return moved

    def clean_debris(self) -> int:
        """Remove what crashes left: unpublished and half-deleted directories, probes.

        Only the trainer holding the root lock may call this: another
        trainer's ``.tmp`` would be deleted under it.
        """
        removed = 0
        for directory in (self.temporary, self.trash):
            if directory.is_dir():
                for child in directory.iterdir():
                    _remove(child)
                    removed += 1
        if self.snapshots.is_dir():
            for child in self.snapshots.iterdir():
                if child.name.startswith(".probe-"):
                    _remove(child)
                    removed += 1
        return removed

    def _move_out(self, path: Path, into: Path) -> Path:
        into.mkdir(parents=True, exist_ok=True)
        target = into / path.name
        suffix = 0
        while target.exists():
            suffix += 1
            target = into / f"{path.name}.{suffix}"
        os.rename(path, target)
        fsync_dir(path.parent)
        fsync_dir(into)
        return target


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        # rmtree refuses files and symlinks (silently, with ignore_errors).
        path.unlink(missing_ok=True)
