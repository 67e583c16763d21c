"""``MANIFEST.json``: the rollout snapshot's own manifest, verifiable by itself.

Written last into the temporary directory, just before the rename that
publishes it: checkpoint id, creation time, the trainer's step and policy
version (when the trainer gave them), metrics, and the sha256 and size of
every other file of the snapshot. It is a checksummed JSON document
(``envckpt.checksummed``), so an edited field (say ``created_at``, which
orders the candidates at restore) is refused like a damaged file.

    manifest = build_snapshot_manifest(tmp, checkpoint_id=cid, created_at=now, metrics=m,
                                       step=120, policy_version="v7")
    write_snapshot_manifest(tmp, manifest)
    manifest = verify_snapshot(published_dir)     # CorruptCheckpoint if anything differs
    read_snapshot_manifest(published_dir)         # ManifestTooLarge past the caps below
    verify_snapshot(published_dir, on_bytes=bar.advance)   # progress while hashing
    read_created_at(published_dir)                # ordering only; None if unreadable

Schema 3 added ``step`` and ``policy_version``; a schema 2 manifest (written
before) still reads, with neither.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt import checksummed
from envckpt.errors import CorruptCheckpoint
from envckpt.fsutil import atomic_write_bytes
from envckpt.ids import mint_checkpoint_id, validate_checkpoint_id

MANIFEST_NAME = "MANIFEST.json"
MANIFEST_KIND = "envckpt.rollout_snapshot"
# 2: the manifest carries its own checksum (1 had none). 3: step, policy_version.
SCHEMA_VERSION = 3
# A step is written with this many digits in the snapshot id, so ids sort by step.
STEP_DIGITS = 10


def snapshot_id(step: int | None) -> str:
    """A fresh snapshot id: ``rollouts-step0000000120-<hex>``, or ``rollouts-<hex>`` without."""
    if step is None:
        return mint_checkpoint_id("rollouts")
    return mint_checkpoint_id(f"rollouts-step{step:0{STEP_DIGITS}d}")


_FIELDS_V2 = ("checkpoint_id", "created_at", "files", "metrics")
_FIELDS = {2: _FIELDS_V2, SCHEMA_VERSION: (*_FIELDS_V2, "step", "policy_version")}
_HASH_CHUNK = 1024 * 1024
# Caps on a manifest read back: a legitimate one lists a few files per Gym
# participant (some hundred bytes each), so 100k entries and 32 MiB hold any
# real deployment many times over, and a hostile one is refused in
# milliseconds instead of parsed for seconds into hundreds of MiB.
MAX_MANIFEST_BYTES = 32 * 1024 * 1024
MAX_MANIFEST_FILES = 100_000
# Called with the number of bytes just hashed (a progress bar's advance).
OnBytes = Callable[[int], object]


@dataclass(frozen=True, slots=True)
class SnapshotManifest:
    """The top-level manifest: identity, timing and every file's digest."""

    checkpoint_id: str
    created_at: float
    files: Mapping[str, tuple[str, int]]
    metrics: Mapping[str, float]
    # The trainer's step and policy version when the snapshot was taken (None: not given).
    step: int | None = None
    policy_version: str | None = None

    def __post_init__(self) -> None:
        validate_step(self.step)
        validate_policy_version(self.policy_version)

    @property
    def size(self) -> int:
        """Bytes of every listed file (the manifest itself not counted)."""
        return sum(size for _, size in self.files.values())

    def body(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "created_at": self.created_at,
            "step": self.step,
            "policy_version": self.policy_version,
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


def validate_step(step: object) -> int | None:
    """``step`` if it is None or a non-negative int (bool refused), else ValueError."""
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise ValueError(f"step must be a non-negative integer or None, got {step!r}")
    return step


def validate_policy_version(version: object) -> str | None:
    """``version`` if it is None or a non-empty string, else ValueError."""
    if version is not None and (not isinstance(version, str) or not version):
        raise ValueError(f"policy_version must be a non-empty string or None, got {version!r}")
    return version


def hash_file(path: Path, on_bytes: OnBytes | None = None) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return digest.hexdigest(), size


def hashed_files(directory: Path, on_bytes: OnBytes | None = None) -> dict[str, tuple[str, int]]:
    """Every regular file below ``directory`` but the top manifest (posix path -> digest, size)."""
    files: dict[str, tuple[str, int]] = {}
    for path in sorted(directory.rglob("*")):
        top_manifest = path.parent == directory and path.name == MANIFEST_NAME
        if path.is_file() and not top_manifest:
            files[path.relative_to(directory).as_posix()] = hash_file(path, on_bytes)
    return files


def build_snapshot_manifest(
    directory: Path,
    *,
    checkpoint_id: str,
    created_at: float,
    metrics: Mapping[str, float],
    step: int | None = None,
    policy_version: str | None = None,
) -> SnapshotManifest:
    return SnapshotManifest(
        checkpoint_id=checkpoint_id,
        created_at=created_at,
        files=hashed_files(directory),
        metrics=dict(metrics),
        step=step,
        policy_version=policy_version,
    )


def write_snapshot_manifest(directory: Path, manifest: SnapshotManifest) -> None:
    """Write ``MANIFEST.json``; ``ManifestTooLarge`` rather than publish what no reader takes."""
    path = directory / MANIFEST_NAME
    checksummed.check_entries(
        len(manifest.files) + len(manifest.metrics),
        limit=MAX_MANIFEST_FILES,
        what="manifest",
        path=path,
    )
    data = manifest.to_bytes()
    checksummed.check_size(len(data), limit=MAX_MANIFEST_BYTES, what="manifest", path=path)
    atomic_write_bytes(path, data)


def read_snapshot_manifest(
    directory: Path,
    *,
    max_bytes: int = MAX_MANIFEST_BYTES,
    max_files: int = MAX_MANIFEST_FILES,
) -> SnapshotManifest:
    """The manifest of ``directory``, its own checksum and fields checked; files not checked.

    ``ManifestTooLarge`` (a ``CorruptCheckpoint``) past ``max_bytes`` (before
    reading) or ``max_files`` listed files (before any is used).
    """
    path = directory / MANIFEST_NAME
    data = checksummed.read_capped(path, max_bytes=max_bytes, what="manifest")
    schema = _schema_of(data)
    body = checksummed.decode(
        data, kind=MANIFEST_KIND, schema_version=schema, fields=_FIELDS[schema], path=str(path)
    )
    try:
        checkpoint_id = validate_checkpoint_id(body["checkpoint_id"])
        if checkpoint_id != directory.name:
            raise ValueError(f"manifest names {checkpoint_id}, directory is {directory.name}")
        created_at = body["created_at"]
        if isinstance(created_at, bool) or not isinstance(created_at, int | float):
            raise TypeError("created_at must be a number")
        listed = dict(body["files"])
        metrics = dict(body["metrics"])
        checksummed.check_entries(
            len(listed) + len(metrics), limit=max_files, what="manifest", path=path
        )
        files = {
            str(name): (_digest(entry["sha256"]), _size(entry["size"]))
            for name, entry in listed.items()
        }
        return SnapshotManifest(
            checkpoint_id,
            float(created_at),
            files,
            {str(k): float(v) for k, v in metrics.items()},
            step=body.get("step"),
            policy_version=body.get("policy_version"),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        if isinstance(error, CorruptCheckpoint):
            raise
        raise CorruptCheckpoint(f"invalid snapshot manifest: {error}", path=str(path)) from error


def _schema_of(data: bytes) -> int:
    """The schema the manifest claims, when this build reads it; else the current one,
    so ``checksummed.decode`` refuses it with its own message (not JSON, future)."""
    try:
        claimed = json.loads(data).get("schema_version")
    except (ValueError, AttributeError, RecursionError):
        return SCHEMA_VERSION
    return claimed if type(claimed) is int and claimed in _FIELDS else SCHEMA_VERSION


def read_created_at(directory: Path) -> float | None:
    """When the snapshot was made, for ordering; None if its manifest does not verify."""
    try:
        return read_snapshot_manifest(directory).created_at
    except CorruptCheckpoint:
        return None


def verify_snapshot(directory: Path, *, on_bytes: OnBytes | None = None) -> SnapshotManifest:
    """Check the manifest and every file's digest; ``CorruptCheckpoint`` otherwise.

    Files the manifest does not list, and listed files that are missing, both
    make the snapshot unusable: it must look exactly as it was published.
    ``on_bytes`` hears every chunk hashed (``manifest.size`` bytes in all when whole).
    """
    manifest = read_snapshot_manifest(directory)
    actual = hashed_files(directory, on_bytes)
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
