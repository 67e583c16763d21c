"""Durable small-file writes: temp file, fsync, atomic rename, directory fsync.

Used for the facade's ``gym_checkpoint.json`` and the trainer's manifests,
so a crash leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


def fsync_dir(directory: Path, *, best_effort: bool = False) -> None:
    """Persist a directory entry change (a rename or a new file).

    ``best_effort``: ignore a filesystem that cannot sync directories.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        if not best_effort:
            raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temp, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    fsync_dir(path.parent)
