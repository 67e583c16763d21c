"""Who the workers of one multi-worker server are: slots in a shared directory.

uvicorn's workers are identical processes, so each one claims a **slot**
(0 to N-1) by locking ``slot-<i>.lock`` in the server's worker directory; the
kernel drops the lock when the process dies, so a restarted worker takes the
slot back. Once it serves its private socket it writes ``slot-<i>.json``
(slot, pid, a random boot id, the socket's path) atomically; siblings read
these to reach it. The directory is made by whoever launches the workers,
owner-only (0700), and handed down in ``ENVCKPT_WORKER_DIR`` with the worker
count in ``ENVCKPT_WORKERS``::

    directory = WorkerDirectory.create()                # the launcher, before uvicorn.run
    directory.environment(workers=4)                    # {ENVCKPT_WORKER_DIR: ..., ...}
    claim = directory.claim(expected=4)                 # in each worker
    directory.register(Registration(claim.slot, os.getpid(), boot, socket_path))
    directory.registrations(expected=4)                 # {slot: Registration}
    owner_slot("rollout-7", 4)                          # which worker holds rollout-7

Rollouts are placed by a stable hash of their id, so every worker (and every
restart of the server with the same worker count) agrees on the owner of
each rollout without asking anyone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from envckpt.fsutil import atomic_write_bytes

WORKER_DIR_ENV = "ENVCKPT_WORKER_DIR"
WORKERS_ENV = "ENVCKPT_WORKERS"
# A slot whose lock a dying worker still holds frees within this; a starting
# worker keeps trying that long before it gives up.
CLAIM_SECONDS = 10.0
# AF_UNIX paths are limited to about 107 bytes: the directory stays short.
_BASE_DIR = "/tmp"


def owner_slot(rollout_id: str, expected: int) -> int:
    """The slot of the worker that holds ``rollout_id`` among ``expected`` workers."""
    digest = hashlib.blake2b(rollout_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % expected


@dataclass(frozen=True, slots=True)
class Registration:
    """One live worker as its siblings see it."""

    slot: int
    pid: int
    boot: str
    socket: str

    def __post_init__(self) -> None:
        if self.slot < 0 or self.pid <= 0 or not self.boot or not self.socket:
            raise ValueError(f"invalid worker registration {self!r}")


class SlotClaim:
    """A held slot: the lock stays held until ``release`` or the process's death."""

    def __init__(self, slot: int, fd: int) -> None:
        self.slot = slot
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the lock


class WorkerDirectory:
    """The coordination directory of one multi-worker server."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, prefix: str = "envckpt-w-") -> WorkerDirectory:
        """A new owner-only directory, short enough for the workers' socket paths."""
        return cls(tempfile.mkdtemp(prefix=prefix, dir=_BASE_DIR))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> tuple[Path, int]:
        """``(directory, worker count)`` a launcher handed down, or ValueError."""
        env = os.environ if environ is None else environ
        path, count = env.get(WORKER_DIR_ENV, ""), env.get(WORKERS_ENV, "")
        if not path or not count.isdigit() or int(count) < 1:
            raise ValueError(f"a worker needs ${WORKER_DIR_ENV} and ${WORKERS_ENV} (>= 1)")
        return Path(path), int(count)

    def environment(self, *, workers: int) -> dict[str, str]:
        """What the workers' environment needs to find this directory."""
        return {WORKER_DIR_ENV: str(self.path), WORKERS_ENV: str(workers)}

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def socket_path(self, slot: int, boot: str) -> str:
        return str(self.path / f"w{slot}-{boot[:8]}.sock")

    # -------------------------------------------------------------- slots

    def claim(self, *, expected: int, within: float = CLAIM_SECONDS) -> SlotClaim:
        """Lock the lowest free slot; ``RuntimeError`` if none frees within ``within`` s."""
        give_up = time.monotonic() + within
        while True:
            for slot in range(expected):
                fd = os.open(self.path / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return SlotClaim(slot, fd)
            if time.monotonic() > give_up:
                raise RuntimeError(f"all {expected} worker slots in {self.path} are taken")
            time.sleep(0.05)

    def register(self, registration: Registration) -> None:
        """Publish a worker (atomically: a sibling never reads half of it)."""
        body = json.dumps(asdict(registration), sort_keys=True).encode()
        atomic_write_bytes(self.path / f"slot-{registration.slot}.json", body)

    def unregister(self, registration: Registration) -> None:
        """Withdraw a worker's registration, if it is still its own."""
        current = self.registrations(expected=registration.slot + 1).get(registration.slot)
        if current == registration:
            with contextlib.suppress(FileNotFoundError):
                (self.path / f"slot-{registration.slot}.json").unlink()

    def registrations(self, *, expected: int) -> dict[int, Registration]:
        """The registered workers by slot (a dead one's stays until its slot is retaken)."""
        found: dict[int, Registration] = {}
        for slot in range(expected):
            try:
                raw = json.loads((self.path / f"slot-{slot}.json").read_bytes())
                registration = Registration(**raw)
            except (OSError, ValueError, TypeError):
                continue
            if registration.slot == slot:
                found[slot] = registration
        return found
