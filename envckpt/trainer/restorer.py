"""``Restorer``: restore the newest usable rollout snapshot at startup, or refuse clearly.

    restorer = Restorer(root, env_checkpoint=env, barrier=barrier,
                        sidecar_readers={RESULTS_SIDECAR: read_results_sidecar})
    report = await restorer.restore(data_plane_path=run_dir / "dataplane.sqlite")
    report.ledger, report.data_plane        # live objects to run with
    report.plan.continued                   # redispatch these first, same instance
    report.considered                       # every snapshot looked at: chosen, or refused and why

Order, and what each failure does:

1. Take the root lock (``RootLock``), then remove the debris crashes left
   (``.tmp``, ``.trash``): never another trainer's in-flight files, and only
   envckpt's own entries (``root_entries``; the rest is left and logged).
2. For each published snapshot, newest first: check every trainer-side file
   (``check_candidate``: manifest, digests, ledger, sidecars, Gym manifest
   against the ledger, data plane). A content error refuses the snapshot
   whole, and the next older one is tried. Nothing has been sent to the
   environment yet. Once one is chosen, the refused ones are moved to
   ``refused/`` with their reasons (those whose own manifest does not
   verify are not provably envckpt's: left in place, reported).
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
5. No usable snapshot: when the root holds none at all, a fresh start with
   an empty data plane and ledger. When it holds some and every one was
   refused (or none is published but ``refused/`` holds some an earlier
   start refused), ``AllSnapshotsRefused`` (exit 3), one line per snapshot
   and why, nothing moved: starting from scratch would drop every rollout
   they hold without a word. ``allow_fresh_start=True``
   (``--allow-fresh-start``) starts fresh anyway, the refused snapshots
   moved to ``refused/`` and each logged.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
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
from envckpt.trainer.job_errors import (
    AllSnapshotsRefused,
    RestoreFailed,
    SnapshotRefusedByEnvironment,
)
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.ledger_entry import RestartPlan
from envckpt.trainer.restore_telemetry import RestoreClock
from envckpt.trainer.root_entries import Published, report_foreign
from envckpt.trainer.root_guard import RootLock
from envckpt.trainer.snapshot_manifest import SnapshotManifest


class Outcome(StrEnum):
    """What the restore made of one snapshot it looked at."""

    CHOSEN = "chosen"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Considered:
    """One snapshot the restore looked at: ``chosen``, or ``refused`` with the reason."""

    snapshot: str
    outcome: Outcome
    reason: str = ""

    def __post_init__(self) -> None:
        # As SnapshotEntry: the text ("refused") is held as the named value.
        object.__setattr__(self, "outcome", Outcome(self.outcome))


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
        return [(c.snapshot, c.reason) for c in self.considered if c.outcome is Outcome.REFUSED]


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
        allow_fresh_start: bool = False,
        observers: Iterable[TelemetryObserver] = (),
    ) -> None:
        self.layout = SnapshotLayout(root)
        self.env = env_checkpoint
        self.barrier = barrier
        self.sidecar_readers = dict(sidecar_readers or {})
        self.lock = lock
        # Whether a root whose every snapshot is refused may start from scratch (step 5).
        self.allow_fresh_start = allow_fresh_start
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
        debris = len((await asyncio.to_thread(self.layout.clean_debris)).removed)
        listing = await asyncio.to_thread(self.layout.scan)
        report_foreign(listing.foreign, during="restore")
        considered: list[Considered] = []
        refused: list[tuple[Published, str]] = []
        for snapshot in listing.snapshots:
            try:
                candidate = await asyncio.to_thread(
                    check_candidate,
                    snapshot.path,
                    data_plane_path=data_plane_path,
                    sidecar_readers=self.sidecar_readers,
                )
            except CorruptCheckpoint as error:
                considered.append(Considered(snapshot.name, Outcome.REFUSED, str(error)))
                refused.append((snapshot, str(error)))
                log.warning(
                    "snapshot refused; trying an older one",
                    snapshot=snapshot.name,
                    reason=str(error),
                )
                continue
            crashpoint("restore.validated")
            considered.append(Considered(snapshot.name, Outcome.CHOSEN))
            await self._set_aside(refused)
            clock.checked()
            report = await self._restore(candidate, considered, clock)
            report.debris_removed = debris
            return report
        await self._refuse_or_start_fresh(refused)
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

    async def _refuse_or_start_fresh(self, refused: list[tuple[Published, str]]) -> None:
        """Step 5: ``AllSnapshotsRefused``, unless the root held none or fresh starts are on."""
        earlier = [] if refused else await asyncio.to_thread(self.layout.refused_entries)
        if not refused and not earlier:
            return  # a new root: nothing would be lost
        if not self.allow_fresh_start:
            raise _all_refused(self.layout, [(p.name, why) for p, why in refused], earlier)
        logs.get_logger("envckpt.restorer").warning(
            "every snapshot refused; starting from scratch as allowed (allow_fresh_start)",
            refused=[p.name for p, _ in refused] or [name for name, _ in earlier],
        )
        await self._set_aside(refused)

    async def _set_aside(self, refused: list[tuple[Published, str]]) -> None:
        """Quarantine the refused snapshots envckpt made; report (and leave) the others."""
        for snapshot, reason in refused:
            if snapshot.owned:
                await asyncio.to_thread(self.layout.quarantine, snapshot.path, reason)
            else:
                report_foreign([snapshot.as_foreign()], during="restore")

    async def _restore(
        self, candidate: CheckedCandidate, considered: list[Considered], clock: RestoreClock
    ) -> RestoreReport:
        path, ledger = candidate.path, candidate.ledger
        plane = candidate.staged_plane.install()
        ledger.attach_data_plane(plane)
        refused = sum(1 for c in considered if c.outcome is Outcome.REFUSED)
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
            refused=[c.snapshot for c in considered if c.outcome is Outcome.REFUSED],
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


def _all_refused(
    layout: SnapshotLayout, refused: list[tuple[str, str]], earlier: list[tuple[str, str]]
) -> AllSnapshotsRefused:
    """The refusal of step 5: a summary line, then one line per refused snapshot."""
    advice = (
        "fix or remove them, or start with --allow-fresh-start (allow_fresh_start=True) "
        "to begin from scratch"
    )
    if refused:
        head = (
            f"every snapshot in {layout.snapshots} was refused, so this start would drop the "
            f"rollouts they hold and begin from scratch; nothing was moved; {advice}:"
        )
        lines = [f"  refused {name}: {_one_line(why)}" for name, why in refused]
    else:
        head = (
            f"no snapshot is published in {layout.snapshots}, and {layout.refused} holds "
            f"{len(earlier)} that earlier starts refused; {advice}:"
        )
        lines = [f"  refused earlier {name}: {_one_line(why)}" for name, why in earlier]
    return AllSnapshotsRefused(
        "\n".join([head, *lines]), root=str(layout.root), refused=tuple(refused or earlier)
    )


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "no reason recorded"
