"""The participant core: one server's side of the checkpoint protocol.

One core per participant server (per worker of a multi-worker one): the phase
machine (``PARTICIPANT_PHASES``), admission, the lease, replays and restore.
Around it: the ``AttemptFence`` (which attempts may act), ``rules`` (which
call is refused, with which code), ``OpenCheckpoint`` (all that lives while a
checkpoint is open, so ending one is one assignment), ``work`` (closing
admission, stopping retired work), ``commit_write`` and ``restore_read``; the
kind's state is behind ``StateHooks``. ``edge.handle`` calls the control
methods for both transports; episode handlers wrap each call in ``admit``::

    async with core.admit(episode):       # admission_closed / stale_attempt
        ...                               # one turn; ends at a boundary
    await core.prepare(cid, deadline_ts=d)   # waits outside the lock
    await core.commit(cid, deadline_ts=d, checkpoint_dir=p, episode_ids=scope)
    await core.resume(cid, deadline_ts=d)    # also aborts

Why (protocol.md 4): every transition happens under ``_lock``, after the
hook I/O it depends on succeeded; prepare waits for boundaries outside the
lock so resume can interrupt it; a commit's write is its own task, so a
commit past its deadline keeps writing and a retry collects it, and resume
stops a write that has not published; retire raises the mark before it stops
anything, so a racing request is refused. Retire and forget are cleanup
calls, accepted under a finished id. A restore never installs over an attempt
held here; in a process that served the restored rollouts it first retires
their older attempts, under the same lock hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

from envckpt import logs
from envckpt.clock import Clock, SystemClock
from envckpt.episodes import EnvironmentEpisode, sorted_episodes
from envckpt.errors import ParticipantError
from envckpt.ids import validate_path_component
from envckpt.machines.binding import bind
from envckpt.machines.tables import PARTICIPANT_PHASES
from envckpt.participant import commit_write, rules, work
from envckpt.participant.commit_write import CommitArgs, CommitWrite
from envckpt.participant.confinement import DEFAULT_MAX_LEASE_SECONDS, RequestBounds
from envckpt.participant.counters import ParticipantCounters
from envckpt.participant.fence import AttemptFence
from envckpt.participant.hooks import StateHooks
from envckpt.participant.json_state import NonFinite
from envckpt.participant.model_calls import ModelCalls, wait_for_boundary
from envckpt.participant.open_checkpoint import FinishedIds, OpenCheckpoint, restore_reply
from envckpt.participant.readiness import readiness_report
from envckpt.participant.restore_read import install_in_batches, verify_in_thread
from envckpt.participant.scope_table import ScopeTable
from envckpt.participant.status import status_reply
from envckpt.protocol import ErrorCode, Kind, Mode, Phase, parse_kind, parse_mode

DEFAULT_LEASE_GRACE_SECONDS = 600.0

_PHASES = bind(PARTICIPANT_PHASES)
# A commit's scope, sorted; None for everything the participant holds.
Scope = tuple[EnvironmentEpisode, ...] | None


class ParticipantCore:
    """The control plane and admission of one participant server."""

    def __init__(
        self,
        *,
        server_name: str,
        kind: str,
        hooks: StateHooks,
        mode: str = Mode.EXPORT_RESTORE,
        instance: str | None = None,
        clock: Clock | None = None,
        lease_grace: float = DEFAULT_LEASE_GRACE_SECONDS,
        gym_instance_id: str | None = None,
        checkpoint_root: str | os.PathLike[str] | None = None,
        max_lease_seconds: float = DEFAULT_MAX_LEASE_SECONDS,
        model_calls: ModelCalls | None = None,
        non_finite: NonFinite = NonFinite.REFUSE,
    ) -> None:
        self.server_name = server_name
        self.non_finite = non_finite  # NaN in exported state: refused by name, or as Gym writes
        self.kind: Kind = parse_kind(kind)
        self.mode: Mode = parse_mode(mode)
        self.instance = validate_path_component(instance or server_name, what="instance")
        self.hooks = hooks
        self.clock = clock or SystemClock()
        self.lease_grace = lease_grace
        # What the edge lets a request name (confinement.py); no root: unconfined.
        self.bounds = RequestBounds.of(checkpoint_root, max_lease_seconds=max_lease_seconds)
        self.fence = AttemptFence()
        self.model_calls = model_calls  # generations a prepare may refuse (model_calls.py)
        self._phase = _PHASES.new(server_name)
        self.set_gym_instance(gym_instance_id)
        self._lock = asyncio.Lock()
        # Set whenever in-flight work or the phase changes; prepare waits on it.
        self._changed = asyncio.Event()
        self._open: OpenCheckpoint | None = None
        # Public: a joining worker adopts its siblings' ids; a worker hands records over.
        self.finished = FinishedIds()
        self.publish: commit_write.Publisher = commit_write.write_here
        self.served_traffic = False
        self.counters = ParticipantCounters()
        # Test and demo hook, run between records and manifest (a crash: unpublished).
        self.before_publish: list[Callable[[], None]] = []

    def set_gym_instance(self, gym_instance_id: str | None) -> None:
        """The Gym instance ("shard/replica-0") every event of this participant names."""
        self.gym_instance_id = gym_instance_id
        self.log_fields = {"server": self.server_name, "gym_instance_id": gym_instance_id}
        self._phase.log_fields = self.log_fields  # every transition event carries them

    @property
    def log(self) -> logs.EnvckptLogger:
        return logs.get_logger("envckpt.participant").bind(**self.log_fields)

    @property
    def phase(self) -> Phase:
        return self._phase.state

    @property
    def checkpoint_id(self) -> str | None:
        return None if self._open is None else self._open.checkpoint_id

    @property
    def lease_expires_at(self) -> float | None:
        return None if self._open is None else self._open.lease_expires_at

    def report(self) -> dict[str, Any]:
        """Readiness: blockers (capped), counts and restarts, per the mode."""
        return readiness_report(self.mode, self.hooks.live_episodes(), self.fence.in_flight())

    def ready(self) -> bool:
        """``report()["ready"]`` without building the report: nothing blocks a commit."""
        return self.mode is Mode.RESTART_ONLY or not self.fence.has_in_flight

    async def status(self) -> dict[str, Any]:
        async with self._lock:
            await self._expire_if_due()
            return status_reply(self)

    # ------------------------------------------------------------- admission

    @contextlib.asynccontextmanager
    async def admit(self, episode: EnvironmentEpisode | None) -> AsyncIterator[None]:
        """Admit one call of ``episode``'s work; it runs to its boundary on exit."""
        async with self._lock:
            await self._expire_if_due()
            refusal = rules.admission_refusal(episode, self.fence, self.phase, self.checkpoint_id)
            if refusal is not None:
                raise self.counters.refused_with(*refusal)
            assert episode is not None
            self.served_traffic = True
            self.counters.admitted += 1
            self.fence.admitted(episode)
        try:
            yield
        finally:
            self.fence.left(episode)
            self._changed.set()

    # --------------------------------------------------------------- prepare

    async def prepare(self, checkpoint_id: str, *, deadline_ts: float) -> dict[str, Any]:
        async with self._lock:
            await self._expire_if_due()
            self.finished.refuse(checkpoint_id)
            rules.check_deadline(self.clock.now(), deadline_ts, "prepare")
            if self._open is None:
                await work.close_admission(self.hooks)  # reopens and raises if it fails
                self._open = OpenCheckpoint(checkpoint_id)
                self.counters.checkpoints_opened += 1
            else:
                replayed = rules.prepare_replay(self._open, checkpoint_id, phase=self.phase)
                if replayed is not None:
                    self._arm_lease(deadline_ts)
                    return replayed
            _PHASES.fire(self._phase, "prepare", checkpoint_id=checkpoint_id)
            self._arm_lease(deadline_ts)
            self._changed.set()
        await self._wait_for_boundary(checkpoint_id, deadline_ts)
        async with self._lock:
            await self._expire_if_due()
            open_ = rules.still_preparing(self._open, checkpoint_id, phase=self.phase)
            if open_.prepare_reply is not None:
                return open_.prepare_reply  # a concurrent repeat got there first
            report = self.report()
            if not report["ready"]:
                return {"phase": self.phase, "report": report}
            _PHASES.fire(self._phase, "ready", checkpoint_id=checkpoint_id)
            open_.prepared_restarts = frozenset(
                EnvironmentEpisode.from_capture_key(key) for key in report["restarts"]
            )
            open_.prepare_reply = {"phase": self.phase, "report": report}
            return open_.prepare_reply

    async def _wait_for_boundary(self, checkpoint_id: str, deadline_ts: float) -> None:
        def preparing() -> bool:  # False once resumed (aborted) meanwhile
            return self.checkpoint_id == checkpoint_id and self.phase is Phase.PREPARING

        await wait_for_boundary(
            checkpoint_id, deadline_ts, clock=self.clock, changed=self._changed,
            preparing=preparing, ready=self.ready, calls=self.model_calls,
        )  # fmt: skip

    async def renew(self, checkpoint_id: str, *, deadline_ts: float) -> dict[str, Any]:
        async with self._lock:
            await self._expire_if_due()
            self.finished.refuse(checkpoint_id)
            rules.check_deadline(self.clock.now(), deadline_ts, "renew")
            if self._open is None:
                raise ParticipantError(ErrorCode.INVALID_PHASE, "no checkpoint is open to renew")
            rules.require_open(self._open, checkpoint_id)
            self._arm_lease(deadline_ts)
            return {"lease_expires_at": self.lease_expires_at}

    # ---------------------------------------------------------------- commit

    async def commit(
        self,
        checkpoint_id: str,
        *,
        deadline_ts: float,
        checkpoint_dir: str,
        episode_ids: Iterable[EnvironmentEpisode] | None,
        stop: bool = False,
    ) -> dict[str, Any]:
        scope = None if episode_ids is None else sorted_episodes(episode_ids)
        args: CommitArgs = (checkpoint_dir, scope, stop)
        async with self._lock:
            await self._expire_if_due()
            self.finished.refuse(checkpoint_id)
            rules.check_deadline(self.clock.now(), deadline_ts, "commit")
            write = None if self._open is None else self._open.commit
            if write is not None and write.checkpoint_id == checkpoint_id:
                rules.check_commit_replay(checkpoint_id, write.args, args)
                if write.failed() and self.phase is Phase.PREPARED:
                    # The write failed before publishing (nothing is published
                    # yet, so the directory is not restorable): write again.
                    write = self._start_write(checkpoint_id, args, scope)
            else:
                rules.check_commit(
                    self._open,
                    checkpoint_id,
                    phase=self.phase,
                    ready=self.ready(),
                    scope=scope,
                )
                write = self._start_write(checkpoint_id, args, scope)
            self._arm_lease(deadline_ts)
        timeout = max(0.0, deadline_ts - self.clock.now())
        done, _ = await asyncio.wait({write.task}, timeout=timeout)
        if not done:
            raise ParticipantError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"commit {checkpoint_id} is still writing; retry to collect its result",
            )
        return write.task.result()

    def _start_write(self, checkpoint_id: str, args: CommitArgs, scope: Scope) -> CommitWrite:
        assert self._open is not None
        write = CommitWrite(checkpoint_id, args)
        write.start(self._write(write, scope))
        self._open.commit = write
        return write

    async def _write(self, write: CommitWrite, scope: Scope) -> dict[str, Any]:
        """The write, then ``commit`` fired and restored attempts left out deleted."""
        checkpoint_dir, _, stop = write.args
        exported = commit_write.export_and_write(
            write,
            hooks=self.hooks,
            kind=self.kind,
            instance=self.instance,
            checkpoint_dir=Path(checkpoint_dir),
            scope=scope,
            current=self.fence.current,
            before_publish=self.before_publish,
            server=self.server_name,
            non_finite=self.non_finite,
            publish=self.publish,
        )
        reply = await commit_write.counted(self.counters, exported)
        async with self._lock:
            open_ = self._open
            if open_ is not None and open_.commit is write and self.phase is Phase.PREPARED:
                _PHASES.fire(self._phase, "commit", checkpoint_id=write.checkpoint_id)
            # Restored attempts that never ran and that the scope leaves out
            # will not be continued: free their state, but fence nothing (as
            # Gym does), so the controller may start one over as that attempt.
            dropped = () if scope is None else self.fence.drop_unstarted_outside(scope)
        if dropped:
            await self.hooks.retire(dropped)
        if stop:
            self.hooks.release_exported()
        return reply

    # --------------------------------------------------------------- restore

    async def restore(
        self,
        checkpoint_id: str,
        *,
        deadline_ts: float,
        checkpoint_dir: str,
        episode_ids: Iterable[EnvironmentEpisode],
    ) -> dict[str, Any]:
        # Sorted ids and attempts, no object per episode: kept by the fence (scope_table.py).
        scope = ScopeTable.of(episode_ids)
        args = (checkpoint_dir, scope)
        async with self._lock:
            await self._expire_if_due()
            self.finished.refuse(checkpoint_id)
            replayed = rules.restore_replay(self._open, checkpoint_id, args, phase=self.phase)
            if replayed is not None:
                return replayed
            rules.check_deadline(self.clock.now(), deadline_ts, "restore")
            held_here = self.hooks.live_episodes() | self.fence.in_flight()
            # Only the held rollouts' scope episodes can conflict: the others are not made.
            rules.check_restorable(scope.of_rollouts(e.rollout_id for e in held_here), held_here)
            source = await verify_in_thread(
                Path(checkpoint_dir),
                hooks=self.hooks,
                kind=self.kind,
                instance=self.instance,
                scope=scope,
                allow_nan=self.non_finite is NonFinite.GYM,
            )
            # Everything validated; nothing has changed yet.
            rules.check_deadline(self.clock.now(), deadline_ts, "restore")
            await work.close_admission(self.hooks)  # as prepare: closed until resume
            held = self.fence.held_rollouts(scope, self.hooks.live_episodes())
            try:
                # A process that served these rollouts: their older attempts
                # are retired (marks first, then stopped and freed) before the
                # next ones are installed, under one lock hold, so no call sees
                # both. A failure installs nothing; the marks stay, as after a
                # failed retire.
                self.fence.retire(held)
                if held:
                    await work.stop_retired(
                        self.hooks, self.fence, self.clock, self._changed, held, deadline_ts
                    )
                installed = await install_in_batches(source, self.hooks)
            except BaseException:
                with contextlib.suppress(Exception):
                    await self.hooks.open_admission()  # phase and admission agree
                raise
            self.fence.restored(scope, installed)
            _PHASES.fire(self._phase, "restore", checkpoint_id=checkpoint_id)
            self.counters.restores += 1
            self.served_traffic = True  # installed state counts as traffic (status)
            reply = restore_reply(checkpoint_id, source.checkpoint_id, scope, installed)
            del source  # the verified checkpoint: its thread and identity go now
            self._open = OpenCheckpoint(checkpoint_id, restore=(args, reply))
            self._arm_lease(deadline_ts)
            return reply()

    async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> dict[str, Any]:
        del deadline_ts  # resume never waits on anything that could overrun
        async with self._lock:
            await self._expire_if_due()
            if checkpoint_id in self.finished:
                return {"phase": Phase.IDLE, "idempotent": True}
            if self._open is None:
                # Never opened here: fence it so a late prepare is refused.
                self.finished.add(checkpoint_id)
                return {"phase": Phase.IDLE, "idempotent": True}
            rules.require_open(self._open, checkpoint_id)
            await self._abort("resume")
            return {"phase": Phase.IDLE, "idempotent": False}

    async def _expire_if_due(self) -> None:
        """A participant left open past its lease resumes itself (an abort)."""
        lease = self.lease_expires_at
        if lease is not None and self.clock.now() > lease:
            self.log.warning("lease expired; resuming", checkpoint_id=self.checkpoint_id)
            await self._abort("expire")

    async def expire_if_due(self) -> None:
        """Run the lease check now (a watchdog calls this periodically)."""
        async with self._lock:
            await self._expire_if_due()

    async def run_lease_watchdog(self, interval: float = 1.0) -> None:
        """Check the lease every ``interval`` seconds until cancelled."""
        while True:
            await self.clock.sleep(interval)
            await self.expire_if_due()

    async def _abort(self, trigger: str) -> None:
        open_ = self._open
        assert open_ is not None
        if open_.commit is not None and not open_.commit.task.done():
            open_.commit.aborted = True  # the write refuses to publish
        with contextlib.suppress(Exception):
            await self.hooks.open_admission()
        _PHASES.fire(self._phase, trigger, checkpoint_id=open_.checkpoint_id)
        self.counters.ended(trigger)
        self.finished.add(open_.checkpoint_id)
        self._open = None
        self._changed.set()

    async def retire(
        self, checkpoint_id: str, *, deadline_ts: float, episode_ids: Iterable[EnvironmentEpisode]
    ) -> dict[str, Any]:
        episodes = tuple(episode_ids)
        async with self._lock:
            await self._expire_if_due()
            self._check_cleanup(checkpoint_id, deadline_ts, "retire")
            # The mark goes up before anything stops, and stays if stopping fails.
            self.fence.retire(episodes)
            self.counters.retired_attempts += len(episodes)
        await work.stop_retired(
            self.hooks, self.fence, self.clock, self._changed, episodes, deadline_ts
        )
        return {"retired": [episode.capture_key for episode in episodes]}

    async def forget(
        self, checkpoint_id: str, *, deadline_ts: float, rollout_ids: Iterable[str]
    ) -> dict[str, Any]:
        ids = sorted(set(rollout_ids))
        async with self._lock:
            await self._expire_if_due()
            self._check_cleanup(checkpoint_id, deadline_ts, "forget")
            # Accepted while a rollout still holds state: the marks go, the
            # state is left to retire (and keeps its attempt current).
            self.fence.forget(ids, live=self.hooks.live_episodes())
            self.hooks.forget(ids)
            return {"forgotten": ids}

    def _check_cleanup(self, checkpoint_id: str, deadline_ts: float, operation: str) -> None:
        """Retire, forget: idle or restored (same id), in time; a finished id is fine.

        They are cleanup calls: "resume to abort, then retire the stragglers"
        reuses the finished id. While restored they renew the lease.
        """
        rules.require_no_checkpoint_open(self.phase, self._open, checkpoint_id, operation)
        rules.check_deadline(self.clock.now(), deadline_ts, operation)
        if self.phase is Phase.RESTORED:
            self._arm_lease(deadline_ts)

    def _arm_lease(self, deadline_ts: float) -> None:
        assert self._open is not None
        self._open.arm_lease(deadline_ts, grace=self.lease_grace)
