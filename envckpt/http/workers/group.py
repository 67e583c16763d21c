"""One participant served by several uvicorn workers: each request run by every worker.

Each worker runs a whole ``ParticipantCore`` for the episodes it holds (its
slot's rollouts, ``slots.owner_slot``). A control request reaches one worker
(the kernel picks); that worker checks it as one process would
(``edge.validate``), runs it on its own core and sends it to every sibling
over their private sockets (``siblings``), and merges the answers
(``merge``). So prepare closes admission in every worker before it can answer
prepared, a commit covers every worker's episodes and a restore places each
rollout on the worker that will serve it::

    group = WorkerGroup(core, token=token, directory=WorkerDirectory(path), expected=4)
    await group.start(app)                   # claim a slot, serve the private socket,
    status, reply = await group.dispatch("POST", "prepare", body)  # adopt, register
    await group.stop()

Commit: every worker exports its share and hands it over (the cores run with
``commit_write.hand_over``); the answering worker writes the participant's
one records file and manifest (``commit_merge``). Restore: each worker
restores its own rollouts from that one file. A worker that is gone is
skipped by resume, retire, forget and renew (it holds nothing any more), and
blocks prepare, commit and restore, by name. A worker that starts while a
checkpoint is open closes its admission at once and blocks that checkpoint
(it lost its episodes) until it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp

from envckpt import logs
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.http.serve import serve_unix
from envckpt.http.workers import merge, preflight
from envckpt.http.workers.commit_merge import write_merged
from envckpt.http.workers.merge import Share
from envckpt.http.workers.siblings import Siblings, internal_app
from envckpt.http.workers.slots import Registration, SlotClaim, WorkerDirectory, owner_slot
from envckpt.participant import commit_write, edge
from envckpt.participant.core import ParticipantCore
from envckpt.protocol import CommitRequest, ErrorCode, Phase, RestoreRequest, Route

# A call to a sibling may take this long past the request's deadline: less
# than the 5 s a coordinator allows its own call, so the merged answer arrives.
REPLY_GRACE_SECONDS = 2.0
# A deadline met where the request arrived but (nearly) passed by the time a
# worker runs it is moved this far ahead of that worker's clock: the request
# met its deadline once, where it arrived, as in one process.
MIN_AHEAD_SECONDS = 0.5
# How long a status (no deadline) waits for each sibling.
STATUS_SECONDS = 10.0
JOIN_SECONDS = 5.0
# What the edge sees in place of the secret for this worker's own share.
_VERIFIED = "verified-by-envckpt-worker-group"
_FORGIVING = frozenset({Route.RENEW, Route.RESUME, Route.RETIRE, Route.FORGET})


class WorkerGroup:
    """This worker's side of a multi-worker participant (see the module docstring)."""

    def __init__(
        self,
        core: ParticipantCore,
        *,
        token: str,
        directory: WorkerDirectory,
        expected: int,
    ) -> None:
        if expected < 1:
            raise ValueError("a server runs at least one worker")
        self.core = core
        self.directory = directory
        self.expected = expected
        self.boot = uuid.uuid4().hex
        self.siblings = Siblings(token)
        self._token = token
        self.registration: Registration | None = None
        # Checkpoints open when this worker started: it lost the episodes it held.
        self.joined_open: set[str] = set()
        self._claim: SlotClaim | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._writes: set[asyncio.Task[dict[str, Any]]] = set()
        core.publish = commit_write.hand_over

    def __repr__(self) -> str:
        return f"WorkerGroup({self.core.server_name!r}, slot={self.slot}, of={self.expected})"

    @property
    def slot(self) -> int | None:
        return None if self._claim is None else self._claim.slot

    @property
    def log(self) -> logs.EnvckptLogger:
        return self.core.log.bind(worker=self.slot, pid=os.getpid())

    # -------------------------------------------------------------- lifecycle

    async def start(self, app: ASGIApp) -> None:
        """Claim a slot, serve ``app`` and the internal routes privately, adopt, register."""
        claim = await asyncio.to_thread(self.directory.claim, expected=self.expected)
        self._claim = claim
        stack = contextlib.AsyncExitStack()
        try:
            socket = self.directory.socket_path(claim.slot, self.boot)
            private = internal_app(
                app,
                token=self._token,
                local=self._local,
                worker=self._worker_info,
                join_state=self._join_state,
            )
            await stack.enter_async_context(serve_unix(private, socket))
            await self._adopt()
            registration = Registration(claim.slot, os.getpid(), self.boot, socket)
            await asyncio.to_thread(self.directory.register, registration)
            self.registration = registration
        except BaseException:
            await stack.aclose()
            claim.release()
            self._claim = None
            raise
        self._stack = stack
        self.log.info("worker joined", expected=self.expected, joined_open=sorted(self.joined_open))

    async def stop(self) -> None:
        registration, self.registration = self.registration, None
        if registration is not None:
            await asyncio.to_thread(self.directory.unregister, registration)
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
        await self.siblings.aclose()
        if self._claim is not None:
            self._claim.release()
            self._claim = None

    async def _adopt(self) -> None:
        """Take a live sibling's finished ids and retire marks; close if a checkpoint is open."""
        for sibling in self._registrations().values():
            state = await self.siblings.join_state(sibling, timeout=JOIN_SECONDS)
            if state is None:
                continue
            for checkpoint_id in state.get("finished", ()):
                self.core.finished.add(str(checkpoint_id))
            marks = state.get("marks") or {}
            self.core.fence.retire(EnvironmentEpisode(str(r), int(a)) for r, a in marks.items())
            open_id = state.get("open")
            if open_id:
                # Closed at once, like its siblings; and it lost what it held.
                self.joined_open.add(str(open_id))
                with contextlib.suppress(ParticipantError):
                    await self.core.prepare(str(open_id), deadline_ts=self.core.clock.now() + 5)
            return

    def _join_state(self) -> dict[str, Any]:
        return {
            "finished": list(self.core.finished),
            "marks": self.core.fence.marks(),
            "open": self.core.checkpoint_id,
        }

    def _worker_info(self) -> dict[str, Any]:
        return {"slot": self.slot, "pid": os.getpid(), "joined_open": sorted(self.joined_open)}

    def _registrations(self) -> dict[int, Registration]:
        own = self.slot
        found = self.directory.registrations(expected=self.expected)
        return {slot: reg for slot, reg in found.items() if slot != own}

    # ---------------------------------------------------------- data routing

    def owner(self, rollout_id: str) -> int:
        return owner_slot(rollout_id, self.expected)

    def sibling(self, slot: int) -> Registration | None:
        return self.directory.registrations(expected=self.expected).get(slot)

    # ----------------------------------------------------------- control

    async def _local(
        self, method: str, route: str, body: Any, received_at: float | None
    ) -> tuple[int, dict[str, Any]]:
        if route == preflight.RESTORE_CHECK:
            return preflight.restorable(self.core, body)
        if received_at is not None:
            body = deadline_met_at(body, received_at, now=self.core.clock.now())
        return await edge.handle(
            self.core, method, route, body, authorization=f"Bearer {_VERIFIED}", token=_VERIFIED
        )

    async def dispatch(self, method: str, route: str, body: Any) -> tuple[int, dict[str, Any]]:
        """One authenticated control request, run by every worker; the merged answer."""
        try:
            request = edge.validate(self.core, method, route, body)
        except ParticipantError as error:
            return error.status, error.to_wire()
        if request is None:  # status
            shares = await self._fan_out(method, route, {}, timeout=STATUS_SECONDS)
            assert self.slot is not None
            return 200, merge.merged_status(shares, expected=self.expected, own_slot=self.slot)
        now = self.core.clock.now()
        # At least the grace: a past deadline is refused by each worker at once.
        timeout = max(0.0, request.deadline_ts - now) + MIN_AHEAD_SECONDS + REPLY_GRACE_SECONDS
        bodies = self._restore_bodies(body, request) if isinstance(request, RestoreRequest) else {}
        if isinstance(request, CommitRequest):
            refused = await self._commit_preflight(request)
            if refused is not None:
                return refused
        if isinstance(request, RestoreRequest):
            # What only one worker would refuse (a live attempt it holds) first.
            checks = await self._fan_out("POST", preflight.RESTORE_CHECK, bodies, timeout=timeout)
            refused = merge.first_refusal(checks, self.slot or 0)
            if refused is not None:
                return refused
        shares = await self._fan_out(
            method, route, bodies, timeout=timeout, body=body, received_at=now
        )
        try:
            return await self._merged(Route(route), shares, request)
        except ParticipantError as error:
            return error.status, error.to_wire()

    def _restore_bodies(self, body: Any, request: RestoreRequest) -> dict[int, Any]:
        """Each worker restores the rollouts it will serve (``slots.owner_slot``)."""
        by_slot: dict[int, list[EnvironmentEpisode]] = {s: [] for s in range(self.expected)}
        for episode in request.episode_ids:
            by_slot[self.owner(episode.rollout_id)].append(episode)
        return {
            slot: {**body, "episode_ids": [e.to_wire() for e in sorted(episodes)]}
            for slot, episodes in by_slot.items()
        }

    async def _fan_out(
        self,
        method: str,
        route: str,
        bodies: Mapping[int, Any],
        *,
        timeout: float,
        body: Any = None,
        received_at: float | None = None,
    ) -> list[Share]:
        """Every slot's answer: this worker's own, each sibling's, or why there is none."""
        own = self.slot
        registered = self._registrations()

        async def one(slot: int) -> Share:
            sent = bodies.get(slot, body)
            if slot == own:
                status, reply = await self._local(method, route, sent, received_at)
                return Share(slot, status, reply, pid=os.getpid(), joined_open=self._joined())
            sibling = registered.get(slot)
            if sibling is None:
                return Share(slot, problem=merge.UNREGISTERED)
            return await self.siblings.control(
                sibling, method, route, sent, timeout=timeout, received_at=received_at
            )

        return list(await asyncio.gather(*(one(slot) for slot in range(self.expected))))

    def _joined(self) -> tuple[str, ...]:
        return tuple(sorted(self.joined_open))

    async def _merged(
        self, route: Route, shares: list[Share], request: Any
    ) -> tuple[int, dict[str, Any]]:
        assert self.slot is not None
        cid: str = request.checkpoint_id
        refused = merge.first_refusal(shares, self.slot)
        if route is Route.PREPARE:
            # A worker that did not answer blocks the prepare (its blocker names it).
            return refused or (200, merge.merged_prepare(shares, cid))
        missing = merge.unanswered(shares, tolerate_gone=route in _FORGIVING)
        if missing:
            return merge.missing_workers(missing)
        if refused is not None:
            return refused
        if route is Route.RENEW:
            return 200, merge.merged_renew(shares)
        if route is Route.RESUME:
            return 200, merge.merged_resume(shares)
        if route in (Route.RETIRE, Route.FORGET):
            own = next(share for share in shares if share.slot == self.slot)
            return 200, dict(own.body or {})
        if route is Route.RESTORE:
            return 200, merge.merged_restore(shares)
        return 200, await self._commit(shares, request)

    async def _commit_preflight(self, request: CommitRequest) -> tuple[int, dict[str, Any]] | None:
        """``preflight.commit_refusal`` on every worker's status, before any commits."""
        statuses = await self._fan_out("GET", Route.STATUS, {}, timeout=STATUS_SECONDS)
        return await preflight.commit_refusal(statuses, request, self.core)

    async def _commit(self, shares: list[Share], request: CommitRequest) -> dict[str, Any]:
        """Every worker's share, written as the participant's one records file."""
        cid = request.checkpoint_id
        restarted = merge.worker_blockers(shares, cid)
        if restarted:
            raise ParticipantError(
                ErrorCode.INVALID_PHASE,
                f"no longer ready: {', '.join(restarted)} lost its episodes",
            )
        bodies = [dict(share.body or {}) for share in shares]
        fields = merge.merged_commit_fields(bodies)
        core = self.core

        def still_committed() -> None:
            # Checked right before the manifest link, as one process checks it.
            if core.checkpoint_id != cid or core.phase is not Phase.COMMITTED:
                raise ParticipantError(
                    ErrorCode.STALE_CHECKPOINT, f"commit {cid} was aborted before publishing"
                )

        write = asyncio.create_task(
            asyncio.to_thread(
                write_merged,
                Path(request.checkpoint_dir),
                kind=core.kind,
                instance=core.instance,
                checkpoint_id=cid,
                shares=[body.get("records") or [] for body in bodies],
                before_publish=still_committed,
            )
        )
        self._writes.add(write)
        write.add_done_callback(_collected(self._writes))
        timeout = max(0.0, request.deadline_ts - core.clock.now())
        done, _ = await asyncio.wait({write}, timeout=timeout)
        if not done:
            raise ParticipantError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"commit {cid} is still writing; retry to collect its result",
            )
        manifest = write.result()
        return {
            "phase": Phase.COMMITTED,
            "checkpoint_id": cid,
            "manifest": manifest,
            **{k: v for k, v in fields.items() if k not in ("phase", "checkpoint_id")},
        }


def deadline_met_at(body: Any, received_at: float, *, now: float) -> Any:
    """``body`` as one worker runs it: a deadline that had not passed at ``received_at`` but
    is (nearly) past ``now`` moves to ``now + MIN_AHEAD_SECONDS``; any other body is as sent.

    The request met its deadline where it arrived; the time it took to reach
    this worker must not turn that into ``deadline_exceeded`` here (the
    answering worker would then have acted on a request its siblings refused).
    """
    if not isinstance(body, Mapping):
        return body
    deadline = body.get("deadline_ts")
    if not isinstance(deadline, int | float) or isinstance(deadline, bool):
        return body
    if deadline < received_at or deadline >= now + MIN_AHEAD_SECONDS:
        return body
    return {**body, "deadline_ts": now + MIN_AHEAD_SECONDS}


def _collected(pending: set[asyncio.Task[dict[str, Any]]]) -> Any:
    def done(task: asyncio.Task[dict[str, Any]]) -> None:
        pending.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a write nobody waits for must not warn

    return done
