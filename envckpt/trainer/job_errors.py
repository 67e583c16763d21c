"""The trainer's own errors, grouped by what the operator can do, and the job's exit codes.

* ``StartRefused`` (``SnapshotRootUnusable``, ``SnapshotRootLocked``,
  ``SnapshotRootUnsafe``, ``AllSnapshotsRefused``): the job must not start as
  configured. Nothing was changed; fix what the message names (permissions,
  disk, a second trainer, a symbolic link inside the root, snapshots that
  cannot be restored) and start again. ``AllSnapshotsRefused`` is the one a
  start may override: ``allow_fresh_start`` (``--allow-fresh-start``) starts
  from scratch instead.
* ``SnapshotNotOwned``: a delete was asked of an entry envckpt cannot prove
  it made (no verifying ``MANIFEST.json``); it was left as it is.
* ``SnapshotsFailing``: the job stopped because it could no longer save its
  rollouts (``max_consecutive_snapshot_failures`` in a row). Fix the cause
  and restart: the job restores the last published snapshot.
* ``RestoreFailed``: the environment restore of a valid snapshot failed;
  ``action`` says what to do next. ``SnapshotRefusedByEnvironment``: Gym
  refused the snapshot's content. It was moved to ``refused/``; restart the
  Gym servers (they hold a dropped restore) and the trainer, and the next
  start restores the previous snapshot.

Each error pickles with its fields (``EnvckptError``). ``JobExit`` is the
exit code a trainer process reports for each outcome (``exit_code_for``);
``envckpt.demo.trainer_process`` uses it, and a job script may too.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

from envckpt.errors import EnvckptError


class StartRefused(EnvckptError, RuntimeError):
    """The trainer refused to start; nothing was changed."""

    _fields: ClassVar[tuple[str, ...]] = ("message", "root")

    def __init__(self, message: str, *, root: str = "") -> None:
        super().__init__(message)
        self.root = root


class SnapshotRootUnusable(StartRefused):
    """The snapshot root cannot hold snapshots: ``step`` of the probe failed."""

    _fields: ClassVar[tuple[str, ...]] = ("message", "root", "step")

    def __init__(self, message: str, *, root: str = "", step: str = "") -> None:
        super().__init__(message, root=root)
        self.step = step


class SnapshotRootLocked(StartRefused):
    """Another trainer holds the snapshot root: ``pid`` on ``host`` since ``since``."""

    _fields: ClassVar[tuple[str, ...]] = ("message", "root", "pid", "host", "since")

    def __init__(
        self, message: str, *, root: str = "", pid: int = 0, host: str = "", since: str = ""
    ) -> None:
        super().__init__(message, root=root)
        self.pid = pid
        self.host = host
        self.since = since


class SnapshotRootUnsafe(StartRefused):
    """``path``, a directory or file of the snapshot root, is a symbolic link.

    envckpt never follows one there: through it, a publish, prune or cleanup
    would write or delete outside the root.
    """

    _fields: ClassVar[tuple[str, ...]] = ("message", "root", "path")

    def __init__(self, message: str, *, root: str = "", path: str = "") -> None:
        super().__init__(message, root=root)
        self.path = path


class AllSnapshotsRefused(StartRefused):
    """The root holds snapshots and a start refused every one; ``refused``: (id, why) pairs.

    Starting from scratch would silently drop every rollout they hold, so it
    takes ``allow_fresh_start``. Nothing was moved.
    """

    _fields: ClassVar[tuple[str, ...]] = ("message", "root", "refused")

    def __init__(
        self, message: str, *, root: str = "", refused: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message, root=root)
        self.refused = tuple((str(name), str(why)) for name, why in refused)


class SnapshotNotOwned(EnvckptError, RuntimeError):
    """``path`` is not a snapshot envckpt can prove it published (``why``): left alone."""

    _fields: ClassVar[tuple[str, ...]] = ("message", "path", "why")

    def __init__(self, message: str, *, path: str = "", why: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.why = why


class SnapshotsFailing(EnvckptError, RuntimeError):
    """``consecutive`` snapshots in a row failed; the last with ``last_reason``."""

    _fields: ClassVar[tuple[str, ...]] = ("message", "consecutive", "last_reason")

    def __init__(self, message: str, *, consecutive: int = 0, last_reason: str = "") -> None:
        super().__init__(message)
        self.consecutive = consecutive
        self.last_reason = last_reason


class RestoreFailed(EnvckptError, RuntimeError):
    """Restoring ``snapshot`` failed with ``reason``; ``action`` is the operator's next step."""

    _fields: ClassVar[tuple[str, ...]] = ("message", "snapshot", "reason", "action")

    def __init__(
        self, message: str, *, snapshot: str = "", reason: str = "", action: str = ""
    ) -> None:
        super().__init__(message)
        self.snapshot = snapshot
        self.reason = reason
        self.action = action


class SnapshotRefusedByEnvironment(RestoreFailed):
    """Gym refused the snapshot's content; it was quarantined, and a restart uses the previous."""


class JobExit(IntEnum):
    """Exit codes of a trainer process (1 stays "unexpected error", 2 "bad arguments")."""

    FINISHED = 0
    START_REFUSED = 3
    SNAPSHOTS_FAILING = 4
    RESTORE_FAILED = 5
    # Preempted (SIGTERM): the final snapshot was published; a restart continues from it.
    PREEMPTED = 75
    # Preempted, but the final snapshot did not complete (second SIGTERM, the
    # grace deadline, or a failure): a restart continues from the one before.
    PREEMPTED_UNSAVED = 76


def exit_code_for(error: BaseException) -> JobExit | None:
    """The documented exit code for one of the errors above, else None (unexpected)."""
    if isinstance(error, StartRefused):
        return JobExit.START_REFUSED
    if isinstance(error, SnapshotsFailing):
        return JobExit.SNAPSHOTS_FAILING
    if isinstance(error, RestoreFailed):
        return JobExit.RESTORE_FAILED
    return None
