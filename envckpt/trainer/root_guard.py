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

The probe does what publishing a snapshot does, on a throwaway directory:
create a file under ``.tmp``, fsync it, rename the directory into
``snapshots/``, delete it. A read-only root, a full disk or a ``snapshots``
that is a file fail here, before any rollout runs, instead of at the first
snapshot.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import socket
import uuid
from pathlib import Path

from envckpt.fsutil import fsync_dir
from envckpt.trainer.job_errors import SnapshotRootLocked, SnapshotRootUnusable
from envckpt.trainer.layout import SnapshotLayout

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
            fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
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
    """Create, fsync, rename and delete a probe as publishing would; ``SnapshotRootUnusable``."""
    name = f".probe-{uuid.uuid4().hex[:12]}"
    staged = layout.temporary / name
    published = layout.snapshots / name
    step = "create a directory under .tmp"
    try:
        staged.mkdir(parents=True)
        step = "write and fsync a file"
        with open(staged / "probe", "wb") as stream:
            stream.write(b"envckpt probe\n")
            stream.flush()
            os.fsync(stream.fileno())
        fsync_dir(staged)
        step = "create snapshots/"
        layout.snapshots.mkdir(parents=True, exist_ok=True)
        step = "rename into snapshots/"
        os.rename(staged, published)
        fsync_dir(layout.snapshots)
        step = "delete the probe"
        shutil.rmtree(published)
        fsync_dir(layout.snapshots)
    except OSError as error:
        shutil.rmtree(staged, ignore_errors=True)
        shutil.rmtree(published, ignore_errors=True)
        raise _unusable(layout, step, error) from error


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
