"""The rollout loop of a training job: dispatch, collect, snapshot, and resume after a crash.

    job = RolloutJob(tasks, backend=backend, ledger=ledger, data_plane=plane,
                     barrier=barrier, snapshotter=snapshotter, results=results)
    report = await job.run(snapshot_every=2.0)

Every ledger change happens in a data-plane mutation section, never while a
remote call is in flight. Restored rollouts (``ledger.redispatch_order()``)
are sent first, each back to the instance that holds it. A rollout refused
as a stale attempt is failed and re-minted as attempt + 1 on the same
instance; the next snapshot retires the old attempt everywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from envckpt.clock import Clock, SystemClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError, ProtocolViolation
from envckpt.machines.tables import LedgerStatus
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.dispatch_gate import DispatchGate
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.results import ResultStore
from envckpt.trainer.snapshotter import RolloutSnapshotter, SnapshotResult


@dataclass(frozen=True, slots=True)
class RolloutTask:
    """One rollout the job must finish: its id, its instance and its task."""

    rollout_id: str
    instance_id: str
    task: Mapping[str, Any]


class RolloutBackend(Protocol):
    """Runs one rollout attempt on a Gym instance to its end."""

    async def run(
        self, instance_id: str, episode: EnvironmentEpisode, task: Mapping[str, Any]
    ) -> dict[str, Any]: ...


@dataclass
class JobReport:
    finished: int = 0
    restarted_attempts: int = 0
    snapshots: list[SnapshotResult] = field(default_factory=list)
    snapshot_failures: list[str] = field(default_factory=list)


class StagingRecorder:
    """Where the policy model's token rows land: data plane + ledger, under a cut.

    Stands in for TransferQueue's put: the model calls it while it generates.
    """

    def __init__(
        self, *, barrier: DataPlaneBarrier, ledger: RecoveryLedger, data_plane: SqliteDataPlane
    ) -> None:
        self.barrier = barrier
        self.ledger = ledger
        self.data_plane = data_plane

    async def stage(self, capture_key: str, staging_key: str, payload: str) -> None:
        episode = EnvironmentEpisode.from_capture_key(capture_key)
        async with self.barrier.mutation() as cut:
            entry = self.ledger.entry(episode.rollout_id)
            if entry.attempt != episode.attempt:
                raise ParticipantError(
                    "stale_attempt", f"{capture_key} is not the ledger's current attempt"
                )
            self.data_plane.put(cut, staging_key, capture_key, payload.encode())
            self.ledger.add_staging_keys(cut, episode.rollout_id, [staging_key])


class RolloutJob:
    """Drives every task to a sealed result, taking snapshots on a timer."""

    def __init__(
        self,
        tasks: Sequence[RolloutTask],
        *,
        backend: RolloutBackend,
        ledger: RecoveryLedger,
        data_plane: SqliteDataPlane,
        barrier: DataPlaneBarrier,
        snapshotter: RolloutSnapshotter,
        results: ResultStore,
        gate: DispatchGate | None = None,
        clock: Clock | None = None,
        on_progress: Callable[[str, Mapping[str, Any]], None] | None = None,
        max_in_flight_per_instance: int | None = None,
    ) -> None:
        self.tasks = {task.rollout_id: task for task in tasks}
        self.backend = backend
        self.ledger = ledger
        self.data_plane = data_plane
        self.barrier = barrier
        self.snapshotter = snapshotter
        self.results = results
        self.gate = gate or snapshotter.dispatch
        self.clock = clock or SystemClock()
        self.report = JobReport()
        # Like a real trainer's per-actor concurrency limit; waiting rollouts
        # stay reserved (not dispatched), so snapshots do not wait for them.
        self._slots: dict[str, asyncio.Semaphore] = {
            task.instance_id: asyncio.Semaphore(max_in_flight_per_instance)
            for task in tasks
            if max_in_flight_per_instance
        }
        self.on_progress = on_progress or (lambda event, fields: None)

    async def run(self, *, snapshot_every: float | None = None) -> JobReport:
        """Finish every task; snapshot every ``snapshot_every`` seconds meanwhile."""
        await self._reserve_new()
        order = [entry.rollout_id for entry in self.ledger.redispatch_order()]
        order += [rid for rid in self.tasks if rid not in order and rid not in self.results]
        rollouts = [asyncio.create_task(self._drive(rid), name=f"rollout {rid}") for rid in order]
        finished = asyncio.Event()
        snapshots = (
            asyncio.create_task(self._snapshot_forever(snapshot_every, finished))
            if snapshot_every
            else None
        )
        try:
            await asyncio.gather(*rollouts)
        finally:
            for task in rollouts:
                task.cancel()
            finished.set()
            if snapshots is not None:
                # A snapshot in progress is let finish (cancelling it mid-way
                # would leave work for the next start); only the wait stops.
                await asyncio.gather(snapshots, return_exceptions=True)
        return self.report

    async def snapshot_once(self) -> SnapshotResult | None:
        """Take one snapshot; a retryable failure is recorded and returns None."""
        try:
            result = await self.snapshotter.take()
        except Exception as error:
            if not self.snapshotter.env.is_unavailable(error):
                raise
            self.report.snapshot_failures.append(f"{type(error).__name__}: {error}")
            self.on_progress("snapshot_failed", {"error": str(error)})
            return None
        self.report.snapshots.append(result)
        self.on_progress("snapshot", {"result": result})
        return result

    async def _snapshot_forever(self, every: float, finished: asyncio.Event) -> None:
        while not finished.is_set():
            sleeping = asyncio.ensure_future(self.clock.sleep(every))
            stopping = asyncio.ensure_future(finished.wait())
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
            sleeping.cancel()
            stopping.cancel()
            if finished.is_set():
                return
            await self.snapshot_once()

    async def _reserve_new(self) -> None:
        async with self.barrier.mutation() as cut:
            for rollout_id, task in self.tasks.items():
                if rollout_id in self.results:
                    continue
                if rollout_id not in self.ledger:
                    self.ledger.reserve(cut, rollout_id, task.instance_id)
                elif self.ledger.entry(rollout_id).status is LedgerStatus.ABANDONED:
                    self.ledger.restart_from_task(cut, rollout_id)
                    self.report.restarted_attempts += 1

    async def _drive(self, rollout_id: str) -> None:
        slot = self._slots.get(self.ledger.entry(rollout_id).instance_id)
        if slot is None:
            await self._attempts(rollout_id)
            return
        async with slot:
            await self._attempts(rollout_id)

    async def _attempts(self, rollout_id: str) -> None:
        task = self.tasks[rollout_id]
        log = structlog.get_logger("envckpt.job").bind(rollout_id=rollout_id)
        while True:
            await self.gate.wait_open()
            async with self.barrier.mutation() as cut:
                entry = self.ledger.entry(rollout_id)
                if entry.status is LedgerStatus.RESERVED:
                    entry = self.ledger.dispatch(cut, rollout_id)
            self.on_progress(
                LedgerStatus.DISPATCHED, {"rollout_id": rollout_id, "attempt": entry.attempt}
            )
            try:
                result = await self.backend.run(entry.instance_id, entry.episode, task.task)
            except ParticipantError as error:
                if error.code != "stale_attempt":
                    raise
                # Retired (or superseded) under us: give this attempt up and send the next.
                log.warning("attempt refused; re-minting", attempt=entry.attempt, error=str(error))
                async with self.barrier.mutation() as cut:
                    self.ledger.fail(cut, rollout_id)
                    self.ledger.mint_next_attempt(cut, rollout_id)
                self.report.restarted_attempts += 1
                continue
            await self._seal(rollout_id, entry.attempt, result)
            return

    async def _seal(self, rollout_id: str, attempt: int, result: Mapping[str, Any]) -> None:
        async with self.barrier.mutation() as cut:
            entry = self.ledger.entry(rollout_id)
            if entry.attempt != attempt:
                raise ProtocolViolation(
                    f"{rollout_id}: result of attempt {attempt}, ledger holds {entry.attempt}"
                )
            self.ledger.add_staging_keys(cut, rollout_id, result.get("staging_keys", ()))
            self.results.record(cut, rollout_id, result)
            self.ledger.seal(cut, rollout_id)
        self.report.finished += 1
        self.on_progress(LedgerStatus.SEALED, {"rollout_id": rollout_id, "attempt": attempt})
