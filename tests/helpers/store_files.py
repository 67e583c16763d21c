"""One participant's checkpoint written with the store, for the store's tests.

manifest = write(tmp_path)                 # RECORDS, ckpt-0001, agent/simple_agent
assert restore(tmp_path) == RECORDS
rewrite_manifest(tmp_path, record_count=9) # a tampered manifest
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from envckpt.participant.store import (
    MANIFEST_NAME,
    Manifest,
    iter_records,
    participant_dir,
    read_manifest,
    verify_records,
    write_checkpoint,
)

KIND = "agent"
INSTANCE = "simple_agent"
CKPT = "ckpt-0001"

RECORDS: list[dict[str, Any]] = [
    {"zeta": 1, "alpha": [1, 2, {"y": None, "b": True}], "mid": "text é \n ☃"},
    {"episode_id": "task-7", "attempt": 0, "turn": 3, "reward": 0.25},
    {},
]


def write(root: Path, records: Any = None, **kwargs: Any) -> Manifest:
    """``write_checkpoint`` of ``records`` (default ``RECORDS``) under the test's names."""
    if records is not None:
        kwargs["records"] = records
    elif "lines" not in kwargs:
        kwargs["records"] = RECORDS
    return write_checkpoint(
        root,
        kind=kwargs.pop("kind", KIND),
        instance=kwargs.pop("instance", INSTANCE),
        checkpoint_id=kwargs.pop("checkpoint_id", CKPT),
        **kwargs,
    )


def read(root: Path, **kwargs: Any) -> Manifest:
    return read_manifest(
        root,
        kind=kwargs.pop("kind", KIND),
        instance=kwargs.pop("instance", INSTANCE),
        checkpoint_id=kwargs.pop("checkpoint_id", CKPT),
    )


def restore(root: Path) -> list[dict[str, Any]]:
    """Every record, as a restore reads them: verified first, then streamed."""
    manifest = read(root)
    verify_records(root, manifest)
    return list(iter_records(root, manifest))


def pdir(root: Path) -> Path:
    return participant_dir(root, KIND, INSTANCE)


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Name -> (bytes, inode) of every file in ``directory``."""
    return {
        path.name: (path.read_bytes(), path.stat().st_ino) for path in sorted(directory.iterdir())
    }


def rewrite_manifest(root: Path, **changes: Any) -> None:
    """Change fields of the published manifest in place (a tampered manifest)."""
    path = pdir(root) / MANIFEST_NAME
    body = json.loads(path.read_text())
    body.update(changes)
    path.write_text(json.dumps(body))


def move_behind_symlink(path: Path, target: Path) -> None:
    """Move the file at ``path`` to ``target`` and leave a symbolic link to it in its place."""
    path.rename(target)
    path.symlink_to(target)


def rewrite_records(root: Path, data: bytes, count: int) -> Manifest:
    """Replace the records with ``data`` and a matching manifest (digest and count right)."""
    directory = pdir(root)
    for path in directory.iterdir():
        path.unlink()
    digest = hashlib.sha256(data).hexdigest()
    (directory / f"records-{digest}.jsonl").write_bytes(data)
    manifest = Manifest(
        kind=KIND,
        instance=INSTANCE,
        checkpoint_id=CKPT,
        records_file=f"records-{digest}.jsonl",
        records_sha256=digest,
        record_count=count,
    )
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest.to_json(), sort_keys=True))
    return manifest
