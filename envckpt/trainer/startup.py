"""A trainer's startup in one call: restore (or start fresh), then build the job.

    staging = PendingStaging()            # hand it to the policy model (sink) first
    started = await start_trainer(tasks, facade=facade, backend=backend,
                                  barrier=barrier, root=root,
                                  data_plane_path=run_dir / "live.sqlite",
                                  staging=staging)
    await started.job.run(snapshot_every=2.0)

The order is the one rl-recovery.md fixes: discover and check the
deployment, restore the newest usable snapshot (data plane, ledger, then the
environment), attach the restored ledger as the facade's inventory and as
the destination of token rows, reload the results sidecar, then build the
snapshotter and the rollout loop on top.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt.clock import Clock
from envckpt.facade.checkpoint import GymEnvironmentCheckpoint
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.job import RolloutBackend, RolloutJob, RolloutTask, StagingRecorder
from envckpt.trainer.restorer import Restorer, RestoreReport
from envckpt.trainer.results import RESULTS_SIDECAR, ResultStore
from envckpt.trainer.snapshotter import SIDECAR_DIR, RolloutSnapshotter


class PendingStaging:
    """A staging sink whose ledger and data plane are attached after restore.

    Gym servers need their sink when they start, but the ledger that rows
    belong to exists only once the snapshot to restore from was chosen.
    """

    def __init__(self) -> None:
        self.target: StagingRecorder | None = None

    async def stage(self, capture_key: str, staging_key: str, payload: str) -> None:
        if self.target is None:
            raise RuntimeError("a token row arrived before the trainer restored its state")
        await self.target.stage(capture_key, staging_key, payload)


@dataclass
class StartedTrainer:
    report: RestoreReport
    results: ResultStore
    job: RolloutJob


async def start_trainer(
    tasks: Sequence[RolloutTask],
    *,
    facade: GymEnvironmentCheckpoint,
    backend: RolloutBackend,
    barrier: DataPlaneBarrier,
    root: str | os.PathLike[str],
    data_plane_path: str | os.PathLike[str],
    staging: PendingStaging,
    keep_latest_k: int = 3,
    max_in_flight_per_instance: int | None = None,
    clock: Clock | None = None,
    on_progress: Callable[[str, Mapping[str, Any]], None] | None = None,
) -> StartedTrainer:
    """Restore the newest usable snapshot under ``root`` and build the rollout job."""
    await facade.check_startup()
    report = await Restorer(root, env_checkpoint=facade, barrier=barrier).restore(
        data_plane_path=data_plane_path
    )
    facade.inventory = report.ledger
    staging.target = StagingRecorder(
        barrier=barrier, ledger=report.ledger, data_plane=report.data_plane
    )
    results = (
        ResultStore.from_bytes((Path(report.path) / SIDECAR_DIR / RESULTS_SIDECAR).read_bytes())
        if report.path is not None
        else ResultStore()
    )
    snapshotter = RolloutSnapshotter(
        root,
        env_checkpoint=facade,
        barrier=barrier,
        ledger=report.ledger,
        data_plane=report.data_plane,
        keep_latest_k=keep_latest_k,
        sidecars={RESULTS_SIDECAR: results.to_bytes},
        clock=clock,
    )
    job = RolloutJob(
        tasks,
        backend=backend,
        ledger=report.ledger,
        data_plane=report.data_plane,
        barrier=barrier,
        snapshotter=snapshotter,
        results=results,
        clock=clock,
        on_progress=on_progress,
        max_in_flight_per_instance=max_in_flight_per_instance,
    )
    return StartedTrainer(report=report, results=results, job=job)
