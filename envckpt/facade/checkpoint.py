"""``GymEnvironmentCheckpoint``: the ``EnvironmentCheckpoint`` over N Gym instances.

The facade never assigns state: every instance moves only through its
adapter's lifecycle machine, and the snapshot itself through the session
machine. Fan-out is concurrent across instances; each instance orders its own
participants (staged prepare, reverse resume).

Snapshot, in order (rl-recovery.md):

1. discover (first time), retire the attempts the inventory dropped;
2. prepare every instance; any not ready -> resume all, raise ``SnapshotNotReady``;
3. renew leases in the background while the checkpoint is open;
4. commit per instance its inventory minus the restarts; write ``gym_checkpoint.json``;
5. yield the snapshot (the trainer checks it against its cut and publishes);
6. on exit resume everyone (retried); on error resume (abort) and re-raise.

Failure rules, per phase (what the caller may do next):

* before anything opened (discover, retire): nothing to undo; retryable.
* prepare/commit: every instance that may hold an open checkpoint is resumed
  (which aborts it); the snapshot directory is never restorable because
  ``gym_checkpoint.json`` is written only after every commit succeeded.
* resume after a clean exit: retried; if it still fails the participants
  resume themselves at lease expiry, and ``GymCheckpointUnavailable`` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envckpt import logs
from envckpt.clock import Clock, SystemClock
from envckpt.crashpoints import crashpoint
from envckpt.errors import GymCheckpointUnavailable, IllegalTransition, SnapshotNotReady
from envckpt.facade.fan_out import FanOut, aggregate, stop, uncancellable
from envckpt.facade.instances import InstanceClient
from envckpt.facade.manifest import GymSnapshotManifest, InstanceRecord, write_manifest
from envckpt.facade.restore import abandon_everywhere, check_restorable, restore_everywhere
from envckpt.facade.resumer import Resumer
from envckpt.facade.snapshot import (
    SESSION,
    GymEnvironmentSnapshot,
    InstanceLatencies,
    SnapshotTimings,
)
from envckpt.facade.timeouts import CheckpointTimeouts
from envckpt.gym.summaries import GymCheckpointCommitSummary, GymCheckpointPrepareSummary
from envckpt.ids import mint_checkpoint_id
from envckpt.interfaces import RestoredEnvironmentRollouts
from envckpt.inventory import RolloutInventory, SnapshotContents
from envckpt.machines.binding import MachineState
from envckpt.machines.tables import SNAPSHOT_SESSION, SessionState

__all__ = ["CheckpointTimeouts", "GymEnvironmentCheckpoint"]

# A failed restore must still clean up even if its own deadline has passed.
CLEANUP_SECONDS = 30.0


class GymEnvironmentCheckpoint:
    """Rollout snapshots and restores of N Gym instances."""

    def __init__(
        self,
        instances: Sequence[InstanceClient],
        inventory: RolloutInventory | None = None,
        *,
        clock: Clock | None = None,
        timeouts: CheckpointTimeouts | None = None,
    ) -> None:
        # Each id read once: at 100k instances every read counts.
        self._instances = {instance.instance_id: instance for instance in instances}
        if len(self._instances) != len(instances):
            ids = sorted(instance.instance_id for instance in instances)
            raise ValueError(f"duplicate Gym instance ids: {ids}")
        self._inventory_source = inventory
        self._clock = clock or SystemClock()
        self.timeouts = timeouts or CheckpointTimeouts()
        self._fan_out = FanOut(self._instances)
        self._resumer = Resumer(self._fan_out, clock=self._clock, timeouts=self.timeouts)
        self._active: str | None = None

    @property
    def holds_rollout_state(self) -> bool:
        return True

    @property
    def inventory(self) -> RolloutInventory:
        """Where snapshots learn what to commit: the trainer's ledger.

        May be attached after construction, because at startup the ledger is
        only known once the snapshot it is restored from was chosen.
        """
        if self._inventory_source is None:
            raise RuntimeError(
                "no rollout inventory attached; set GymEnvironmentCheckpoint.inventory"
            )
        return self._inventory_source

    @inventory.setter
    def inventory(self, inventory: RolloutInventory) -> None:
        self._inventory_source = inventory

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._instances))

    def is_unavailable(self, error: BaseException) -> bool:
        return isinstance(error, GymCheckpointUnavailable)

    def _deadline(self, seconds: float) -> float:
        return self._clock.now() + seconds

    def _open(self, checkpoint_id: str, trigger: str) -> None:
        if self._active is not None:
            # Two snapshots (or a snapshot and a restore) at once: a caller bug.
            raise IllegalTransition(
                machine=SNAPSHOT_SESSION.name,
                instance=self._active,
                state=SNAPSHOT_SESSION.initial,
                trigger=trigger,
            )
        self._active = checkpoint_id

    # ------------------------------------------------------------------ startup

    async def check_startup(self) -> None:
        """Discover every instance; refuse environment participants, warn on restart-only."""
        restart_only = await self._fan_out.require("discover", _discover_then_restart_only)
        for instance_id, servers in sorted(item for item in restart_only.items() if item[1]):
            logs.get_logger("envckpt.facade").warning(
                "restart-only participants: their rollouts restart from the task after a "
                "crash instead of continuing at a turn",
                instance_id=instance_id,
                servers=servers,
            )

    async def forget(self, rollout_ids: Mapping[str, Iterable[str]]) -> None:
        """Clear retire marks of finished rollouts, per instance (outside snapshots)."""
        checkpoint_id = mint_checkpoint_id("forget")
        deadline = self._deadline(self.timeouts.control_seconds)
        wanted = {iid: tuple(sorted(set(ids))) for iid, ids in rollout_ids.items() if ids}
        unknown = sorted(set(wanted) - set(self._instances))
        if unknown:
            raise ValueError(f"unknown Gym instances: {unknown}")
        await self._fan_out.require(
            "forget",
            lambda i: i.forget(checkpoint_id, wanted.get(i.instance_id, ()), deadline_ts=deadline),
        )

    # ----------------------------------------------------------------- snapshot

    @contextlib.asynccontextmanager
    async def snapshot(self, checkpoint_path: Path) -> AsyncIterator[GymEnvironmentSnapshot | None]:
        if not self._instances:
            yield None
            return
        path = Path(checkpoint_path)
        checkpoint_id = mint_checkpoint_id(path.name)
        self._open(checkpoint_id, "snapshot")
        session = SESSION.new(checkpoint_id)
        log = logs.get_logger("envckpt.facade").bind(checkpoint_id=checkpoint_id)
        renewer: asyncio.Task[None] | None = None
        try:
            try:
                snapshot = await self._take(path, checkpoint_id, session)
                renewer = snapshot.renewer
            except BaseException as error:
                log.warning("snapshot failed before it was taken; aborting", error=str(error))
                await self._abort(checkpoint_id, session)
                raise
            try:
                yield snapshot.snapshot
            except BaseException:
                await stop(renewer)
                await self._abort(checkpoint_id, session)
                raise
            await stop(renewer)
            await uncancellable(self._resumer.resume(checkpoint_id))
            SESSION.fire(session, "resume", checkpoint_id=checkpoint_id)
        finally:
            await stop(renewer)
            self._active = None

    async def _take(
        self, path: Path, checkpoint_id: str, session: MachineState[SessionState]
    ) -> _CommittedSnapshot:
        clock = self._clock
        await self._fan_out.require("discover", lambda i: i.discover())
        await self._resumer.resume_leftovers()

        started = clock.now()
        await self._retire_dropped(checkpoint_id)
        retired_at = clock.now()

        crashpoint("snapshot.before_prepare")
        prepare_deadline = self._deadline(self.timeouts.prepare_seconds)
        prepare_seconds: dict[str, float] = {}
        prepared = await self._fan_out.require(
            "prepare",
            lambda i: i.prepare(checkpoint_id, deadline_ts=prepare_deadline),
            seconds=prepare_seconds,
        )
        blocked = {iid: summary for iid, summary in prepared.items() if not summary.prepared}
        if blocked:
            raise SnapshotNotReady(
                f"snapshot {checkpoint_id}: {len(blocked)} instance(s) not at a turn boundary "
                f"in {self.timeouts.prepare_seconds:g} s: "
                + ", ".join(
                    f"{iid}: {sum(len(keys) for keys in s.blockers.values())} blockers"
                    for iid, s in sorted(blocked.items())
                ),
                blockers={iid: s.blockers for iid, s in blocked.items()},
            )
        SESSION.fire(session, "prepare", checkpoint_id=checkpoint_id)
        crashpoint("snapshot.after_prepare")
        prepared_at = clock.now()

        renewer = asyncio.create_task(self._renew_forever(checkpoint_id))
        commit_seconds: dict[str, float] = {}
        try:
            summaries = await self._commit_all(checkpoint_id, path, prepared, commit_seconds)
            records = {
                iid: InstanceRecord.from_summary(summaries[iid], prepared[iid].restarts)
                for iid in summaries
            }
            manifest = GymSnapshotManifest(checkpoint_id=checkpoint_id, instances=records)
            manifest_bytes = await asyncio.to_thread(write_manifest, path, manifest)
        except BaseException:
            await stop(renewer)
            raise
        SESSION.fire(session, "commit", checkpoint_id=checkpoint_id)
        contents = SnapshotContents(
            checkpoint_id=checkpoint_id,
            exported={iid: rec.episodes for iid, rec in records.items()},
            restarts={iid: rec.restarts for iid, rec in records.items()},
            staging_keys={iid: rec.staging_keys for iid, rec in records.items()},
        )
        snapshot = GymEnvironmentSnapshot(
            contents=contents,
            inventory=self.inventory,
            session=session,
            timings=SnapshotTimings(
                retire_seconds=retired_at - started,
                prepare_seconds=prepared_at - retired_at,
                commit_seconds=clock.now() - prepared_at,
                manifest_bytes=manifest_bytes,
            ),
            latencies=InstanceLatencies(
                prepare_seconds=prepare_seconds,
                commit_seconds=commit_seconds,
                prepared=prepared,
                committed=summaries,
            ),
            unowned_live_episodes=sum(len(s.unowned_live_episodes) for s in summaries.values()),
        )
        return _CommittedSnapshot(snapshot, renewer)

    async def _retire_dropped(self, checkpoint_id: str) -> None:
        deadline = self._deadline(self.timeouts.control_seconds)

        async def retire(instance: InstanceClient) -> None:
            dropped = self.inventory.dropped_attempts(instance.instance_id)
            if dropped:
                await instance.retire(checkpoint_id, dropped, deadline_ts=deadline)
                self.inventory.retired(instance.instance_id, dropped)

        await self._fan_out.require("retire", retire)

    async def _commit_all(
        self,
        checkpoint_id: str,
        path: Path,
        prepared: Mapping[str, GymCheckpointPrepareSummary],
        seconds: dict[str, float],
    ) -> dict[str, GymCheckpointCommitSummary]:
        deadline = self._deadline(self.timeouts.commit_seconds)
        log = logs.get_logger("envckpt.facade").bind(checkpoint_id=checkpoint_id)

        async def commit(instance: InstanceClient) -> GymCheckpointCommitSummary:
            iid = instance.instance_id
            scope = prepared[iid].continued(self.inventory.inventory(iid))
            summary = await instance.commit(checkpoint_id, str(path), scope, deadline_ts=deadline)
            # The first instance done while others may still be writing.
            crashpoint("snapshot.mid_commit")
            if summary.unowned_live_episodes:
                log.warning(
                    "parked agent sessions no /run owns; they cannot be restored",
                    instance_id=iid,
                    episodes=[e.capture_key for e in summary.unowned_live_episodes[:10]],
                )
            return summary

        return await self._fan_out.require("commit", commit, seconds=seconds)

    async def _renew_forever(self, checkpoint_id: str) -> None:
        log = logs.get_logger("envckpt.facade").bind(checkpoint_id=checkpoint_id)
        while True:
            await self._clock.sleep(self.timeouts.renew_interval_seconds)
            deadline = self._deadline(self.timeouts.commit_seconds)
            _, errors = await self._fan_out.collect(
                functools.partial(_renew_with, checkpoint_id=checkpoint_id, deadline_ts=deadline)
            )
            for iid, error in errors.items():
                log.warning("lease renewal failed", instance_id=iid, error=str(error))

    async def _abort(self, checkpoint_id: str, session: MachineState[SessionState]) -> None:
        """Resume every instance that may hold the open checkpoint; never raises."""
        try:
            await uncancellable(self._resumer.resume(checkpoint_id))
        except Exception as error:
            logs.get_logger("envckpt.facade").warning(
                "abort: resume failed; participants resume at lease expiry",
                checkpoint_id=checkpoint_id,
                error=str(error),
            )
        if SESSION.can_fire(session, "abort"):
            SESSION.fire(session, "abort", checkpoint_id=checkpoint_id)

    # ------------------------------------------------------------------ restore

    @contextlib.asynccontextmanager
    async def restored(self, checkpoint_path: Path) -> AsyncIterator[RestoredEnvironmentRollouts]:
        path = Path(checkpoint_path)
        # Refused before anything is sent: another topology, a used deployment,
        # a participant that saved state missing.
        manifest = await check_restorable(self._fan_out, path)
        checkpoint_id = mint_checkpoint_id(f"restore-{manifest.checkpoint_id}")
        self._open(checkpoint_id, "restore")
        try:
            deadline = self._deadline(self.timeouts.restore_seconds)
            seconds: dict[str, float] = {}
            errors = await restore_everywhere(
                self._fan_out, checkpoint_id, path, manifest, deadline_ts=deadline, seconds=seconds
            )
            if errors:
                # All-or-nothing across instances: drop every instance's restore.
                await self._abandon_everywhere(checkpoint_id, manifest)
                raise aggregate("restore", errors)
            try:
                yield RestoredEnvironmentRollouts(
                    continued_attempts=manifest.continued_attempts(),
                    staging_keys=manifest.staging_keys(),
                    instance_seconds=tuple(sorted(seconds.items())),
                )
            except BaseException:
                await self._abandon_everywhere(checkpoint_id, manifest)
                raise
            await self._resumer.resume(checkpoint_id)
        finally:
            self._active = None

    async def _abandon_everywhere(self, checkpoint_id: str, manifest: GymSnapshotManifest) -> None:
        deadline = self._deadline(max(self.timeouts.control_seconds, CLEANUP_SECONDS))
        await abandon_everywhere(self._fan_out, checkpoint_id, manifest, deadline_ts=deadline)


@dataclass(slots=True)
class _CommittedSnapshot:
    """A committed snapshot, and the task renewing its leases until it is left."""

    snapshot: GymEnvironmentSnapshot
    renewer: asyncio.Task[None]


async def _renew_with(instance: InstanceClient, *, checkpoint_id: str, deadline_ts: float) -> None:
    await instance.renew(checkpoint_id, deadline_ts=deadline_ts)


async def _discover_then_restart_only(instance: InstanceClient) -> list[str]:
    """Startup's one call per instance: discover it, then name its restart-only servers."""
    await instance.discover()
    return await instance.restart_only_servers()
