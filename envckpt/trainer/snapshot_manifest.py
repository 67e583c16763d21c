"""``MANIFEST.json``: the rollout snapshot's own manifest, verifiable by itself.

Written last into the temporary directory, just before the rename that
publishes it: checkpoint id, creation time, metrics, and the sha256 and size
of every other file of the snapshot. It is a checksummed JSON document
(``envckpt.checksummed``), so an edited field (say ``created_at``, which
orders the candidates at restore) is refused like a damaged file.

    manifest = build_snapshot_manifest(tmp, checkpoint_id=cid, created_at=now, metrics=m)
    write_snapshot_manifest(tmp, manifest)
    manifest = verify_snapshot(published_dir)     # CorruptCheckpoint if anything differs
    read_created_at(published_dir)                # ordering only; None if unreadable
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt import checksummed
from envckpt.errors import CorruptCheckpoint
from envckpt.fsutil import atomic_write_bytes
from envckpt.ids import validate_checkpoint_id

MANIFEST_NAME = "MANIFEST.json"
MANIFEST_KIND = "envckpt.rollout_snapshot"
# 2: the manifest carries its own checksum (1 had none).
SCHEMA_VERSION = 2
_FIELDS = ("checkpoint_id", "created_at", "files", "metrics")
_HASH_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SnapshotManifest:
    """The top-level manifest: identity, timing and every file's digest."""

    checkpoint_id: str
    created_at: float
    files: Mapping[str, tuple[str, int]]
    metrics: Mapping[str, float]

    def body(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "created_at": self.created_at,
            "files": {
                name: {"sha256": digest, "size": size}
                for name, (digest, size) in sorted(self.files.items())
            },
            # Non-finite values cannot be encoded (and mean nothing); drop them.
            "metrics": {k: v for k, v in sorted(self.metrics.items()) if math.isfinite(v)},
        }

    def to_bytes(self) -> bytes:
        return checksummed.encode(
            kind=MANIFEST_KIND, schema_version=SCHEMA_VERSION, body=self.body(), indent=1
        )


def hash_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def hashed_files(directory: Path) -> dict[str, tuple[str, int]]:
    """Every regular file below ``directory`` but the top manifest (posix path -> digest, size)."""
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
        files=hashed_files(directory),
        metrics=dict(metrics),
    )


def write_snapshot_manifest(directory: Path, manifest: SnapshotManifest) -> None:
    atomic_write_bytes(directory / MANIFEST_NAME, manifest.to_bytes())


def read_snapshot_manifest(directory: Path) -> SnapshotManifest:
    """The manifest of ``directory``, its own checksum and fields checked; files not checked."""
    path = directory / MANIFEST_NAME
    body = checksummed.read(
        path, kind=MANIFEST_KIND, schema_version=SCHEMA_VERSION, fields=_FIELDS, what="manifest"
    )
    try:
        checkpoint_id = validate_checkpoint_id(body["checkpoint_id"])
        if checkpoint_id != directory.name:
            raise ValueError(f"manifest names {checkpoint_id}, directory is {directory.name}")
        created_at = body["created_at"]
        if isinstance(created_at, bool) or not isinstance(created_at, int | float):
            raise TypeError("created_at must be a number")
        files = {
            str(name): (_digest(entry["sha256"]), _size(entry["size"]))
            for name, entry in dict(body["files"]).items()
        }
        metrics = {str(k): float(v) for k, v in dict(body["metrics"]).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CorruptCheckpoint(f"invalid snapshot manifest: {error}", path=str(path)) from error
    return SnapshotManifest(checkpoint_id, float(created_at), files, metrics)


def read_created_at(directory: Path) -> float | None:
    """When the snapshot was made, for ordering; None if its manifest does not verify."""
    try:
        return read_snapshot_manifest(directory).created_at
    except CorruptCheckpoint:
        return None


def verify_snapshot(directory: Path) -> SnapshotManifest:
    """Check the manifest and every file's digest; ``CorruptCheckpoint`` otherwise.

    Files the manifest does not list, and listed files that are missing, both
    make the snapshot unusable: it must look exactly as it was published.
    """
    manifest = read_snapshot_manifest(directory)
    actual = hashed_files(directory)
    listed = manifest.files
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


def _digest(value: object) -> str:
    if not isinstance(value, str) or len(value) != 64:
        raise ValueError(f"not a sha256 digest: {value!r}")
    int(value, 16)
    return value


def _size(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"not a file size: {value!r}")
    return value
