"""``RolloutSnapshotter``: the trainer's rollout snapshot context manager.

    snapshotter = RolloutSnapshotter(root, env_checkpoint=env, barrier=barrier,
                                     ledger=ledger, data_plane=plane)
    snapshotter.set_step(120, policy_version="v7")  # the trainer's step, as it advances
    async with snapshotter.snapshot() as result:    # published when entered
        ...                                         # environment still paused
    # environment resumed, dispatch reopened; result.metrics complete
    result = await snapshotter.take(step=121)       # nothing to do while paused: resumes early

Every snapshot records the trainer's step and policy version (the ones set,
or the ones passed to this call) in ``MANIFEST.json``; with a step, the id
is ``rollouts-step<step, 10 digits>-<random>``, so ids sort by step.

Phases, in order, each with its failure rule (what is undone, what the
caller sees), in the manner of a two-phase commit:

1. **begin**: save lock; fresh checkpoint id; unpublished ``.tmp/envckpt-<id>``.
   Fails: the directory, if made, is deleted. A failed snapshot.
2. **pause**: dispatch closes; ``env.snapshot(tmp)`` retires dropped
   attempts, prepares, commits, writes ``gym_checkpoint.json``.
   Fails: the environment aborted its own checkpoint (every instance
   resumed); ``.tmp/envckpt-<id>`` deleted; dispatch reopens. A failed snapshot.
3. **save**: under the data-plane cut, ``check_against_cut``, then the data
   plane, ledger and sidecars are written into ``.tmp/envckpt-<id>``.
   Fails: as 2 (leaving the environment context with the error aborts it).
4. **publish**: ``MANIFEST.json`` last, rename into ``snapshots/``, in a
   thread. A cancellation waits for the rename instead of deleting under it,
   so the snapshot is whole or absent, never half published.
   Fails before the rename: as 2. After it the snapshot is published.
5. **prune** to ``keep_latest_k`` (through the trash; only envckpt's own
   snapshots count and go). Fails: logged; the new snapshot stands.
6. **the caller's block**, environment still paused. Raises: the snapshot
   stays published, the environment resumes, the error propagates.
7. **resume**: leaving the environment context resumes every instance
   (the facade retries); dispatch reopens. Fails: the snapshot stays
   published and the error propagates; ``take`` logs it and returns the
   result (participants resume themselves at lease expiry).

``take`` has nothing to do while the environment is paused, so it resumes
it early, in phase 3, as soon as the capture is checked against the cut
(``early_resume.py``: why the cut alone keeps the trainer's state
consistent, and its failure rules). ``snapshot_paused_seconds`` is the
environment's pause either way.

Every failure before publish is one ``snapshot_failed`` log event with its
reason and phase, and counts in ``consecutive_failures`` and
``failures_total``; ``env.is_unavailable`` says whether a retry may simply
succeed. What to do about failures is the caller's policy (``SnapshotLoop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager as AsyncContextManager
from pathlib import Path

from envckpt import logs
from envckpt.clock import Clock, SystemClock
from envckpt.crashpoints import crashpoint
from envckpt.fsutil import atomic_write_bytes
from envckpt.ids import validate_path_component
from envckpt.interfaces import EnvironmentCheckpoint, EnvironmentSnapshot, MutationCut
from envckpt.telemetry.names import SNAPSHOT_FAILURES_TOTAL
from envckpt.telemetry.observers import TelemetryObserver, TelemetryRecorder
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.dispatch_gate import DispatchGate
from envckpt.trainer.early_resume import EarlyResume
from envckpt.trainer.job_errors import SnapshotRootUnsafe
from envckpt.trainer.layout import DATA_PLANE_NAME, LEDGER_NAME, SIDECAR_DIR, SnapshotLayout
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.root_guard import RootLock
from envckpt.trainer.snapshot_manifest import (
    build_snapshot_manifest,
    snapshot_id,
    validate_policy_version,
    validate_step,
)
from envckpt.trainer.snapshot_result import SnapshotAttempt, SnapshotResult, exported_episodes
from envckpt.trainer.snapshot_telemetry import SnapshotStamps

__all__ = [
    "DATA_PLANE_NAME",
    "LEDGER_NAME",
    "SIDECAR_DIR",
    "RolloutSnapshotter",
    "Sidecar",
    "SnapshotResult",
]

Sidecar = Callable[[MutationCut], bytes]
_log = logs.get_logger("envckpt.snapshotter")


class RolloutSnapshotter:
    """Takes rollout snapshots of environment, data plane and ledger together.

    Holds the snapshot root's lock (``RootLock``, re-entrant within a process)
    from construction: a snapshotter never writes into a root another
    trainer owns. Every snapshot's record goes to ``<root>/telemetry.jsonl``
    and to each of ``observers`` (``envckpt.telemetry``), after the resume.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        env_checkpoint: EnvironmentCheckpoint,
        barrier: DataPlaneBarrier,
        ledger: RecoveryLedger,
        data_plane: SqliteDataPlane,
        dispatch: DispatchGate | None = None,
        keep_latest_k: int = 3,
        sidecars: Mapping[str, Sidecar] | None = None,
        save_lock: asyncio.Lock | None = None,
        clock: Clock | None = None,
        lock: RootLock | None = None,
        step: int | None = None,
        policy_version: str | None = None,
        observers: Iterable[TelemetryObserver] = (),
    ) -> None:
        if keep_latest_k < 1:
            raise ValueError("keep_latest_k must be at least 1")
        self.step = validate_step(step)
        self.policy_version = validate_policy_version(policy_version)
        self.layout = SnapshotLayout(root)
        self.lock = lock or RootLock.acquire(self.layout.root)
        self.env = env_checkpoint
        self.barrier = barrier
        self.ledger = ledger
        self.data_plane = data_plane
        self.dispatch = dispatch or DispatchGate()
        self.keep_latest_k = keep_latest_k
        self.sidecars = dict(sidecars or {})
        # Shared with trainer checkpoints, so the two never write at once.
        self.save_lock = save_lock or asyncio.Lock()
        self.clock = clock or SystemClock()
        self.consecutive_failures = 0
        self.failures_total = 0
        self.last_failure = ""
        self.history: list[SnapshotResult] = []
        self.telemetry = TelemetryRecorder(self.layout.root, observers)
        self._last_resumed_at: float | None = None

    def set_step(self, step: int | None, *, policy_version: str | None = None) -> None:
        """The trainer's step (and policy version) every later snapshot records."""
        self.step = validate_step(step)
        self.policy_version = validate_policy_version(policy_version)

    async def take(
        self,
        *,
        reason: str = "requested",
        step: int | None = None,
        policy_version: str | None = None,
    ) -> SnapshotResult:
        """Take one snapshot with nothing to do while paused; see phase 7 for resume errors."""
        result: SnapshotResult | None = None
        try:
            async with self._snapshot(
                reason=reason, step=step, policy_version=policy_version, resume_early=True
            ) as result:
                pass
        except Exception as error:
            if result is None:
                raise
            result.resume_error = f"{type(error).__name__}: {error}"
            _log.warning(
                "snapshot published, but resuming the environment failed; "
                "participants resume at lease expiry",
                checkpoint_id=result.checkpoint_id,
                error=result.resume_error,
            )
        return result

    def snapshot(
        self,
        *,
        reason: str = "timer",
        step: int | None = None,
        policy_version: str | None = None,
    ) -> AsyncContextManager[SnapshotResult]:
        """Phases 1-7 above. ``reason`` is logged; only timer snapshots warn about pauses.

        ``step`` and ``policy_version`` override the ones ``set_step`` gave, for this one.
        """
        return self._snapshot(
            reason=reason, step=step, policy_version=policy_version, resume_early=False
        )

    @contextlib.asynccontextmanager
    async def _snapshot(
        self,
        *,
        reason: str,
        step: int | None,
        policy_version: str | None,
        resume_early: bool,
    ) -> AsyncIterator[SnapshotResult]:
        step = self.step if step is None else validate_step(step)
        version = (
            self.policy_version
            if policy_version is None
            else validate_policy_version(policy_version)
        )
        async with self.save_lock:
            attempt = SnapshotAttempt(
                SnapshotStamps(
                    snapshot_id(step),
                    reason=reason,
                    paused_at=self.clock.now(),
                    step=step,
                    policy_version=version,
                )
            )
            try:
                attempt.temporary = self.layout.new_temporary(attempt.checkpoint_id)
                attempt.phase = "pause"
                with self.dispatch.closed():
                    if resume_early:
                        early = EarlyResume(self.env.snapshot(attempt.temporary), self.clock)
                        result, env_snapshot = await self._take_resuming_early(attempt, early)
                        yield result
                        # The resume's error, if it failed, goes on after the block (as 7).
                        attempt.resume_started_at = early.started_at
                        resumed_at = await early.resumed_at()
                        self._resumed(attempt, result, reason=reason, at=resumed_at)
                    else:
                        async with self.env.snapshot(attempt.temporary) as env_snapshot:
                            attempt.env_snapshot = env_snapshot
                            await self._save_under_cut(attempt, env_snapshot)
                            result = await self._publish(attempt, env_snapshot)
                            yield result
                            attempt.resume_started_at = self.clock.now()
                        self._resumed(attempt, result, reason=reason)
            except BaseException as error:
                self._failed(attempt, error)
                raise

    async def _take_resuming_early(
        self, attempt: SnapshotAttempt, early: EarlyResume
    ) -> tuple[SnapshotResult, EnvironmentSnapshot | None]:
        """Phases 2-5 with the environment resumed once its capture is checked."""
        env_snapshot = attempt.env_snapshot = await early.enter()
        try:
            await self._save_under_cut(attempt, env_snapshot, early=early)
            result = await self._publish(attempt, env_snapshot)
        except BaseException as error:
            await early.fail(error)
            raise
        return result, env_snapshot

    # ---- phases ---------------------------------------------------------------

    async def _save_under_cut(
        self,
        attempt: SnapshotAttempt,
        env_snapshot: EnvironmentSnapshot | None,
        *,
        early: EarlyResume | None = None,
    ) -> None:
        """Phase 3: check the environment's capture and write the trainer state, one cut.

        ``early`` (``take``'s early resume) starts resuming the environment
        once the capture is checked; it runs beside the writing.
        """
        attempt.phase = "save"
        env_done = self.clock.now()
        crashpoint("snapshot.after_commit")
        assert attempt.temporary is not None
        async with self.barrier.checkpoint() as cut:
            cut_entered = self.clock.now()
            if env_snapshot is not None:
                await env_snapshot.check_against_cut(cut)
            if early is not None:
                # Started, not awaited: the cut is never held up by a remote call.
                early.start()
            written = await self._save_trainer_state(cut, attempt.temporary)
            crashpoint("snapshot.under_cut")
        attempt.metrics.update(
            snapshot_env_seconds=env_done - attempt.paused_at,
            snapshot_cut_wait_seconds=cut_entered - env_done,
            snapshot_cut_seconds=self.clock.now() - cut_entered,
            snapshot_trainer_bytes=float(written),
        )

    async def _publish(
        self, attempt: SnapshotAttempt, env_snapshot: EnvironmentSnapshot | None
    ) -> SnapshotResult:
        """Phases 4 and 5: manifest, rename (whole or not at all), prune."""
        attempt.phase = "publish"
        started = self.clock.now()
        assert attempt.temporary is not None
        publishing = asyncio.ensure_future(asyncio.to_thread(self._write_and_rename, attempt))
        try:
            path, size = await asyncio.shield(publishing)
        except asyncio.CancelledError:
            # The rename runs in a thread and cannot be stopped: let it finish
            # rather than delete the directory under it.
            path, size = await publishing
            attempt.published = self._published(attempt, path, size, started, env_snapshot)
            raise
        result = self._published(attempt, path, size, started, env_snapshot)
        pruned: tuple[str, ...] = ()
        try:
            pruned = (await asyncio.to_thread(self.layout.prune, self.keep_latest_k)).removed
        except (OSError, SnapshotRootUnsafe) as error:
            _log.warning("pruning old snapshots failed; the new one stands", error=str(error))
        _log.info(
            "snapshot published",
            checkpoint_id=result.checkpoint_id,
            step=result.step,
            pruned=pruned,
        )
        crashpoint("snapshot.after_publish")
        return result

    def _write_and_rename(self, attempt: SnapshotAttempt) -> tuple[Path, int]:
        assert attempt.temporary is not None
        manifest = build_snapshot_manifest(
            attempt.temporary,
            checkpoint_id=attempt.checkpoint_id,
            created_at=self.clock.now(),
            metrics=attempt.metrics,
            step=attempt.stamps.step,
            policy_version=attempt.stamps.policy_version,
        )
        path = self.layout.publish(attempt.temporary, manifest)
        attempt.files = manifest.files
        return path, manifest.size

    def _published(
        self,
        attempt: SnapshotAttempt,
        path: Path,
        size: int,
        started: float,
        env_snapshot: EnvironmentSnapshot | None,
    ) -> SnapshotResult:
        attempt.metrics["snapshot_publish_seconds"] = self.clock.now() - started
        attempt.metrics["snapshot_bytes"] = float(size)
        result = SnapshotResult(
            checkpoint_id=attempt.checkpoint_id,
            path=path,
            exported_episodes=exported_episodes(env_snapshot),
            restarted_rollouts=0 if env_snapshot is None else env_snapshot.restarted_rollouts,
            metrics=attempt.metrics,
            step=attempt.stamps.step,
            policy_version=attempt.stamps.policy_version,
        )
        attempt.published = result
        self.history.append(result)
        self.consecutive_failures = 0
        return result

    def _resumed(
        self,
        attempt: SnapshotAttempt,
        result: SnapshotResult,
        *,
        reason: str,
        at: float | None = None,
    ) -> None:
        """Phase 7 done (``at``, if the environment resumed earlier): record the pause."""
        resumed_at = self.clock.now() if at is None else at
        paused = resumed_at - attempt.paused_at
        result.metrics["snapshot_paused_seconds"] = paused
        if attempt.env_snapshot is not None:
            result.metrics.update(attempt.env_snapshot.metrics(paused))
        if reason == "timer":
            self._warn_if_mostly_paused(attempt.paused_at, paused)
        self._last_resumed_at = resumed_at
        self._record(attempt, result, resumed_at=resumed_at)
        _log.info(
            "snapshot done", checkpoint_id=result.checkpoint_id, reason=reason, **result.metrics
        )

    def _record(
        self,
        attempt: SnapshotAttempt,
        result: SnapshotResult,
        *,
        resumed_at: float,
        error: str = "",
    ) -> None:
        """The published snapshot's record: into ``result.metrics``, the log, the observers."""
        record = attempt.published_record(result.metrics, resumed_at=resumed_at, error=error)
        result.metrics.update(record.metrics())
        result.metrics[SNAPSHOT_FAILURES_TOTAL] = float(self.failures_total)
        self.telemetry.snapshot_ended(record)

    def _failed(self, attempt: SnapshotAttempt, error: BaseException) -> None:
        """Any phase raised. Before publish: a failed snapshot; after: the snapshot stands."""
        described = f"{type(error).__name__}: {error}"
        if attempt.published is not None:
            self._last_resumed_at = self.clock.now()
            self._record(
                attempt, attempt.published, resumed_at=self._last_resumed_at, error=described
            )
            _log.warning(
                "snapshot published, then leaving it failed",
                checkpoint_id=attempt.checkpoint_id,
                error=described,
            )
            return
        if attempt.temporary is not None:
            self.layout.discard(attempt.temporary)
        self.consecutive_failures += 1
        self.failures_total += 1
        self.last_failure = described
        self.telemetry.snapshot_ended(
            attempt.failed_record(failed_at=self.clock.now(), error=error)
        )
        _log.warning(
            "snapshot_failed",
            checkpoint_id=attempt.checkpoint_id,
            phase=attempt.phase,
            reason=described,
            retryable=isinstance(error, Exception) and self.env.is_unavailable(error),
            consecutive_failures=self.consecutive_failures,
            failures_total=self.failures_total,
        )

    # ---- helpers --------------------------------------------------------------

    async def _save_trainer_state(self, cut: MutationCut, directory: Path) -> int:
        written = await self.data_plane.snapshot_to(cut, directory / DATA_PLANE_NAME)
        written += self.ledger.save(directory / LEDGER_NAME)
        for name, produce in sorted(self.sidecars.items()):
            data = produce(cut)
            target = directory / SIDECAR_DIR / validate_path_component(name, what="sidecar")
            atomic_write_bytes(target, data)
            written += len(data)
        return written

    def _warn_if_mostly_paused(self, paused_at: float, paused: float) -> None:
        if self._last_resumed_at is None:
            return
        running = paused_at - self._last_resumed_at
        if paused > running:
            _log.warning(
                "the environment spent longer paused than running since the last snapshot",
                paused_seconds=round(paused, 3),
                running_seconds=round(running, 3),
            )
