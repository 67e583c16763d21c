"""Before a trainer touches its snapshot root: hold it alone, and prove it can take snapshots.

    lock = RootLock.acquire(root)        # SnapshotRootLocked names the other trainer
    probe_root(SnapshotLayout(root))     # SnapshotRootUnusable names the failed step
    ...                                  # clean debris, restore, run
    lock.release()                       # or let the process end: the kernel drops it

The lock is an exclusive ``fcntl.flock`` on ``<root>/.lock``, so it goes away
with the process however it ends (no stale lock after a SIGKILL). The holder
writes its pid, host and start time into the file for the next one to name.
Within one process the lock is re-entrant (a restart of the job's objects in
the same process shares it); two processes never share it.

The probe first refuses a root whose ``snapshots``, ``.tmp``, ``.trash``,
``refused`` or ``.lock`` is a symbolic link (``SnapshotRootUnsafe``: through
it, envckpt would write and delete outside the root); the lock file is
opened with ``O_NOFOLLOW`` too. Then it does what publishing a snapshot
does, on a throwaway directory: create a file under ``.tmp``, fsync it,
rename the directory into ``snapshots/``, delete it. A read-only root, a
full disk or a ``snapshots`` that is a file fail here, before any rollout
runs, instead of at the first snapshot.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
import uuid
from pathlib import Path

from envckpt.fsutil import open_directory, remove_tree
from envckpt.trainer.job_errors import SnapshotRootLocked, SnapshotRootUnusable
from envckpt.trainer.layout import LOCK_NAME, SNAPSHOTS_DIR, TEMPORARY_DIR, SnapshotLayout
from envckpt.trainer.root_entries import PROBE_PREFIX

_HELD: dict[str, RootLock] = {}


class RootLock:
    """This process's exclusive hold on one snapshot root."""

    def __init__(self, root: Path, fd: int) -> None:
        self.root = root
        self._fd: int | None = fd
        self._holds = 1

    @property
    def held(self) -> bool:
        return self._fd is not None

    @classmethod
    def acquire(cls, root: str | os.PathLike[str]) -> RootLock:
        """Take the lock on ``root`` (created if missing), or raise a ``StartRefused``."""
        layout = SnapshotLayout(root)
        try:
            layout.root.mkdir(parents=True, exist_ok=True)
            key = str(layout.root.resolve())
        except OSError as error:
            raise _unusable(layout, "create the snapshot root", error) from error
        held = _HELD.get(key)
        if held is not None and held.held:
            held._holds += 1
            return held
        try:
            # O_NOFOLLOW: a .lock linked elsewhere would be truncated and written.
            fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise layout.unsafe(LOCK_NAME) from None
            raise _unusable(layout, "open the lock file", error) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise SnapshotRootLocked(
                f"another trainer holds the snapshot root {layout.root}: pid "
                f"{holder.get('pid', '?')} on {holder.get('host', '?')} since "
                f"{holder.get('since', '?')}; stop it, or give this job its own root",
                root=str(layout.root),
                pid=_int(holder.get("pid")),
                host=str(holder.get("host", "")),
                since=str(holder.get("since", "")),
            ) from None
        except OSError as error:
            os.close(fd)
            raise _unusable(layout, "lock the lock file", error) from error
        try:
            _write_holder(fd)
        except OSError as error:
            os.close(fd)
            raise _unusable(layout, "write the lock file", error) from error
        lock = cls(layout.root, fd)
        _HELD[key] = lock
        return lock

    def release(self) -> None:
        """Give one hold back; the last one unlocks."""
        if self._fd is None:
            return
        self._holds -= 1
        if self._holds > 0:
            return
        fd, self._fd = self._fd, None
        for key, lock in list(_HELD.items()):
            if lock is self:
                del _HELD[key]
        os.close(fd)  # closing the only descriptor releases the flock

    def __enter__(self) -> RootLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def probe_root(layout: SnapshotLayout) -> None:
    """Create, fsync, rename and delete a probe as publishing would.

    ``SnapshotRootUnsafe`` for a directory of the root that is a symbolic
    link; ``SnapshotRootUnusable`` naming the step that failed.
    """
    layout.check_safe()
    name = f"{PROBE_PREFIX}{uuid.uuid4().hex[:12]}"
    step = "create a directory under .tmp"
    try:
        with layout.directory(TEMPORARY_DIR, create=True) as staging_fd:
            assert staging_fd is not None
            os.mkdir(name, dir_fd=staging_fd)
            step = "write and fsync a file"
            _write_probe(name, staging_fd)
            step = "create snapshots/"
            with layout.directory(SNAPSHOTS_DIR, create=True) as snapshots_fd:
                assert snapshots_fd is not None
                step = "rename into snapshots/"
                os.rename(name, name, src_dir_fd=staging_fd, dst_dir_fd=snapshots_fd)
                os.fsync(snapshots_fd)
                step = "delete the probe"
                remove_tree(name, dir_fd=snapshots_fd)
                os.fsync(snapshots_fd)
    except OSError as error:
        _remove_probe(layout, name)
        raise _unusable(layout, step, error) from error


def _remove_probe(layout: SnapshotLayout, name: str) -> None:
    """Best effort: the probe wherever the failed step left it (the next start sweeps it too)."""
    for directory in (TEMPORARY_DIR, SNAPSHOTS_DIR):
        with contextlib.suppress(OSError), layout.directory(directory) as fd:
            if fd is not None:
                remove_tree(name, dir_fd=fd)


def _write_probe(name: str, staging_fd: int) -> None:
    directory = open_directory(name, dir_fd=staging_fd)
    try:
        fd = os.open("probe", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=directory)
        try:
            os.write(fd, b"envckpt probe\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(directory)
    finally:
        os.close(directory)


def _unusable(layout: SnapshotLayout, step: str, error: OSError) -> SnapshotRootUnusable:
    reason = error.strerror or type(error).__name__
    where = f" ({error.filename})" if error.filename else ""
    return SnapshotRootUnusable(
        f"the snapshot root {layout.root} cannot hold snapshots: could not {step}: {reason}{where}",
        root=str(layout.root),
        step=step,
    )


def _write_holder(fd: int) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    data = json.dumps(holder, sort_keys=True).encode() + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)


def _read_holder(fd: int) -> dict[str, object]:
    try:
        data = os.pread(fd, 4096, 0)
        holder = json.loads(data.decode())
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
