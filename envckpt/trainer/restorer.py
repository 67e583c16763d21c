"""``Restorer``: restore the newest usable rollout snapshot at startup, or refuse clearly.

    restorer = Restorer(root, env_checkpoint=env, barrier=barrier,
                        sidecar_readers={RESULTS_SIDECAR: read_results_sidecar})
    report = await restorer.restore(data_plane_path=run_dir / "dataplane.sqlite")
    report.ledger, report.data_plane        # live objects to run with
    report.plan.continued                   # redispatch these first, same instance
    report.considered                       # every snapshot looked at: chosen, or refused and why

Order, and what each failure does:

1. Take the root lock (``RootLock``), then remove the debris crashes left
   (``.tmp``, ``.trash``): never another trainer's in-flight files.
2. For each published snapshot, newest first: check every trainer-side file
   (``check_candidate``: manifest, digests, ledger, sidecars, Gym manifest
   against the ledger, data plane). A content error refuses the snapshot
   whole: it is moved to ``refused/`` with its reason, and the next older
   one is tried. Nothing has been sent to the environment yet.
3. Install the chosen data plane copy; ``env.restored(path)``; inside it,
   under a mutation cut, ``prepare_for_restart`` and orphan clearing. An
   exception there makes the environment drop what it restored (abandon).
4. A failed environment restore raises ``RestoreFailed`` whose ``action``
   says what the operator must do next. When Gym refused the snapshot's
   content (``CorruptCheckpoint``) the snapshot is quarantined too and the
   error is ``SnapshotRefusedByEnvironment``: the Gym processes now hold a
   dropped restore and cannot take another, so the next start (with fresh
   Gym servers) restores the previous snapshot. Never a crash loop: every
   start either lands or moves one bad snapshot aside.
5. No snapshot left: a fresh start with an empty data plane and ledger.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envckpt import logs
from envckpt.crashpoints import crashpoint
from envckpt.errors import (
    CorruptCheckpoint,
    DeadlineExceeded,
    GymCheckpointUnavailable,
    IllegalTransition,
    IncompatibleCheckpoint,
)
from envckpt.interfaces import EnvironmentCheckpoint, RestoredEnvironmentRollouts
from envckpt.telemetry.observers import TelemetryObserver, TelemetryRecorder
from envckpt.telemetry.restore_record import RestoreTelemetry
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.candidate import CheckedCandidate, SidecarReader, check_candidate
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.job_errors import RestoreFailed, SnapshotRefusedByEnvironment
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.ledger_entry import RestartPlan
from envckpt.trainer.restore_telemetry import RestoreClock
from envckpt.trainer.root_guard import RootLock
from envckpt.trainer.snapshot_manifest import SnapshotManifest

CHOSEN = "chosen"
REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Considered:
    """One snapshot the restore looked at: ``chosen``, or ``refused`` with the reason."""

    snapshot: str
    outcome: str
    reason: str = ""


@dataclass
class RestoreReport:
    """What startup restored (``path`` None: no usable snapshot, a fresh start)."""

    path: Path | None
    ledger: RecoveryLedger
    data_plane: SqliteDataPlane
    plan: RestartPlan | None = None
    manifest: SnapshotManifest | None = None
    considered: list[Considered] = field(default_factory=list)
    sidecars: dict[str, object] = field(default_factory=dict)
    cleared_rows: int = 0
    debris_removed: int = 0
    lock: RootLock | None = None
    # The restore's record (``envckpt.telemetry``); ``metrics`` are its scalars.
    telemetry: RestoreTelemetry | None = None

    @property
    def metrics(self) -> dict[str, float]:
        """restore_* figures under their stable names (``envckpt.telemetry.names``)."""
        return {} if self.telemetry is None else self.telemetry.metrics()

    @property
    def refused(self) -> list[tuple[str, str]]:
        """(snapshot, reason) of every refused snapshot, newest first."""
        return [(c.snapshot, c.reason) for c in self.considered if c.outcome == REFUSED]


class Restorer:
    """Finds, checks and restores the newest usable snapshot under ``root``."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        env_checkpoint: EnvironmentCheckpoint,
        barrier: DataPlaneBarrier,
        sidecar_readers: Mapping[str, SidecarReader] | None = None,
        lock: RootLock | None = None,
        observers: Iterable[TelemetryObserver] = (),
    ) -> None:
        self.layout = SnapshotLayout(root)
        self.env = env_checkpoint
        self.barrier = barrier
        self.sidecar_readers = dict(sidecar_readers or {})
        self.lock = lock
        # Every restore's record: <root>/telemetry.jsonl, then each observer.
        self.telemetry = TelemetryRecorder(self.layout.root, observers)

    async def restore(self, *, data_plane_path: str | os.PathLike[str]) -> RestoreReport:
        lock = self.lock or RootLock.acquire(self.layout.root)
        try:
            report = await self._restore_newest(Path(data_plane_path))
        except BaseException:
            if self.lock is None:
                lock.release()  # the hold this call took; the caller's stays
            raise
        report.lock = lock
        return report

    async def _restore_newest(self, data_plane_path: Path) -> RestoreReport:
        log = logs.get_logger("envckpt.restorer")
        clock = RestoreClock()
        debris = await asyncio.to_thread(self.layout.clean_debris)
        considered: list[Considered] = []
        for path in self.layout.published():
            try:
                candidate = await asyncio.to_thread(
                    check_candidate,
                    path,
                    data_plane_path=data_plane_path,
                    sidecar_readers=self.sidecar_readers,
                )
            except CorruptCheckpoint as error:
                considered.append(Considered(path.name, REFUSED, str(error)))
                log.warning(
                    "snapshot refused; trying an older one", snapshot=path.name, reason=str(error)
                )
                await asyncio.to_thread(self.layout.quarantine, path, str(error))
                continue
            crashpoint("restore.validated")
            considered.append(Considered(path.name, CHOSEN))
            clock.checked()
            report = await self._restore(candidate, considered, clock)
            report.debris_removed = debris
            return report
        log.info(
            "no usable snapshot; starting fresh", removed_debris=debris, refused=len(considered)
        )
        plane = SqliteDataPlane.fresh(data_plane_path)
        clock.checked()
        record = clock.fresh_record(considered=len(considered), refused=len(considered))
        self.telemetry.restore_ended(record)
        return RestoreReport(
            path=None,
            ledger=RecoveryLedger(data_plane=plane),
            data_plane=plane,
            considered=considered,
            debris_removed=debris,
            telemetry=record,
        )

    async def _restore(
        self, candidate: CheckedCandidate, considered: list[Considered], clock: RestoreClock
    ) -> RestoreReport:
        path, ledger = candidate.path, candidate.ledger
        plane = candidate.staged_plane.install()
        ledger.attach_data_plane(plane)
        refused = sum(1 for c in considered if c.outcome == REFUSED)
        restored: RestoredEnvironmentRollouts | None = None
        try:
            async with self.env.restored(path) as restored:
                clock.environment_restored()
                async with self.barrier.mutation() as cut:
                    crashpoint("restore.environment_restored")
                    plan = ledger.prepare_for_restart(cut, restored)
                    cleared = plane.clear_orphans(cut, plan.keep_staging_keys)
                clock.ledger_done()
            clock.resumed()
        except Exception as error:
            plane.close()
            self.telemetry.restore_ended(
                clock.failed_record(
                    snapshot=path.name, considered=len(considered), refused=refused, error=error
                )
            )
            raise await self._failed(path, error) from error
        except BaseException:
            plane.close()
            raise
        crashpoint("restore.after")
        record = clock.restored_record(
            snapshot=path.name,
            considered=len(considered),
            refused=refused,
            continued=plan.continued,
            abandoned=plan.abandoned,
            cleared_rows=cleared,
            restored=restored,
        )
        self.telemetry.restore_ended(record)
        logs.get_logger("envckpt.restorer").info(
            "restored",
            snapshot=path.name,
            continued=len(plan.continued),
            abandoned=len(plan.abandoned),
            cleared_rows=cleared,
            refused=[c.snapshot for c in considered if c.outcome == REFUSED],
        )
        return RestoreReport(
            path=path,
            ledger=ledger,
            data_plane=plane,
            plan=plan,
            manifest=candidate.manifest,
            considered=considered,
            sidecars=candidate.sidecars,
            cleared_rows=cleared,
            telemetry=record,
        )

    async def _failed(self, path: Path, error: Exception) -> RestoreFailed:
        """The operator-facing error for a failed environment restore of ``path``."""
        reason = f"{type(error).__name__}: {error}"
        failure: RestoreFailed
        if isinstance(error, CorruptCheckpoint):
            moved = await asyncio.to_thread(self.layout.quarantine, path, reason)
            failure = SnapshotRefusedByEnvironment(
                f"Gym refused the content of snapshot {path.name}; it was moved to {moved}",
                snapshot=path.name,
                reason=reason,
                action="restart the Gym servers and the trainer: the next start restores the "
                "previous snapshot (Gym processes that saw a restore cannot take another)",
            )
        else:
            failure = RestoreFailed(
                f"restoring snapshot {path.name} into the environment failed",
                snapshot=path.name,
                reason=reason,
                action=_action_for(error, path),
            )
        logs.get_logger("envckpt.restorer").error(
            "environment restore failed",
            snapshot=path.name,
            reason=reason,
            action=failure.action,
        )
        return failure


def _action_for(error: Exception, path: Path) -> str:
    if isinstance(error, IncompatibleCheckpoint):
        return (
            "start the job with the Gym deployment the snapshot was taken with (same instances "
            f"and participants), or move {path} out of snapshots/ to restore an older one"
        )
    if isinstance(error, IllegalTransition):
        return "restart the Gym servers: a restore needs fresh Gym processes; the snapshot was kept"
    if isinstance(error, GymCheckpointUnavailable | DeadlineExceeded):
        return (
            "check that every Gym server is up and reachable, then restart the job; "
            "the snapshot was kept"
        )
    return "read the reason above; the snapshot was kept, so a restart tries it again"
