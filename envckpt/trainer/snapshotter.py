"""``RolloutSnapshotter``: the trainer's rollout snapshot context manager.

    snapshotter = RolloutSnapshotter(root, env_checkpoint=env, barrier=barrier,
                                     ledger=ledger, data_plane=plane)
    async with snapshotter.snapshot() as result:    # published when entered
        ...                                         # environment still paused
    # environment resumed, dispatch reopened; result.metrics complete

Order (rl-recovery.md), and what a failure at each step leaves:

1. save lock; fresh checkpoint id; unpublished ``.tmp/<id>``.
2. close dispatch.
3. ``env.snapshot(tmp)``: retire dropped attempts, prepare, commit, manifest.
4. under the data-plane cut: ``check_against_cut``; copy data plane, ledger
   and sidecars.
5. leave the cut; write ``MANIFEST.json`` last; rename into ``snapshots/``;
   ``LATEST``; keep the newest K.
6. leave the environment context: every instance resumes.
7. reopen dispatch.

A failure before step 5 deletes the temporary directory (never restorable)
and aborts the environment snapshot; ``consecutive_failures`` counts them and
``env.is_unavailable`` says whether the next attempt may simply retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from envckpt.clock import Clock, SystemClock
from envckpt.crashpoints import crashpoint
from envckpt.fsutil import atomic_write_bytes
from envckpt.ids import mint_checkpoint_id, validate_path_component
from envckpt.interfaces import EnvironmentCheckpoint, MutationCut
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.dispatch_gate import DispatchGate
from envckpt.trainer.layout import SnapshotLayout, build_snapshot_manifest
from envckpt.trainer.ledger import RecoveryLedger

DATA_PLANE_NAME = "dataplane.sqlite"
LEDGER_NAME = "ledger.json"
SIDECAR_DIR = "sidecars"

Sidecar = Callable[[MutationCut], bytes]


@dataclass
class SnapshotResult:
    """One published snapshot. ``metrics`` gains the pause time when the context exits."""

    checkpoint_id: str
    path: Path
    exported_episodes: int
    restarted_rollouts: int
    metrics: dict[str, float] = field(default_factory=dict)


class RolloutSnapshotter:
    """Takes rollout snapshots of environment, data plane and ledger together."""

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
    ) -> None:
        if keep_latest_k < 1:
            raise ValueError("keep_latest_k must be at least 1")
        self.layout = SnapshotLayout(root)
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
        self.history: list[SnapshotResult] = []
        self._last_resumed_at: float | None = None

    async def take(self) -> SnapshotResult:
        """Take one snapshot with nothing to do while paused."""
        async with self.snapshot() as result:
            pass
        return result

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[SnapshotResult]:
        clock = self.clock
        log = structlog.get_logger("envckpt.snapshotter")
        async with self.save_lock:
            checkpoint_id = mint_checkpoint_id("rollouts")
            log = log.bind(checkpoint_id=checkpoint_id)
            temporary = self.layout.new_temporary(checkpoint_id)
            published: Path | None = None
            result: SnapshotResult | None = None
            paused_at = clock.now()
            try:
                with self.dispatch.closed():
                    async with self.env.snapshot(temporary) as env_snapshot:
                        env_done = clock.now()
                        crashpoint("snapshot.after_commit")
                        async with self.barrier.checkpoint() as cut:
                            cut_entered = clock.now()
                            if env_snapshot is not None:
                                await env_snapshot.check_against_cut(cut)
                            written = await self._save_trainer_state(cut, temporary)
                            crashpoint("snapshot.under_cut")
                        cut_left = clock.now()
                        metrics: dict[str, float] = {
                            "snapshot_env_seconds": env_done - paused_at,
                            "snapshot_cut_wait_seconds": cut_entered - env_done,
                            "snapshot_cut_seconds": cut_left - cut_entered,
                            "snapshot_trainer_bytes": float(written),
                        }
                        manifest = build_snapshot_manifest(
                            temporary,
                            checkpoint_id=checkpoint_id,
                            created_at=clock.now(),
                            metrics=metrics,
                        )
                        publishing = asyncio.ensure_future(
                            asyncio.to_thread(self.layout.publish, temporary, manifest)
                        )
                        try:
                            published = await asyncio.shield(publishing)
                        except asyncio.CancelledError:
                            # The rename runs in a thread and cannot be stopped:
                            # let it finish rather than delete the directory
                            # under it. The snapshot is then published whole.
                            published = await publishing
                            raise
                        metrics["snapshot_publish_seconds"] = clock.now() - cut_left
                        metrics["snapshot_bytes"] = float(
                            sum(size for _, size in manifest.files.values())
                        )
                        pruned = self.layout.prune(self.keep_latest_k)
                        result = SnapshotResult(
                            checkpoint_id=checkpoint_id,
                            path=published,
                            exported_episodes=_exported(env_snapshot),
                            restarted_rollouts=(
                                0 if env_snapshot is None else env_snapshot.restarted_rollouts
                            ),
                            metrics=metrics,
                        )
                        log.info("snapshot published", path=str(published), pruned=pruned)
                        crashpoint("snapshot.after_publish")
                        yield result
                    resumed_at = clock.now()
                    paused = resumed_at - paused_at
                    result.metrics["snapshot_paused_seconds"] = paused
                    if env_snapshot is not None:
                        result.metrics.update(env_snapshot.metrics(paused))
                    self._warn_if_mostly_paused(paused_at, paused)
                    self._last_resumed_at = resumed_at
            except BaseException as error:
                if published is None:
                    self.layout.discard(temporary)
                    self.consecutive_failures += 1
                    log.warning(
                        "snapshot failed; nothing published",
                        error=f"{type(error).__name__}: {error}",
                        retryable=isinstance(error, Exception) and self.env.is_unavailable(error),
                        consecutive_failures=self.consecutive_failures,
                    )
                raise
            self.consecutive_failures = 0
            self.history.append(result)
            log.info("snapshot done", **result.metrics)

    async def _save_trainer_state(self, cut: MutationCut, directory: Path) -> int:
        written = await self.data_plane.snapshot_to(cut, directory / DATA_PLANE_NAME)
        written += self.ledger.save(directory / LEDGER_NAME)
        if self.sidecars:
            for name, produce in sorted(self.sidecars.items()):
                data = produce(cut)
                atomic_write_bytes(
                    directory / SIDECAR_DIR / validate_path_component(name, what="sidecar"), data
                )
                written += len(data)
        return written

    def _warn_if_mostly_paused(self, paused_at: float, paused: float) -> None:
        if self._last_resumed_at is None:
            return
        running = paused_at - self._last_resumed_at
        if paused > running:
            structlog.get_logger("envckpt.snapshotter").warning(
                "the environment spent longer paused than running since the last snapshot",
                paused_seconds=round(paused, 3),
                running_seconds=round(running, 3),
            )


def _exported(env_snapshot: object) -> int:
    count = getattr(env_snapshot, "exported_episodes", None)
    return int(count) if isinstance(count, int) else 0
