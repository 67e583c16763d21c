"""The participant core: one server's side of the checkpoint protocol.

One core per participant server. It owns the phase machine
(``PARTICIPANT_PHASES``), admission, the lease, fencing of finished ids,
replays, retire marks and fresh-process restore; the kind's state lives
behind ``StateHooks``. Transports (``edge.py`` for both the in-process
deployment and the FastAPI routes) call the control methods; the server's own
episode handlers wrap each call in ``admit``::

    core = ParticipantCore(server_name="agent", kind="agent", hooks=AgentState())
    async with core.admit(episode):       # admission_closed / stale_attempt
        ...                               # one turn; ends at a boundary
    await core.prepare(cid, deadline_ts=d)   # waits outside the lock
    await core.commit(cid, deadline_ts=d, checkpoint_dir=p, episode_ids=scope)
    await core.resume(cid, deadline_ts=d)    # also aborts

Rules (protocol.md 4), and why:

* Every transition happens under ``_lock`` and only after the hook I/O it
  depends on succeeded, so a failed hook leaves the phase as it was.
* prepare waits for boundaries *outside* the lock so resume can interrupt it.
* A commit's write runs in its own task: a commit past its deadline fails
  ``deadline_exceeded`` but the write goes on, and a retry returns its result.
  Resume stops a write that has not published its manifest yet.
* Retire raises the per-rollout mark before it stops anything, so a request
  racing the retire is refused rather than half-served.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from envckpt.clock import Clock, SystemClock
from envckpt.episodes import EnvironmentEpisode, capture_keys, sorted_episodes
from envckpt.errors import CorruptCheckpoint, ParticipantError
from envckpt.ids import validate_path_component
from envckpt.machines.binding import bind
from envckpt.machines.tables import PARTICIPANT_PHASES
from envckpt.participant import store
from envckpt.participant.hooks import StateHooks
from envckpt.protocol import MODES, STAGES

DEFAULT_LEASE_GRACE_SECONDS = 600.0
FINISHED_IDS_KEPT = 64
MAX_BLOCKERS_REPORTED = 100

_PHASES = bind(PARTICIPANT_PHASES)


class _WriteAborted(Exception):
    """Raised inside a commit write that resume stopped before publishing."""


@dataclass(slots=True)
class _CommitWrite:
    checkpoint_id: str
    args: tuple[str, tuple[str, ...] | None, bool]
    aborted: bool = False
    # Set right after construction: the write checks its own ``aborted`` flag.
    task: asyncio.Task[dict[str, Any]] = field(init=False)


@dataclass(slots=True)
class _Restore:
    checkpoint_id: str
    args: tuple[str, tuple[str, ...]]
    reply: dict[str, Any]


@dataclass(slots=True)
class _Counters:
    """Per-participant numbers for status and metrics."""

    admitted: int = 0
    refused: dict[str, int] = field(default_factory=dict)


def _retrieve_outcome(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


class ParticipantCore:
    """The control plane and admission of one participant server."""

    def __init__(
        self,
        *,
        server_name: str,
        kind: str,
        hooks: StateHooks,
        mode: str = "export_restore",
        instance: str | None = None,
        clock: Clock | None = None,
        lease_grace: float = DEFAULT_LEASE_GRACE_SECONDS,
    ) -> None:
        if kind not in STAGES:
            raise ValueError(f"unknown participant kind {kind!r}")
        if mode not in MODES:
            raise ValueError(f"unknown participant mode {mode!r}")
        self.server_name = server_name
        self.kind = kind
        self.mode = mode
        self.instance = validate_path_component(instance or server_name, what="instance")
        self.hooks = hooks
        self.clock = clock or SystemClock()
        self.lease_grace = lease_grace
        self._phase = _PHASES.new(server_name)
        self._lock = asyncio.Lock()
        # Set whenever in-flight work or the phase changes; prepare waits on it.
        self._changed = asyncio.Event()
        self._checkpoint_id: str | None = None
        self._lease_expires_at: float | None = None
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._served_traffic = False
        self._retire_marks: dict[str, int] = {}
        # Attempts a restore installed that no call has touched yet.
        self._unstarted: set[EnvironmentEpisode] = set()
        self._latest_attempt: dict[str, int] = {}
        self._in_flight: dict[EnvironmentEpisode, int] = {}
        self._prepare_reply: dict[str, Any] | None = None
        self._prepared_restarts: frozenset[EnvironmentEpisode] = frozenset()
        self._commit: _CommitWrite | None = None
        self._restore: _Restore | None = None
        self.counters = _Counters()
        # Test and demo hook: called by the commit write between records and
        # manifest (a crash there leaves an unpublished directory).
        self.before_publish: list[Any] = []

    # ------------------------------------------------------------------ views

    @property
    def phase(self) -> str:
        return self._phase.state

    @property
    def checkpoint_id(self) -> str | None:
        return self._checkpoint_id

    @property
    def lease_expires_at(self) -> float | None:
        return self._lease_expires_at

    @property
    def served_traffic(self) -> bool:
        return self._served_traffic

    def retire_mark(self, rollout_id: str) -> int | None:
        return self._retire_marks.get(rollout_id)

    def is_current(self, episode: EnvironmentEpisode) -> bool:
        """Whether ``episode`` may still act (not retired, not superseded)."""
        mark = self._retire_marks.get(episode.rollout_id)
        latest = self._latest_attempt.get(episode.rollout_id, episode.attempt)
        return (mark is None or episode.attempt > mark) and episode.attempt >= latest

    def in_flight(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self._in_flight)

    def report(self) -> dict[str, Any]:
        """Readiness: blockers (capped), counts and restarts, per the mode."""
        in_flight = frozenset(self._in_flight)
        live = self.hooks.live_episodes() | in_flight
        if self.mode == "restart_only":
            # Nothing is saved, so every live episode restarts; never wait.
            blockers: list[str] = []
            restarts = capture_keys(live)
        else:
            blockers = capture_keys(in_flight)
            restarts = []
        return {
            "ready": not blockers,
            "blockers": blockers[:MAX_BLOCKERS_REPORTED],
            "blocker_count": len(blockers),
            "counts": {
                "live": len(live),
                "in_flight": len(in_flight),
                "parked": len(live - in_flight),
                "restarts": len(restarts),
            },
            "restarts": restarts,
        }

    async def status(self) -> dict[str, Any]:
        async with self._lock:
            await self._expire_if_due()
            return {
                "kind": self.kind,
                "mode": self.mode,
                "instance": self.instance,
                "server_name": self.server_name,
                "phase": self.phase,
                "checkpoint_id": self._checkpoint_id,
                "lease_expires_at": self._lease_expires_at,
                "retired_rollouts": len(self._retire_marks),
                "served_traffic": self._served_traffic,
                "report": self.report(),
            }

    # ------------------------------------------------------------- admission

    @contextlib.asynccontextmanager
    async def admit(self, episode: EnvironmentEpisode | None) -> AsyncIterator[None]:
        """Admit one call of ``episode``'s work; it runs to its boundary on exit."""
        async with self._lock:
            await self._expire_if_due()
            self._check_admissible(episode)
            assert episode is not None
            self._served_traffic = True
            self.counters.admitted += 1
            self._latest_attempt[episode.rollout_id] = max(
                episode.attempt, self._latest_attempt.get(episode.rollout_id, 0)
            )
            self._in_flight[episode] = self._in_flight.get(episode, 0) + 1
            self._unstarted.discard(episode)
        try:
            yield
        finally:
            remaining = self._in_flight.get(episode, 1) - 1
            if remaining:
                self._in_flight[episode] = remaining
            else:
                self._in_flight.pop(episode, None)
            self._changed.set()

    def _check_admissible(self, episode: EnvironmentEpisode | None) -> None:
        if episode is None:
            raise self._refuse("rollout_id_required", "episode work needs a rollout identity")
        mark = self._retire_marks.get(episode.rollout_id)
        if mark is not None and episode.attempt <= mark:
            raise self._refuse("stale_attempt", f"{episode.capture_key} is retired (mark a{mark})")
        latest = self._latest_attempt.get(episode.rollout_id)
        if latest is not None and episode.attempt < latest:
            raise self._refuse(
                "stale_attempt", f"{episode.capture_key} is superseded by attempt {latest}"
            )
        if self.phase != "idle":
            raise self._refuse(
                "admission_closed", f"checkpoint {self._checkpoint_id} is open ({self.phase})"
            )

    def _refuse(self, code: str, detail: str) -> ParticipantError:
        self.counters.refused[code] = self.counters.refused.get(code, 0) + 1
        return ParticipantError(code, detail)

    # --------------------------------------------------------------- prepare

    async def prepare(self, checkpoint_id: str, *, deadline_ts: float) -> dict[str, Any]:
        async with self._lock:
            await self._expire_if_due()
            self._refuse_finished(checkpoint_id)
            if self.phase == "idle":
                try:
                    await self.hooks.close_admission()
                except Exception as error:
                    # Closing failed half-way: reopen and stay idle.
                    with contextlib.suppress(Exception):
                        await self.hooks.open_admission()
                    raise ParticipantError(
                        "checkpoint_error", f"closing admission failed: {error}"
                    ) from error
                self._checkpoint_id = checkpoint_id
            else:
                self._require_open(checkpoint_id)
                if self.phase == "prepared" and self._prepare_reply is not None:
                    self._arm_lease(deadline_ts)
                    return self._prepare_reply  # recorded, replayed verbatim
                if self.phase != "preparing":
                    raise ParticipantError(
                        "invalid_phase", f"prepare is not legal in phase {self.phase}"
                    )
            _PHASES.fire(self._phase, "prepare", checkpoint_id=checkpoint_id)
            self._arm_lease(deadline_ts)
            self._changed.set()
        await self._wait_for_boundary(checkpoint_id, deadline_ts)
        async with self._lock:
            await self._expire_if_due()
            if (
                self._checkpoint_id == checkpoint_id
                and self.phase == "prepared"
                and self._prepare_reply is not None
            ):
                # A concurrent repeat of this prepare got there first.
                return self._prepare_reply
            if self._checkpoint_id != checkpoint_id or self.phase != "preparing":
                raise ParticipantError(
                    "stale_checkpoint", f"checkpoint {checkpoint_id} was resumed while preparing"
                )
            report = self.report()
            if not report["ready"]:
                return {"phase": self.phase, "report": report}
            _PHASES.fire(self._phase, "ready", checkpoint_id=checkpoint_id)
            self._prepared_restarts = frozenset(
                EnvironmentEpisode.from_capture_key(key) for key in report["restarts"]
            )
            self._prepare_reply = {"phase": self.phase, "report": report}
            return self._prepare_reply

    async def _wait_for_boundary(self, checkpoint_id: str, deadline_ts: float) -> None:
        while True:
            self._changed.clear()
            if self._checkpoint_id != checkpoint_id or self.phase != "preparing":
                return  # resumed (aborted) meanwhile
            if self.report()["ready"]:
                return
            if not await self.clock.wait_for_event(self._changed, deadline_ts):
                return

    # ----------------------------------------------------------------- renew

    async def renew(self, checkpoint_id: str, *, deadline_ts: float) -> dict[str, Any]:
        async with self._lock:
            await self._expire_if_due()
            self._refuse_finished(checkpoint_id)
            if self.phase == "idle":
                raise ParticipantError("invalid_phase", "no checkpoint is open to renew")
            self._require_open(checkpoint_id)
            self._arm_lease(deadline_ts)
            return {"lease_expires_at": self._lease_expires_at}

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
        scope = None if episode_ids is None else tuple(sorted(set(episode_ids)))
        scope_keys = None if scope is None else tuple(e.capture_key for e in scope)
        args = (checkpoint_dir, scope_keys, stop)
        async with self._lock:
            await self._expire_if_due()
            self._refuse_finished(checkpoint_id)
            write = self._commit
            if write is not None and write.checkpoint_id == checkpoint_id:
                if write.args != args:
                    raise ParticipantError(
                        "checkpoint_conflict",
                        f"commit {checkpoint_id} was already sent with another directory or scope",
                    )
                if _failed(write.task) and self.phase == "prepared":
                    # The write failed before publishing (nothing is published
                    # yet, so the directory is not restorable): write again.
                    write = self._start_write(
                        checkpoint_id, args, Path(checkpoint_dir), scope, stop
                    )
            else:
                self._check_commit_allowed(checkpoint_id, scope)
                write = self._start_write(checkpoint_id, args, Path(checkpoint_dir), scope, stop)
            self._arm_lease(deadline_ts)
        timeout = max(0.0, deadline_ts - self.clock.now())
        done, _ = await asyncio.wait({write.task}, timeout=timeout)
        if not done:
            raise ParticipantError(
                "deadline_exceeded",
                f"commit {checkpoint_id} is still writing; retry to collect its result",
            )
        return write.task.result()

    def _start_write(
        self,
        checkpoint_id: str,
        args: tuple[str, tuple[str, ...] | None, bool],
        checkpoint_dir: Path,
        scope: tuple[EnvironmentEpisode, ...] | None,
        stop: bool,
    ) -> _CommitWrite:
        write = _CommitWrite(checkpoint_id, args)
        write.task = asyncio.create_task(self._write(write, checkpoint_dir, scope, stop))
        # Nobody may collect a write that resume stopped: retrieve its
        # outcome so asyncio does not warn about an unretrieved error.
        write.task.add_done_callback(_retrieve_outcome)
        self._commit = write
        return write

    def _check_commit_allowed(
        self, checkpoint_id: str, scope: tuple[EnvironmentEpisode, ...] | None
    ) -> None:
        if self._checkpoint_id is None:
            raise ParticipantError("invalid_phase", "no checkpoint is open; prepare first")
        self._require_open(checkpoint_id)
        if self.phase != "prepared":
            raise ParticipantError("invalid_phase", f"commit is not legal in phase {self.phase}")
        if not self.report()["ready"]:
            # restart_only never waits, so its in-flight work is no blocker.
            raise ParticipantError("invalid_phase", "no longer ready: episodes left their boundary")
        if scope is None and self.kind == "model":
            raise ParticipantError("invalid_request", "the policy model requires a commit scope")
        in_scope = frozenset() if scope is None else self._prepared_restarts & set(scope)
        if in_scope:
            raise ParticipantError(
                "restart_in_scope",
                f"scope names reported restarts: {capture_keys(in_scope)[:10]}",
            )

    async def _write(
        self,
        write: _CommitWrite,
        checkpoint_dir: Path,
        scope: tuple[EnvironmentEpisode, ...] | None,
        stop: bool,
    ) -> dict[str, Any]:
        """Export once, write records and manifest, then fire ``commit``."""
        checkpoint_id = write.checkpoint_id
        if write.aborted:
            # Resumed before this task first ran: leave no files behind at all.
            raise ParticipantError(
                "stale_checkpoint", f"commit {checkpoint_id} was aborted before publishing"
            )
        wanted = self.hooks.live_episodes() if scope is None else frozenset(scope)
        # Admission stays closed until this write ends or is aborted (and an
        # aborted write never publishes), so the exported state stays quiet
        # while the worker thread serialises it.
        exported_states = list(self.hooks.export(wanted))
        exported = sorted_episodes(episode for episode, _ in exported_states)
        extras = self.hooks.commit_extras(exported)
        keys = capture_keys(exported)
        records = [{"capture_key": e.capture_key, "state": s} for e, s in exported_states]

        def before_publish() -> None:
            for hook in list(self.before_publish):
                hook()
            # Checked last, right before the manifest link: a resume during a
            # slow pre-publish step must still stop the write. The flag is this
            # write's own, so a newer checkpoint's write cannot vouch for it.
            if write.aborted:
                raise _WriteAborted(checkpoint_id)

        try:
            manifest = await asyncio.to_thread(
                store.write_checkpoint,
                checkpoint_dir,
                kind=self.kind,
                instance=self.instance,
                checkpoint_id=checkpoint_id,
                records=records,
                extras={"episode_ids": keys, **extras},
                before_publish=before_publish,
            )
        except _WriteAborted:
            raise ParticipantError(
                "stale_checkpoint", f"commit {checkpoint_id} was aborted before publishing"
            ) from None
        except CorruptCheckpoint as error:
            raise ParticipantError("invalid_checkpoint_state", str(error)) from error
        except OSError as error:
            raise ParticipantError("checkpoint_error", f"writing failed: {error}") from error
        reply = {
            "phase": "committed",
            "checkpoint_id": checkpoint_id,
            "manifest": manifest.to_json(),
            "episode_ids": keys,
            **extras,
        }
        async with self._lock:
            if self._commit is write and self.phase == "prepared":
                _PHASES.fire(self._phase, "commit", checkpoint_id=checkpoint_id)
            # Restored attempts that never ran and that the scope leaves out
            # will not be continued: fence them and free their state.
            dropped = () if scope is None else tuple(sorted(self._unstarted - set(scope)))
            for episode in dropped:
                mark = self._retire_marks.get(episode.rollout_id, -1)
                self._retire_marks[episode.rollout_id] = max(mark, episode.attempt)
            self._unstarted.difference_update(dropped)
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
        scope = frozenset(episode_ids)
        args = (checkpoint_dir, tuple(capture_keys(scope)))
        async with self._lock:
            await self._expire_if_due()
            self._refuse_finished(checkpoint_id)
            previous = self._restore
            if previous is not None and previous.checkpoint_id == checkpoint_id:
                if previous.args != args:
                    raise ParticipantError(
                        "checkpoint_conflict",
                        f"restore {checkpoint_id} was already sent with other arguments",
                    )
                return previous.reply
            if self.phase != "idle":
                self._require_open(checkpoint_id)
                raise ParticipantError("invalid_phase", f"restore is not legal in {self.phase}")
            if self._served_traffic:
                raise ParticipantError(
                    "invalid_phase", "restore needs a fresh process; this one served traffic"
                )
            self._check_deadline(deadline_ts, "restore")
            try:
                source, plans = await asyncio.to_thread(
                    self._read_and_validate, Path(checkpoint_dir), scope
                )
            except (CorruptCheckpoint, ValueError, KeyError, TypeError) as error:
                raise ParticipantError("invalid_checkpoint_state", str(error)) from error
            except OSError as error:
                raise ParticipantError("invalid_checkpoint_state", str(error)) from error
            # Everything validated; past here nothing may fail half-way.
            self._check_deadline(deadline_ts, "restore")
            self.hooks.install(plans)
            self._unstarted.update(episode for episode, _ in plans)
            for episode in scope:
                self._latest_attempt[episode.rollout_id] = max(
                    episode.attempt + 1, self._latest_attempt.get(episode.rollout_id, 0)
                )
            _PHASES.fire(self._phase, "restore", checkpoint_id=checkpoint_id)
            # Installed state counts as traffic: a second restore into this
            # process (under another id) would mix two checkpoints' state.
            self._served_traffic = True
            self._checkpoint_id = checkpoint_id
            self._arm_lease(deadline_ts)
            reply = {
                "phase": "restored",
                "checkpoint_id": checkpoint_id,
                "source_checkpoint_id": source,
                "restored": capture_keys(episode for episode, _ in plans),
            }
            self._restore = _Restore(checkpoint_id, args, reply)
            return reply

    def _read_and_validate(
        self, checkpoint_dir: Path, scope: frozenset[EnvironmentEpisode]
    ) -> tuple[str, list[tuple[EnvironmentEpisode, object]]]:
        """Read every in-scope record and validate it; install nothing."""
        manifest = store.read_manifest(checkpoint_dir, kind=self.kind, instance=self.instance)
        store.verify_records(checkpoint_dir, manifest)
        plans: list[tuple[EnvironmentEpisode, object]] = []
        seen: set[EnvironmentEpisode] = set()
        for record in store.iter_records(checkpoint_dir, manifest):
            if set(record) != {"capture_key", "state"} or not isinstance(record["state"], Mapping):
                raise ValueError(f"malformed record {list(record)[:5]}")
            episode = EnvironmentEpisode.from_capture_key(record["capture_key"])
            if episode in seen:
                raise ValueError(f"two records for {episode.capture_key}")
            seen.add(episode)
            if episode in scope:
                plans.append(
                    (episode.next_attempt(), self.hooks.validate(episode, record["state"]))
                )
        return manifest.checkpoint_id, plans

    # ---------------------------------------------------------------- resume

    async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> dict[str, Any]:
        del deadline_ts  # resume never waits on anything that could overrun
        async with self._lock:
            await self._expire_if_due()
            if checkpoint_id in self._finished:
                return {"phase": "idle", "idempotent": True}
            if self.phase == "idle":
                # Never opened here: fence it so a late prepare is refused.
                self._finish(checkpoint_id)
                return {"phase": "idle", "idempotent": True}
            self._require_open(checkpoint_id)
            await self._abort("resume")
            return {"phase": "idle", "idempotent": False}

    async def _expire_if_due(self) -> None:
        """A participant left open past its lease resumes itself (an abort)."""
        if (
            self.phase != "idle"
            and self._lease_expires_at is not None
            and self.clock.now() > self._lease_expires_at
        ):
            structlog.get_logger("envckpt.participant").warning(
                "lease expired; resuming",
                server=self.server_name,
                checkpoint_id=self._checkpoint_id,
            )
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
        checkpoint_id = self._checkpoint_id
        if self._commit is not None and not self._commit.task.done():
            self._commit.aborted = True  # the write refuses to publish
        with contextlib.suppress(Exception):
            await self.hooks.open_admission()
        _PHASES.fire(self._phase, trigger, checkpoint_id=checkpoint_id)
        if checkpoint_id is not None:
            self._finish(checkpoint_id)
        self._checkpoint_id = None
        self._lease_expires_at = None
        self._prepare_reply = None
        self._prepared_restarts = frozenset()
        self._commit = None
        self._changed.set()

    def _finish(self, checkpoint_id: str) -> None:
        self._finished[checkpoint_id] = None
        while len(self._finished) > FINISHED_IDS_KEPT:
            self._finished.popitem(last=False)

    # ---------------------------------------------------------- retire/forget

    async def retire(
        self, checkpoint_id: str, *, deadline_ts: float, episode_ids: Iterable[EnvironmentEpisode]
    ) -> dict[str, Any]:
        episodes = tuple(episode_ids)
        async with self._lock:
            await self._expire_if_due()
            self._refuse_finished(checkpoint_id)
            self._require_no_checkpoint_open(checkpoint_id, "retire")
            # The mark goes up before anything stops, and stays if stopping fails.
            for episode in episodes:
                mark = self._retire_marks.get(episode.rollout_id, -1)
                self._retire_marks[episode.rollout_id] = max(mark, episode.attempt)
            if self.phase == "restored":
                self._arm_lease(deadline_ts)
        try:
            await self.hooks.retire(episodes)
        except Exception as error:
            raise ParticipantError(
                "checkpoint_error", f"stopping retired work failed: {error}"
            ) from error
        retired = frozenset(episodes)
        while any(
            e.rollout_id == r.rollout_id and e.attempt <= r.attempt
            for e in self._in_flight
            for r in retired
        ):
            # A retire cut short leaves the work tracked: it blocks the next prepare.
            self._changed.clear()
            if not await self.clock.wait_for_event(self._changed, deadline_ts):
                raise ParticipantError(
                    "deadline_exceeded", "retired work did not stop before the deadline"
                )
        return {"retired": [episode.capture_key for episode in episodes]}

    async def forget(
        self, checkpoint_id: str, *, deadline_ts: float, rollout_ids: Iterable[str]
    ) -> dict[str, Any]:
        ids = sorted(set(rollout_ids))
        async with self._lock:
            await self._expire_if_due()
            self._refuse_finished(checkpoint_id)
            self._require_no_checkpoint_open(checkpoint_id, "forget")
            live = self.hooks.live_episodes() | frozenset(self._in_flight)
            busy = sorted({e.rollout_id for e in live if e.rollout_id in ids})
            if busy:
                raise ParticipantError(
                    "invalid_phase",
                    f"rollouts still have live state and cannot be forgotten: {busy[:10]}",
                )
            for rollout_id in ids:
                self._retire_marks.pop(rollout_id, None)
                self._latest_attempt.pop(rollout_id, None)
            self.hooks.forget(ids)
            if self.phase == "restored":
                self._arm_lease(deadline_ts)
            return {"forgotten": ids}

    # --------------------------------------------------------------- helpers

    def _require_no_checkpoint_open(self, checkpoint_id: str, operation: str) -> None:
        if self.phase in ("preparing", "prepared", "committed"):
            raise ParticipantError(
                "invalid_phase",
                f"{operation} is refused while checkpoint {self._checkpoint_id} is open",
            )
        if self.phase == "restored":
            self._require_open(checkpoint_id)

    def _require_open(self, checkpoint_id: str) -> None:
        if self._checkpoint_id != checkpoint_id:
            raise ParticipantError(
                "checkpoint_conflict",
                f"checkpoint {self._checkpoint_id} is open, not {checkpoint_id}",
            )

    def _refuse_finished(self, checkpoint_id: str) -> None:
        if checkpoint_id in self._finished:
            raise ParticipantError("stale_checkpoint", f"checkpoint {checkpoint_id} has finished")

    def _check_deadline(self, deadline_ts: float, operation: str) -> None:
        if self.clock.now() > deadline_ts:
            raise ParticipantError("deadline_exceeded", f"{operation} deadline has passed")

    def _arm_lease(self, deadline_ts: float) -> None:
        candidate = deadline_ts + self.lease_grace
        previous = self._lease_expires_at
        self._lease_expires_at = candidate if previous is None else max(previous, candidate)


def _failed(task: asyncio.Task[Any]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is not None
