"""What a snapshot root holds, read without changing anything: by step, newest, or id.

    catalog = SnapshotCatalog(root)
    catalog.all()            # published snapshots, oldest first
    catalog.latest()         # the newest usable one (what a restore tries first), or None
    catalog.get(120)         # the newest usable snapshot taken at trainer step 120 (KeyError)
    catalog.entry(cid)       # one published snapshot by id (KeyError)
    catalog.refused()        # snapshots a restore moved aside, each with its reason
    catalog.foreign()        # entries of snapshots/ envckpt did not make (left alone)

The order is the restore's (``SnapshotLayout.published``: by the manifest's
``created_at``). Snapshot ids carry the step when the trainer gave one, so in
a job whose step only grows the ids sort the same way.

Reading is cheap: each ``MANIFEST.json`` (its own checksum checked) and each
``gym_checkpoint.json``; no file digest is recomputed (``envckpt snapshots
verify`` does that). An entry's ``status`` says what this reading found:
``ok`` (both manifests read), ``damaged`` (one did not; ``problem`` says
which and why; a restore would refuse it) or ``refused`` (moved aside by a
restore).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from envckpt.errors import CorruptCheckpoint
from envckpt.facade.manifest import MANIFEST_NAME as GYM_MANIFEST
from envckpt.facade.manifest import GymSnapshotManifest, read_manifest
from envckpt.ids import validate_checkpoint_id
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.root_entries import Foreign
from envckpt.trainer.snapshot_manifest import SnapshotManifest, read_snapshot_manifest


class EntryStatus(StrEnum):
    """What reading a snapshot directory found."""

    OK = "ok"  # both manifests read
    DAMAGED = "damaged"  # one did not (``problem`` says which): a restore would refuse it
    REFUSED = "refused"  # a restore moved it aside to ``refused/``


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One snapshot of the root, as its manifests describe it."""

    checkpoint_id: str
    path: Path
    status: EntryStatus
    problem: str = ""
    created_at: float | None = None
    step: int | None = None
    policy_version: str | None = None
    size: int = 0
    files: int = 0
    # Gym instance id -> (episodes a restore continues, episodes it restarts).
    instances: dict[str, tuple[int, int]] = field(default_factory=dict)
    manifest: SnapshotManifest | None = None
    gym_manifest: GymSnapshotManifest | None = None

    def __post_init__(self) -> None:
        # A status given as its text ("ok") is held as the named value, so the
        # identity checks below hold for it too; an unknown one is a ValueError.
        object.__setattr__(self, "status", EntryStatus(self.status))

    @property
    def usable(self) -> bool:
        """Whether a restore would consider it (its digests are checked then)."""
        return self.status is EntryStatus.OK

    @property
    def episodes(self) -> int:
        """Episodes a restore of this snapshot continues at their saved turn."""
        return sum(continued for continued, _ in self.instances.values())

    @property
    def restarts(self) -> int:
        """In-flight episodes Gym could not capture: they restart from their task."""
        return sum(restarted for _, restarted in self.instances.values())


class SnapshotCatalog:
    """The snapshots under one root, listed and looked up."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.layout = SnapshotLayout(root)

    @property
    def root(self) -> Path:
        return self.layout.root

    def all(self) -> list[SnapshotEntry]:
        """Every published snapshot, oldest first (damaged ones included, marked)."""
        return [read_entry(path) for path in reversed(self.layout.published())]

    def latest(self) -> SnapshotEntry | None:
        """The newest snapshot whose manifests read, or None."""
        for path in self.layout.published():
            entry = read_entry(path)
            if entry.usable:
                return entry
        return None

    def get(self, step: int) -> SnapshotEntry:
        """The newest usable snapshot taken at trainer step ``step``; KeyError if none."""
        for path in self.layout.published():
            entry = read_entry(path)
            if entry.usable and entry.step == step:
                return entry
        raise KeyError(f"no usable snapshot at step {step} in {self.layout.snapshots}")

    def steps(self) -> list[int]:
        """The steps of the usable snapshots, ascending, each once."""
        return sorted({e.step for e in self.all() if e.usable and e.step is not None})

    def entry(self, checkpoint_id: str) -> SnapshotEntry:
        """The published snapshot ``checkpoint_id``; KeyError if there is none."""
        try:
            path = self.layout.snapshots / validate_checkpoint_id(checkpoint_id)
        except ValueError as error:
            raise KeyError(str(error)) from None
        if path.is_symlink() or not path.is_dir():
            raise KeyError(f"no published snapshot {checkpoint_id} in {self.layout.snapshots}")
        return read_entry(path)

    def refused(self) -> list[SnapshotEntry]:
        """Snapshots a restore refused and moved to ``refused/``, with the reason it wrote."""
        entries = []
        for name, problem in self.layout.refused_entries():
            path = self.layout.refused / name
            found = read_entry(path)
            # The entry as read, placed under ``refused/`` with the restore's
            # reason; its manifest objects are not carried over.
            entries.append(
                replace(
                    found,
                    path=path,
                    status=EntryStatus.REFUSED,
                    problem=problem or found.problem,
                    manifest=None,
                    gym_manifest=None,
                )
            )
        return entries

    def foreign(self) -> list[Foreign]:
        """Entries of ``snapshots/`` that are no snapshot envckpt made (left alone)."""
        listing = self.layout.scan()
        return [*listing.foreign, *listing.unverified()]

    def __len__(self) -> int:
        return len(self.layout.published())


def read_entry(path: Path) -> SnapshotEntry:
    """The entry of the snapshot directory ``path``."""
    checkpoint_id = _original_name(path.name)
    try:
        manifest = read_snapshot_manifest(path)
    except CorruptCheckpoint as error:
        return SnapshotEntry(
            checkpoint_id,
            path,
            EntryStatus.DAMAGED,
            f"MANIFEST.json: {error}",
            size=_disk_size(path),
        )
    gym_manifest: GymSnapshotManifest | None = None
    problem = ""
    if GYM_MANIFEST in manifest.files:
        try:
            gym_manifest = read_manifest(path)
        except CorruptCheckpoint as error:
            problem = f"{GYM_MANIFEST}: {error}"
    instances = {
        instance_id: (len(record.episodes), len(record.restarts))
        for instance_id, record in sorted((gym_manifest.instances if gym_manifest else {}).items())
    }
    return SnapshotEntry(
        checkpoint_id=checkpoint_id,
        path=path,
        status=EntryStatus.DAMAGED if problem else EntryStatus.OK,
        problem=problem,
        created_at=manifest.created_at,
        step=manifest.step,
        policy_version=manifest.policy_version,
        size=manifest.size,
        files=len(manifest.files),
        instances=instances,
        manifest=manifest,
        gym_manifest=gym_manifest,
    )


def _original_name(name: str) -> str:
    # A second refusal of the same id is stored as "<id>.<n>" (SnapshotLayout._move_out);
    # its manifest then names another directory and reads as damaged: the reason file says why.
    stem, dot, suffix = name.rpartition(".")
    return stem if dot and suffix.isdigit() else name


def _disk_size(path: Path) -> int:
    """Bytes of the regular files below ``path``; links are not followed."""
    total = 0
    for child in path.rglob("*"):
        with contextlib.suppress(OSError):
            info = child.lstat()
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total
