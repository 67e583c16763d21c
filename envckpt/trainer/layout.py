"""The trainer's snapshot directory: publish, LATEST, retention, top-level manifest.

    <root>/snapshots/<checkpoint_id>/       published snapshots (never modified)
        gym_checkpoint.json                 the facade's manifest
        gym-instances/<shard>/replica-<i>/  participant records, written by Gym
        dataplane.sqlite  ledger.json  sidecars/<name>
        MANIFEST.json                       written last: every file's sha256 and size
    <root>/.tmp/<checkpoint_id>/            unpublished (deleted on failure)
    <root>/LATEST                           name of the newest published snapshot

Publishing is an atomic rename of the finished temporary directory; a crash
before it leaves only ``.tmp`` debris, which the next start removes. A
snapshot without a valid ``MANIFEST.json`` is never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt.errors import CorruptCheckpoint
from envckpt.fsutil import atomic_write_bytes, fsync_dir
from envckpt.ids import validate_checkpoint_id

MANIFEST_NAME = "MANIFEST.json"
MANIFEST_KIND = "envckpt.rollout_snapshot"
SCHEMA_VERSION = 1
LATEST_NAME = "LATEST"
_HASH_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SnapshotManifest:
    """The top-level manifest: identity, timing and every file's digest."""

    checkpoint_id: str
    created_at: float
    files: Mapping[str, tuple[str, int]]
    metrics: Mapping[str, float]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": MANIFEST_KIND,
            "checkpoint_id": self.checkpoint_id,
            "created_at": self.created_at,
            "files": {
                name: {"sha256": digest, "size": size}
                for name, (digest, size) in sorted(self.files.items())
            },
            "metrics": dict(sorted(self.metrics.items())),
        }


class SnapshotLayout:
    """Paths under one snapshot root, and the operations on them."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.snapshots = self.root / "snapshots"
        self.temporary = self.root / ".tmp"

    def new_temporary(self, checkpoint_id: str) -> Path:
        path = self.temporary / validate_checkpoint_id(checkpoint_id)
        path.mkdir(parents=True)
        return path

    def discard(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def clean_debris(self) -> int:
        """Remove unpublished directories a crash left behind; return how many."""
        if not self.temporary.is_dir():
            return 0
        removed = 0
        for child in self.temporary.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                # rmtree refuses files and symlinks (silently, with ignore_errors).
                child.unlink(missing_ok=True)
            removed += 1
        return removed

    def publish(self, temporary: Path, manifest: SnapshotManifest) -> Path:
        """Write the manifest last, then rename the directory into place."""
        write_snapshot_manifest(temporary, manifest)
        self.snapshots.mkdir(parents=True, exist_ok=True)
        final = self.snapshots / manifest.checkpoint_id
        os.rename(temporary, final)
        fsync_dir(self.snapshots)
        fsync_dir(self.temporary)
        atomic_write_bytes(self.root / LATEST_NAME, manifest.checkpoint_id.encode())
        return final

    def published(self) -> list[Path]:
        """Published snapshot directories, newest first (by manifest time, then name)."""
        if not self.snapshots.is_dir():
            return []
        entries: list[tuple[float, str, Path]] = []
        for child in self.snapshots.iterdir():
            # A directory whose manifest is missing or unreadable is ordered by
            # its own time, so a damaged newest snapshot is tried (and refused,
            # and reported) before the older ones.
            created = 0.0
            with contextlib.suppress(OSError):
                created = child.stat().st_mtime
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                created = float(json.loads((child / MANIFEST_NAME).read_bytes())["created_at"])
            entries.append((created, child.name, child))
        return [path for _, _, path in sorted(entries, reverse=True)]

    def latest(self) -> str | None:
        try:
            return (self.root / LATEST_NAME).read_text().strip() or None
        except FileNotFoundError:
            return None

    def prune(self, keep_latest_k: int) -> list[str]:
        """Delete all but the newest ``keep_latest_k`` snapshots; return their names."""
        doomed = self.published()[max(1, keep_latest_k) :]
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)
        return [path.name for path in doomed]


def hash_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _hashed_files(directory: Path) -> dict[str, tuple[str, int]]:
    """Every regular file below ``directory`` (relative posix path -> digest, size)."""
    files: dict[str, tuple[str, int]] = {}
    for path in sorted(directory.rglob("*")):
        top_manifest = path.parent == directory and path.name == MANIFEST_NAME
        if path.is_file() and not top_manifest:
            files[path.relative_to(directory).as_posix()] = hash_file(path)
    return files


def build_snapshot_manifest(
    directory: Path, *, checkpoint_id: str, created_at: float, metrics: Mapping[str, float]
) -> SnapshotManifest:
    return SnapshotManifest(
        checkpoint_id=checkpoint_id,
        created_at=created_at,
        files=_hashed_files(directory),
        metrics=metrics,
    )


def write_snapshot_manifest(directory: Path, manifest: SnapshotManifest) -> None:
    data = json.dumps(manifest.to_json(), sort_keys=True, indent=1).encode()
    atomic_write_bytes(directory / MANIFEST_NAME, data)


def verify_snapshot(directory: Path) -> SnapshotManifest:
    """Check the manifest and every file's digest; ``CorruptCheckpoint`` otherwise.

    Files the manifest does not list, and listed files that are missing, both
    make the snapshot unusable: it must look exactly as it was published.
    """
    path = directory / MANIFEST_NAME
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise CorruptCheckpoint("no snapshot manifest: unpublished", path=str(path)) from None
    except (OSError, ValueError) as error:
        raise CorruptCheckpoint(f"unreadable snapshot manifest: {error}", path=str(path)) from error
    try:
        if document.get("kind") != MANIFEST_KIND:
            raise ValueError(f"foreign manifest kind {document.get('kind')!r}")
        if document.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {document.get('schema_version')!r}")
        checkpoint_id = validate_checkpoint_id(document["checkpoint_id"])
        if checkpoint_id != directory.name:
            raise ValueError(f"manifest names {checkpoint_id}, directory is {directory.name}")
        listed = {
            name: (str(entry["sha256"]), int(entry["size"]))
            for name, entry in document["files"].items()
        }
        manifest = SnapshotManifest(
            checkpoint_id=checkpoint_id,
            created_at=float(document["created_at"]),
            files=listed,
            metrics={str(k): float(v) for k, v in document.get("metrics", {}).items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CorruptCheckpoint(f"invalid snapshot manifest: {error}", path=str(path)) from error
    actual = _hashed_files(directory)
    if set(actual) != set(listed):
        raise CorruptCheckpoint(
            f"files differ from the manifest: missing={sorted(set(listed) - set(actual))[:5]}, "
            f"unlisted={sorted(set(actual) - set(listed))[:5]}",
            path=str(directory),
        )
    for name, expected in listed.items():
        if actual[name] != expected:
            raise CorruptCheckpoint(f"checksum mismatch in {name}", path=str(directory / name))
    return manifest
