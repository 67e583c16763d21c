"""The rollout loop of a training job: dispatch, collect, snapshot, preempt, resume after a crash.

    job = RolloutJob(tasks, backend=backend, ledger=ledger, data_plane=plane,
                     barrier=barrier, snapshotter=snapshotter, results=results,
                     snapshot_policy=SnapshotPolicy(max_consecutive_failures=3),
                     signals=JobSignals(grace_seconds=30.0))
    report = await job.run(snapshot_every=2.0)     # SnapshotsFailing if unprotected
    report.exit_code                               # JobExit: finished or preempted

Every ledger change happens in a data-plane mutation section, never while a
remote call is in flight. Restored rollouts (``ledger.redispatch_order()``)
are sent first, each back to the instance that holds it. A rollout refused
as a stale attempt is failed and re-minted as attempt + 1 on the same
instance; the next snapshot retires the old attempt everywhere.

``run`` ends in one of three ways: every rollout sealed (``on_finished``, if
set, is awaited at once, e.g. to record that the job finished; then the
snapshot in progress, if any, finishes); ``SnapshotsFailing`` from the snapshot
loop (``snapshot_loop``), the rollouts cancelled; or preempted
(``preemption``): a final snapshot, the rollouts stopped inside it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from envckpt import logs
from envckpt.clock import Clock, SystemClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError, ProtocolViolation
from envckpt.machines.tables import LedgerStatus
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.dispatch_gate import DispatchGate
from envckpt.trainer.job_errors import JobExit
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.preemption import JobSignals, take_final_snapshot
from envckpt.trainer.results import ResultStore
from envckpt.trainer.snapshot_loop import SnapshotCounts, SnapshotLoop, SnapshotPolicy
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
    preempted: bool = False
    final_snapshot: SnapshotResult | None = None
    final_snapshot_aborted: str = ""

    @property
    def exit_code(self) -> JobExit:
        """What the trainer process exits with after ``run`` returned."""
        if not self.preempted:
            return JobExit.FINISHED
        return JobExit.PREEMPTED if self.final_snapshot is not None else JobExit.PREEMPTED_UNSAVED


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
    """Drives every task to a sealed result, taking snapshots on an adaptive timer."""

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
        snapshot_policy: SnapshotPolicy | None = None,
        signals: JobSignals | None = None,
        on_final_snapshot: Callable[[SnapshotResult], Awaitable[None]] | None = None,
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
        self.snapshots = SnapshotLoop(
            snapshotter,
            policy=snapshot_policy,
            counts=SnapshotCounts(self.report.snapshots, self.report.snapshot_failures),
            on_progress=self._progress,
        )
        self.signals = signals
        if signals is not None:
            signals.on_snapshot_request(self.snapshots.request_now)
        self.on_final_snapshot = on_final_snapshot
        # Awaited as soon as every rollout is sealed (trainer/finished.py).
        self.on_finished: Callable[[], Awaitable[None]] | None = None

    def _progress(self, event: str, fields: Mapping[str, Any]) -> None:
        # Looked up at each call: callers may replace ``on_progress`` later.
        self.on_progress(event, fields)

    async def run(self, *, snapshot_every: float | None = None) -> JobReport:
        """Finish every task, snapshotting every ``snapshot_every`` seconds (at least).

        Raises ``SnapshotsFailing`` when the snapshot policy gives up; returns
        early, with ``report.preempted``, when the job was preempted.
        """
        await self._reserve_new()
        order = [entry.rollout_id for entry in self.ledger.redispatch_order()]
        order += [rid for rid in self.tasks if rid not in order and rid not in self.results]
        rollouts = [asyncio.create_task(self._drive(rid), name=f"rollout {rid}") for rid in order]
        every = (
            snapshot_every if snapshot_every is not None else self.snapshots.policy.every_seconds
        )
        stop = asyncio.Event()
        background: dict[asyncio.Future[Any], str] = {
            asyncio.ensure_future(asyncio.gather(*rollouts)): "finished"
        }
        if every or self.signals is not None:
            background[asyncio.ensure_future(self.snapshots.run(stop, every_seconds=every))] = (
                "snapshots"
            )
        if self.signals is not None:
            background[asyncio.ensure_future(self.signals.preempted.wait())] = "preempted"
        try:
            done, _ = await asyncio.wait(background, return_when=asyncio.FIRST_COMPLETED)
            ended = {background[future]: future for future in done}
            if "finished" in ended:
                ended["finished"].result()
                if self.on_finished is not None:
                    await self.on_finished()
            elif "preempted" in ended:
                stop.set()
                await _settled(_named(background, "snapshots"))
                await self._preempted(rollouts)
            else:
                ended["snapshots"].result()  # SnapshotsFailing, or a bug
        finally:
            stop.set()
            await _cancel_all(rollouts)
            for future, name in background.items():
                if name == "preempted":
                    future.cancel()
            await _settled(_named(background, "finished"))  # its outcome is known; collect it
            # A snapshot in progress is let finish (cancelling it mid-way
            # would leave work for the next start); only the wait stops.
            await _settled(_named(background, "snapshots"))
        return self.report

    async def snapshot_once(self) -> SnapshotResult | None:
        """Take one snapshot now under the job's failure rules (None: it failed)."""
        return await self.snapshots.snapshot_once()

    async def _preempted(self, rollouts: list[asyncio.Task[None]]) -> None:
        """Final snapshot; the rollouts stop inside it, while the environment is paused."""
        assert self.signals is not None
        self.report.preempted = True

        async def inside(result: SnapshotResult) -> None:
            await _cancel_all(rollouts)
            if self.on_final_snapshot is not None:
                await self.on_final_snapshot(result)

        final = await take_final_snapshot(self.snapshotter, self.signals, inside=inside)
        self.report.final_snapshot = final.result
        self.report.final_snapshot_aborted = final.aborted
        self.on_progress("final_snapshot", {"result": final.result, "aborted": final.aborted})

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
        log = logs.get_logger("envckpt.job").bind(rollout_id=rollout_id)
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


async def _cancel_all(tasks: Sequence[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def _named(background: Mapping[asyncio.Future[Any], str], name: str) -> asyncio.Future[Any] | None:
    return next((future for future, which in background.items() if which == name), None)


async def _settled(future: asyncio.Future[Any] | None) -> None:
    """Wait for ``future`` to end, whatever it ends with."""
    if future is not None:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await future
