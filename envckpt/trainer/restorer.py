"""``Restorer``: restore the newest usable rollout snapshot at startup.

    restorer = Restorer(root, env_checkpoint=env, barrier=barrier)
    report = await restorer.restore(data_plane_path=run_dir / "dataplane.sqlite")
    report.ledger, report.data_plane        # live objects to run with
    report.plan.continued                   # redispatch these first, same instance

Order (rl-recovery.md): pick the newest published snapshot whose manifest and
every file's checksum verify (a corrupt or partial one is refused whole, and
the previous one is tried) -- all before the environment is contacted, so a
refused snapshot leaves no trace in Gym; then restore the data plane, then the
ledger, then ``env.restored(path)`` with ``prepare_for_restart`` and orphan
clearing under a mutation cut inside it. An exception there makes the
environment drop what it restored.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from envckpt.crashpoints import crashpoint
from envckpt.errors import CorruptCheckpoint
from envckpt.interfaces import EnvironmentCheckpoint
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.layout import SnapshotLayout, SnapshotManifest, verify_snapshot
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.ledger_entry import RestartPlan
from envckpt.trainer.snapshotter import DATA_PLANE_NAME, LEDGER_NAME


@dataclass
class RestoreReport:
    """What startup restored (``path`` None: no usable snapshot, a fresh start)."""

    path: Path | None
    ledger: RecoveryLedger
    data_plane: SqliteDataPlane
    plan: RestartPlan | None = None
    manifest: SnapshotManifest | None = None
    refused: list[tuple[str, str]] = field(default_factory=list)
    cleared_rows: int = 0


class Restorer:
    """Finds, validates and restores the newest usable snapshot under ``root``."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        env_checkpoint: EnvironmentCheckpoint,
        barrier: DataPlaneBarrier,
    ) -> None:
        self.layout = SnapshotLayout(root)
        self.env = env_checkpoint
        self.barrier = barrier

    def choose(self) -> tuple[Path | None, SnapshotManifest | None, list[tuple[str, str]]]:
        """The newest snapshot that verifies, and why each newer one was refused."""
        refused: list[tuple[str, str]] = []
        for candidate in self.layout.published():
            try:
                return candidate, verify_snapshot(candidate), refused
            except CorruptCheckpoint as error:
                refused.append((candidate.name, str(error)))
        return None, None, refused

    async def restore(self, *, data_plane_path: str | os.PathLike[str]) -> RestoreReport:
        log = structlog.get_logger("envckpt.restorer")
        debris = self.layout.clean_debris()
        path, manifest, refused = await asyncio.to_thread(self.choose)
        for name, reason in refused:
            log.warning("snapshot refused; trying an older one", snapshot=name, reason=reason)
        if path is None:
            log.info("no usable snapshot; starting fresh", removed_unpublished=debris)
            plane = SqliteDataPlane(data_plane_path)
            return RestoreReport(
                path=None,
                ledger=RecoveryLedger(data_plane=plane),
                data_plane=plane,
                refused=refused,
            )
        plane = SqliteDataPlane.restore_from(path / DATA_PLANE_NAME, data_plane_path)
        try:
            ledger = RecoveryLedger.load(path / LEDGER_NAME, data_plane=plane)
            async with (
                self.env.restored(path) as restored,
                self.barrier.mutation() as cut,
            ):
                plan = ledger.prepare_for_restart(cut, restored)
                cleared = plane.clear_orphans(cut, plan.keep_staging_keys)
        except BaseException:
            plane.close()
            raise
        crashpoint("restore.after")
        log.info(
            "restored",
            snapshot=path.name,
            continued=len(plan.continued),
            abandoned=len(plan.abandoned),
            cleared_rows=cleared,
        )
        return RestoreReport(
            path=path,
            ledger=ledger,
            data_plane=plane,
            plan=plan,
            manifest=manifest,
            refused=refused,
            cleared_rows=cleared,
        )
