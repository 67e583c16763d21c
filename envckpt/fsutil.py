"""Durable small-file writes, and directory walks that never follow a symbolic link.

``atomic_write_bytes`` (temp file, fsync, atomic rename, directory fsync) is
used for the facade's ``gym_checkpoint.json`` and the trainer's manifests, so
a crash leaves either the old file or the new one, never half of one.

``open_directory`` and ``remove_tree`` are how envckpt deletes: relative to
an open directory (``dir_fd``), every directory opened with ``O_NOFOLLOW``
and checked to be the one just looked at, so a symbolic link (planted, or
swapped in mid-walk) is removed as a link and never followed::

    fd = open_directory(root / ".trash")           # OSError if it is a link
    try:
        remove_tree("envckpt-ck-1", dir_fd=fd)     # that entry and all below it
    finally:
        os.close(fd)
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from pathlib import Path

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
StrPath = str | os.PathLike[str]


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


def open_directory(name: StrPath, *, dir_fd: int | None = None) -> int:
    """A descriptor of the directory ``name`` itself; ``OSError`` for a link (``ELOOP``, or
    ``ENOTDIR`` as Linux reports it with ``O_DIRECTORY``).

    Only the last component is protected; the caller opens each level with it.
    """
    return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)


def entry_mode(name: str, *, dir_fd: int) -> int | None:
    """The ``st_mode`` of entry ``name`` of ``dir_fd`` (a link's own), or None if absent."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


def remove_tree(name: str, *, dir_fd: int) -> None:
    """Remove entry ``name`` of ``dir_fd`` and everything below it, following no link.

    A symbolic link anywhere below is unlinked (what it points to stays); a
    directory is entered only through a descriptor opened with ``O_NOFOLLOW``
    whose device and inode match what was looked at, so a directory swapped
    for a link mid-walk raises ``OSError`` instead of leading elsewhere.
    Entries that vanish meanwhile are skipped. Iterative: depth is bounded by
    open descriptors, not by Python's recursion limit.
    """
    info = _lstat(name, dir_fd)
    if info is None:
        return
    if not stat.S_ISDIR(info.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
        return
    top = _enter(name, dir_fd, info)
    # Each level: its descriptor, its name in the level above, the names left to remove.
    stack: list[tuple[int, str, list[str]]] = [(top, name, os.listdir(top))]
    try:
        while stack:
            current, _, pending = stack[-1]
            if pending:
                child = pending.pop()
                child_info = _lstat(child, current)
                if child_info is None:
                    continue
                if stat.S_ISDIR(child_info.st_mode):
                    child_fd = _enter(child, current, child_info)
                    stack.append((child_fd, child, os.listdir(child_fd)))
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(child, dir_fd=current)
                continue
            done, done_name, _ = stack.pop()
            os.close(done)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(done_name, dir_fd=stack[-1][0] if stack else dir_fd)
    finally:
        for level, _, _ in stack:
            os.close(level)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _enter(name: str, dir_fd: int, seen: os.stat_result) -> int:
    """Open the directory ``name`` that ``seen`` describes; refuse a swapped one."""
    fd = open_directory(name, dir_fd=dir_fd)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
        os.close(fd)
        raise OSError(errno.ELOOP, "directory replaced while being removed", name)
    return fd
