"""A trainer's startup in one call: claim the root, restore (or start fresh), build the job.

    staging = PendingStaging()            # hand it to the policy model (sink) first
    started = await start_trainer(tasks, facade=facade, backend=backend,
                                  barrier=barrier, root=root,
                                  data_plane_path=run_dir / "live.sqlite",
                                  staging=staging)
    try:
        report = await started.job.run(snapshot_every=2.0)
    finally:
        started.close()                   # data plane, root lock

The order is the one rl-recovery.md fixes, with the root claimed first:

1. take the root's lock (``SnapshotRootLocked`` names the other trainer) and
   prove the root can take snapshots (``SnapshotRootUnusable``), before
   anything is cleaned, restored or run;
2. discover and check the deployment;
3. restore the newest usable snapshot (every trainer-side file checked
   first, results included; see ``restorer``), or start fresh: on a root
   that never held a snapshot, or, with ``allow_fresh_start``, on one whose
   every snapshot was refused (without it: ``AllSnapshotsRefused``, exit 3);
4. attach the restored ledger as the facade's inventory and as the
   destination of token rows; build the snapshotter and the rollout loop.

A trainer process's command line takes ``--allow-fresh-start``
(``add_start_arguments``) and passes ``args.allow_fresh_start`` on; a job
script that accepts losing every rollout of a root whose snapshots are all
refused passes it on every start.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envckpt.clock import Clock
from envckpt.facade.checkpoint import GymEnvironmentCheckpoint
from envckpt.telemetry.observers import TelemetryObserver
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.job import RolloutBackend, RolloutJob, RolloutTask, StagingRecorder
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.preemption import JobSignals
from envckpt.trainer.restorer import Restorer, RestoreReport
from envckpt.trainer.results import RESULTS_SIDECAR, ResultStore, read_results_sidecar
from envckpt.trainer.root_guard import RootLock, probe_root
from envckpt.trainer.snapshot_loop import SnapshotPolicy
from envckpt.trainer.snapshotter import RolloutSnapshotter, SnapshotResult


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
    lock: RootLock

    def close(self) -> None:
        """Close the data plane and release the snapshot root."""
        self.report.data_plane.close()
        self.lock.release()


def add_start_arguments(parser: argparse.ArgumentParser) -> None:
    """A trainer process's startup flags: ``--allow-fresh-start``."""
    parser.add_argument(
        "--allow-fresh-start",
        action="store_true",
        help="when every snapshot of the root is refused, start from scratch instead of "
        "exiting 3 (the refused snapshots are moved to refused/)",
    )


def claim_root(root: str | os.PathLike[str]) -> RootLock:
    """Step 1: the root's lock, and a probe proving it can take snapshots."""
    lock = RootLock.acquire(root)
    try:
        probe_root(SnapshotLayout(root))
    except BaseException:
        lock.release()
        raise
    return lock


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
    snapshot_policy: SnapshotPolicy | None = None,
    signals: JobSignals | None = None,
    on_final_snapshot: Callable[[SnapshotResult], Awaitable[None]] | None = None,
    allow_fresh_start: bool = False,
    observers: Iterable[TelemetryObserver] = (),
) -> StartedTrainer:
    """Steps 1-4 above; ``StartRefused`` or ``RestoreFailed`` when the job must not run.

    ``allow_fresh_start``: start from scratch when every snapshot is refused
    (else ``AllSnapshotsRefused``). ``observers`` hear the restore's and every
    snapshot's telemetry record (``envckpt.telemetry``: a Prometheus exporter, spans).
    """
    observers = tuple(observers)
    lock = claim_root(root)
    try:
        await facade.check_startup()
        restorer = Restorer(
            root,
            env_checkpoint=facade,
            barrier=barrier,
            sidecar_readers={RESULTS_SIDECAR: read_results_sidecar},
            lock=lock,
            allow_fresh_start=allow_fresh_start,
            observers=observers,
        )
        report = await restorer.restore(data_plane_path=data_plane_path)
    except BaseException:
        lock.release()
        raise
    facade.inventory = report.ledger
    staging.target = StagingRecorder(
        barrier=barrier, ledger=report.ledger, data_plane=report.data_plane
    )
    results = report.sidecars.get(RESULTS_SIDECAR, ResultStore())
    assert isinstance(results, ResultStore)
    snapshotter = RolloutSnapshotter(
        root,
        env_checkpoint=facade,
        barrier=barrier,
        ledger=report.ledger,
        data_plane=report.data_plane,
        keep_latest_k=keep_latest_k,
        sidecars={RESULTS_SIDECAR: results.to_bytes},
        clock=clock,
        lock=lock,
        observers=observers,
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
        snapshot_policy=snapshot_policy,
        signals=signals,
        on_final_snapshot=on_final_snapshot,
    )
    return StartedTrainer(report=report, results=results, job=job, lock=lock)
