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
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from envckpt.clock import Clock, SystemClock
from envckpt.crashpoints import crashpoint
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import (
    GymCheckpointUnavailable,
    IllegalTransition,
    IncompatibleCheckpoint,
    SnapshotNotReady,
)
from envckpt.facade.instances import InstanceClient
from envckpt.facade.manifest import (
    GymSnapshotManifest,
    InstanceRecord,
    read_manifest,
    write_manifest,
)
from envckpt.facade.snapshot import SESSION, GymEnvironmentSnapshot, SnapshotTimings
from envckpt.gym.summaries import GymCheckpointCommitSummary, GymCheckpointPrepareSummary
from envckpt.ids import mint_checkpoint_id
from envckpt.interfaces import RestoredEnvironmentRollouts
from envckpt.inventory import RolloutInventory, SnapshotContents
from envckpt.machines.binding import MachineState
from envckpt.machines.tables import (
    FRESH,
    HOLDS_RESTORE,
    INSTANCE_LIFECYCLE,
    SNAPSHOT_SESSION,
    SessionState,
)

T = TypeVar("T")
# A failed restore must still clean up even if its own deadline has passed.
CLEANUP_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class CheckpointTimeouts:
    """Budgets, in seconds, turned into absolute deadlines at each step."""

    prepare_seconds: float = 120.0
    commit_seconds: float = 600.0
    control_seconds: float = 60.0
    restore_seconds: float = 600.0
    renew_interval_seconds: float = 60.0
    resume_attempts: int = 3


def _aggregate(operation: str, errors: Mapping[str, BaseException]) -> BaseException:
    """One error for a fan-out: the most severe kind wins, unavailability last."""
    for error in errors.values():
        if not isinstance(error, GymCheckpointUnavailable):
            return error
    failures = {iid: str(error) for iid, error in sorted(errors.items())}
    return GymCheckpointUnavailable(
        f"{operation} failed on {len(errors)} instance(s): {failures}",
        operation=operation,
        failures=failures,
    )


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
        ids = [instance.instance_id for instance in instances]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate Gym instance ids: {sorted(ids)}")
        self._instances = {instance.instance_id: instance for instance in instances}
        self._inventory_source = inventory
        self._clock = clock or SystemClock()
        self.timeouts = timeouts or CheckpointTimeouts()
        self._active: str | None = None
        # Instances whose resume failed every retry: instance id -> checkpoint id.
        self._unresumed: dict[str, str] = {}

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

    # ------------------------------------------------------------------ fan-out

    async def _each(
        self,
        call: Callable[[InstanceClient], Awaitable[T]],
        instances: Iterable[InstanceClient] | None = None,
    ) -> tuple[dict[str, T], dict[str, BaseException]]:
        chosen = list(self._instances.values() if instances is None else instances)
        outcomes = await asyncio.gather(*(call(i) for i in chosen), return_exceptions=True)
        results: dict[str, T] = {}
        errors: dict[str, BaseException] = {}
        for instance, outcome in zip(chosen, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                errors[instance.instance_id] = outcome
            else:
                results[instance.instance_id] = outcome
        return results, errors

    async def _all(
        self, operation: str, call: Callable[[InstanceClient], Awaitable[T]]
    ) -> dict[str, T]:
        results, errors = await self._each(call)
        if errors:
            raise _aggregate(operation, errors)
        return results

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
        await self._all("discover", lambda i: i.discover())
        restart_only = await self._all("discover", lambda i: i.restart_only_servers())
        for instance_id, servers in sorted(restart_only.items()):
            if servers:
                structlog.get_logger("envckpt.facade").warning(
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
        await self._all(
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
        log = structlog.get_logger("envckpt.facade").bind(checkpoint_id=checkpoint_id)
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
                await _stop(renewer)
                await self._abort(checkpoint_id, session)
                raise
            await _stop(renewer)
            await _uncancellable(self._resume_all(checkpoint_id))
            SESSION.fire(session, "resume", checkpoint_id=checkpoint_id)
        finally:
            await _stop(renewer)
            self._active = None

    async def _take(
        self, path: Path, checkpoint_id: str, session: MachineState[SessionState]
    ) -> _Taken:
        clock = self._clock
        await self._all("discover", lambda i: i.discover())
        await self._settle()

        started = clock.now()
        await self._retire_dropped(checkpoint_id)
        retired_at = clock.now()

        crashpoint("snapshot.before_prepare")
        prepare_deadline = self._deadline(self.timeouts.prepare_seconds)
        prepared = await self._all(
            "prepare", lambda i: i.prepare(checkpoint_id, deadline_ts=prepare_deadline)
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
        try:
            summaries = await self._commit_all(checkpoint_id, path, prepared)
            records = {
                iid: InstanceRecord.from_summary(summaries[iid], prepared[iid].restarts)
                for iid in summaries
            }
            manifest = GymSnapshotManifest(checkpoint_id=checkpoint_id, instances=records)
            manifest_bytes = await asyncio.to_thread(write_manifest, path, manifest)
        except BaseException:
            await _stop(renewer)
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
            unowned_live_episodes=sum(len(s.unowned_live_episodes) for s in summaries.values()),
        )
        return _Taken(snapshot, renewer)

    async def _retire_dropped(self, checkpoint_id: str) -> None:
        deadline = self._deadline(self.timeouts.control_seconds)

        async def retire(instance: InstanceClient) -> None:
            dropped = self.inventory.dropped_attempts(instance.instance_id)
            if dropped:
                await instance.retire(checkpoint_id, dropped, deadline_ts=deadline)
                self.inventory.retired(instance.instance_id, dropped)

        await self._all("retire", retire)

    async def _commit_all(
        self,
        checkpoint_id: str,
        path: Path,
        prepared: Mapping[str, GymCheckpointPrepareSummary],
    ) -> dict[str, GymCheckpointCommitSummary]:
        deadline = self._deadline(self.timeouts.commit_seconds)
        log = structlog.get_logger("envckpt.facade").bind(checkpoint_id=checkpoint_id)

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

        return await self._all("commit", commit)

    async def _renew_forever(self, checkpoint_id: str) -> None:
        log = structlog.get_logger("envckpt.facade").bind(checkpoint_id=checkpoint_id)
        while True:
            await self._clock.sleep(self.timeouts.renew_interval_seconds)
            deadline = self._deadline(self.timeouts.commit_seconds)
            _, errors = await self._each(
                functools.partial(_renew_with, checkpoint_id=checkpoint_id, deadline_ts=deadline)
            )
            for iid, error in errors.items():
                log.warning("lease renewal failed", instance_id=iid, error=str(error))

    async def _abort(self, checkpoint_id: str, session: MachineState[SessionState]) -> None:
        """Resume every instance that may hold the open checkpoint; never raises."""
        try:
            await _uncancellable(self._resume_all(checkpoint_id))
        except Exception as error:
            structlog.get_logger("envckpt.facade").warning(
                "abort: resume failed; participants resume at lease expiry",
                checkpoint_id=checkpoint_id,
                error=str(error),
            )
        if SESSION.can_fire(session, "abort"):
            SESSION.fire(session, "abort", checkpoint_id=checkpoint_id)

    async def _resume_all(self, checkpoint_id: str | None) -> None:
        """Resume every instance whose state allows it, retrying failures.

        An instance whose resume failed every retry is remembered with its
        checkpoint id (its participants resume themselves at lease expiry),
        and resumed first by the next snapshot or restore (``_settle``).
        ``checkpoint_id`` None resumes only those.
        """
        errors: dict[str, BaseException] = {}
        for _ in range(max(1, self.timeouts.resume_attempts)):
            states, _ = await self._each(lambda i: i.state())
            pending = [
                self._instances[iid]
                for iid, state in states.items()
                if INSTANCE_LIFECYCLE.destination(state, "resume") is not None
                and (checkpoint_id is not None or iid in self._unresumed)
            ]
            if not pending:
                break
            ids = {
                i.instance_id: self._unresumed.get(i.instance_id, checkpoint_id or "")
                for i in pending
            }
            deadline = self._deadline(self.timeouts.control_seconds)
            _, errors = await self._each(
                functools.partial(_resume_with, ids=ids, deadline_ts=deadline), pending
            )
            for instance in pending:
                if instance.instance_id not in errors:
                    self._unresumed.pop(instance.instance_id, None)
            if not errors:
                break
        for iid in errors:
            self._unresumed.setdefault(iid, checkpoint_id or "")
        if errors:
            raise _aggregate("resume", errors)

    async def _settle(self) -> None:
        """Before a new checkpoint: resume what an earlier one could not."""
        if self._unresumed:
            await self._resume_all(None)

    # ------------------------------------------------------------------ restore

    @contextlib.asynccontextmanager
    async def restored(self, checkpoint_path: Path) -> AsyncIterator[RestoredEnvironmentRollouts]:
        path = Path(checkpoint_path)
        manifest = await asyncio.to_thread(read_manifest, path)
        live, saved = set(self._instances), set(manifest.instances)
        if live != saved:
            raise IncompatibleCheckpoint(
                f"snapshot {manifest.checkpoint_id} holds instances {sorted(saved)}, "
                f"but this run has {sorted(live)}"
            )
        # Only a fresh deployment may restore: refuse before anything is sent.
        states = await self._all("state", lambda i: i.state())
        for iid, state in sorted(states.items()):
            if state not in FRESH:
                raise IllegalTransition(
                    machine=INSTANCE_LIFECYCLE.name, instance=iid, state=state, trigger="restore"
                )
        await self._all("discover", lambda i: i.discover())
        names = await self._all("discover", lambda i: i.participant_names())
        for iid, record in sorted(manifest.instances.items()):
            missing = sorted(set(record.participants) - set(names[iid]))
            if missing:
                raise IncompatibleCheckpoint(
                    f"{iid} lacks participants that saved state in snapshot "
                    f"{manifest.checkpoint_id}: {missing}"
                )
        checkpoint_id = mint_checkpoint_id(f"restore-{manifest.checkpoint_id}")
        self._open(checkpoint_id, "restore")
        try:
            deadline = self._deadline(self.timeouts.restore_seconds)
            _, errors = await self._each(
                lambda i: i.restore(
                    checkpoint_id,
                    str(path),
                    manifest.instances[i.instance_id].episodes,
                    participants=manifest.instances[i.instance_id].participants,
                    source_checkpoint_id=manifest.checkpoint_id,
                    deadline_ts=deadline,
                )
            )
            if errors:
                # All-or-nothing across instances: drop every instance's restore.
                await self._abandon_all(checkpoint_id, manifest)
                raise _aggregate("restore", errors)
            try:
                yield RestoredEnvironmentRollouts(
                    continued_attempts=manifest.continued_attempts(),
                    staging_keys=manifest.staging_keys(),
                )
            except BaseException:
                await self._abandon_all(checkpoint_id, manifest)
                raise
            await self._resume_all(checkpoint_id)
        finally:
            self._active = None

    async def _abandon_all(self, checkpoint_id: str, manifest: GymSnapshotManifest) -> None:
        deadline = max(
            self._deadline(self.timeouts.control_seconds), self._deadline(CLEANUP_SECONDS)
        )

        async def abandon(instance: InstanceClient) -> None:
            state = await instance.state()
            if state in HOLDS_RESTORE:
                episodes: tuple[EnvironmentEpisode, ...] = manifest.instances[
                    instance.instance_id
                ].episodes
                await instance.abandon_restore(checkpoint_id, episodes, deadline_ts=deadline)

        _, errors = await self._each(abandon)
        for iid, error in errors.items():
            structlog.get_logger("envckpt.facade").warning(
                "dropping a restore failed; participants resume at lease expiry",
                instance_id=iid,
                checkpoint_id=checkpoint_id,
                error=str(error),
            )


@dataclass(slots=True)
class _Taken:
    snapshot: GymEnvironmentSnapshot
    renewer: asyncio.Task[None]


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


async def _uncancellable(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even if the caller is cancelled meanwhile.

    Resuming must not stop half-way: instances left committed would refuse
    every later snapshot while the trainer already dispatches again. On
    cancellation the work still finishes first, then the cancellation goes on.
    """
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        raise


async def _resume_with(
    instance: InstanceClient, *, ids: Mapping[str, str], deadline_ts: float
) -> None:
    await instance.resume(ids[instance.instance_id], deadline_ts=deadline_ts)


async def _renew_with(instance: InstanceClient, *, checkpoint_id: str, deadline_ts: float) -> None:
    await instance.renew(checkpoint_id, deadline_ts=deadline_ts)
