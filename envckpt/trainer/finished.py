"""A snapshot root that records its job finished, so a requeue of that job is a no-op.

A scheduler may start a job again after it finished (a requeue, a retried
array task). Restoring the last snapshot then would run its in-flight
rollouts a second time: their tool effects again, their results sealed twice.
So a job records, the moment every rollout is sealed and its results are
durable, that it finished; a start that finds the record does nothing at all:

    record = read_finished(root)       # before the lock, the probe, any write
    if record is not None:
        print(record.line(root))       # "already finished: ... nothing to do"
        return 0                       # no file under the root changed
    ...                                # restore, run every rollout
    record_finished(root, results=results_bytes)   # all sealed, results written

``FINISHED.json`` lives at the root beside ``snapshots/`` and is a
checksummed document (``envckpt.checksummed``): the time, the number of
rollouts and the digest of the results it vouches for. A damaged one refuses
the start (``FinishedRecordDamaged``, a ``StartRefused``: exit 3): the job
cannot tell whether it finished. To run the same job again on purpose, move
the record (or the whole root) aside.
"""

from __future__ import annotations

import datetime
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from envckpt import checksummed
from envckpt.errors import CorruptCheckpoint
from envckpt.fsutil import atomic_write_bytes
from envckpt.trainer.job_errors import StartRefused

FINISHED_NAME = "FINISHED.json"
KIND = "envckpt.finished"
SCHEMA_VERSION = 1
_FIELDS = frozenset({"finished_at", "rollouts", "results_sha256"})
# A real record is about 300 bytes; a start reads no more than this of one.
MAX_FINISHED_BYTES = 64 << 10


class FinishedRecordDamaged(StartRefused):
    """The root's finished record cannot be read; whether the job finished is unknown."""


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """What a root's finished record says."""

    finished_at: str
    rollouts: int
    results_sha256: str

    def line(self, root: str | os.PathLike[str]) -> str:
        """The one line a start prints instead of running."""
        return (
            f"already finished: {Path(root)} records {self.rollouts} rollouts finished at "
            f"{self.finished_at}; nothing to do (move {FINISHED_NAME} aside to run it again)"
        )


def finished_path(root: str | os.PathLike[str]) -> Path:
    return Path(root) / FINISHED_NAME


def record_finished(root: str | os.PathLike[str], *, results: bytes, rollouts: int) -> FinishedJob:
    """Durably record that the job using ``root`` finished ``rollouts`` with ``results``."""
    if rollouts < 0:
        raise ValueError("rollouts must not be negative")
    record = FinishedJob(
        finished_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        rollouts=rollouts,
        results_sha256=hashlib.sha256(results).hexdigest(),
    )
    body = {
        "finished_at": record.finished_at,
        "rollouts": record.rollouts,
        "results_sha256": record.results_sha256,
    }
    data = checksummed.encode(kind=KIND, schema_version=SCHEMA_VERSION, body=body, indent=1)
    atomic_write_bytes(finished_path(root), data)
    return record


def read_finished(root: str | os.PathLike[str]) -> FinishedJob | None:
    """The root's finished record, None when it has none; reads only, creates nothing."""
    path = finished_path(root)
    if not Path(root).is_dir():
        return None  # absent, or a file: the start's own checks say what is wrong
    try:
        # O_NOFOLLOW and a cap: a link or a huge file in its place is damage, not a record.
        data = checksummed.read_capped(path, max_bytes=MAX_FINISHED_BYTES, what=FINISHED_NAME)
    except CorruptCheckpoint as error:
        if not os.path.lexists(path):
            return None
        raise FinishedRecordDamaged(
            f"cannot read {path}: {error}; the job cannot tell whether it finished: "
            f"move it aside to run the job again",
            root=str(root),
        ) from error
    try:
        body = checksummed.decode(
            data, kind=KIND, schema_version=SCHEMA_VERSION, fields=_FIELDS, path=str(path)
        )
        record = FinishedJob(
            finished_at=str(body["finished_at"]),
            rollouts=int(body["rollouts"]),
            results_sha256=str(body["results_sha256"]),
        )
    except (CorruptCheckpoint, TypeError, ValueError) as error:
        raise FinishedRecordDamaged(
            f"{path} is damaged ({error}); the job cannot tell whether it finished: "
            f"move it aside to run the job again",
            root=str(root),
        ) from error
    return record
