"""The coordinator: protocol.md section 5 ordering over any ``ControlTransport``.

Stateless between calls; every call is safe to retry with the same id.

* discover: ``GET status`` everywhere; 404 = not a participant; anything else
  fails discovery; no policy ``model`` fails it too.
* prepare: stage by stage, stopping at the first stage that is not ready.
* resume: stages in reverse, past failures, one aggregated error.
* commit, restore, renew: everyone at once; commit sends ``stop`` only to
  participants whose status declares the ``commit_stop`` capability (older
  Gym builds refuse the field with 422).
* retire, forget: callers before callees; an empty list sends nothing.
* restore is all-or-nothing: on failure retire the next attempts everywhere,
  resume everyone, then raise the restore error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from envckpt import logs
from envckpt.clock import SYSTEM_CLOCK, Clock
from envckpt.coordination.concurrently import all_at_once
from envckpt.coordination.transport import ControlReply, ControlTransport, TransportFailure
from envckpt.coordination.types import (
    ControlReplies,
    Member,
    Participants,
    PrepareResult,
    interned_member,
    interned_participants,
)
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CoordinationError
from envckpt.protocol import (
    RETIRE_ORDER,
    STAGES,
    Capability,
    Kind,
    Mode,
    Phase,
    parse_capabilities,
    parse_kind,
    parse_mode,
)

# Room for the reply to arrive after the participant's own deadline.
REPLY_SLACK_SECONDS = 5.0
DISCOVER_TRIES = 3
DISCOVER_TIMEOUT_SECONDS = 60.0
# A failed restore must still clean up even if its own deadline has passed.
CLEANUP_SECONDS = 30.0
# Connection errors are retried this many times in all on control calls.
CONTROL_CONNECT_TRIES = 2


def _wire(episodes: Iterable[EnvironmentEpisode]) -> list[dict[str, Any]]:
    # ``to_wire`` spelled out: a commit names every episode of the instance.
    return [{"rollout_id": e.rollout_id, "attempt": e.attempt} for e in episodes]


class Coordinator:
    """``GymCoordination`` over a transport."""

    # A trainer holds one per Gym instance: no per-object dict.
    __slots__ = ("_clock", "_transport", "instance_id")

    def __init__(
        self,
        transport: ControlTransport,
        *,
        clock: Clock | None = None,
        instance_id: str | None = None,
    ) -> None:
        self._transport = transport
        self._clock = clock or SYSTEM_CLOCK
        # The Gym instance this deployment is, named in the coordinator's events.
        self.instance_id = instance_id

    @property
    def clock(self) -> Clock:
        """The clock deadlines are measured on (callers compute cleanup deadlines on it)."""
        return self._clock

    @property
    def transport(self) -> ControlTransport:
        return self._transport

    async def discover(self) -> Participants:
        servers = self._transport.server_names()
        outcomes = await all_at_once([self._probe(server) for server in servers])
        members: list[Member] = []
        failures: dict[str, str] = {}
        for server, outcome in zip(servers, outcomes, strict=True):
            if isinstance(outcome, Exception):
                raise outcome  # a bug in this process, not a failing server
            if isinstance(outcome, str):
                failures[server] = outcome
            elif outcome is not None:
                members.append(outcome)
        if failures:
            raise CoordinationError("discover", failures)
        if not any(member.kind is Kind.MODEL for member in members):
            raise CoordinationError(
                "discover", {"deployment": "no policy model takes part in checkpoints"}
            )
        return interned_participants(tuple(members))

    async def _probe(self, server: str) -> Member | str | None:
        """``server``'s status as a member; a failure's text; None if not a participant."""
        try:
            reply = await self._transport.request(
                server,
                "GET",
                "status",
                None,
                timeout=DISCOVER_TIMEOUT_SECONDS,
                connect_tries=DISCOVER_TRIES,
            )
        except TransportFailure as error:
            return str(error)
        if reply.status == 404:
            return None  # no control routes: not a participant
        if reply.status != 200 or not isinstance(reply.body, Mapping):
            return reply.describe()
        try:
            kind = parse_kind(reply.body.get("kind"))
            # Older Gym builds omit mode; they export and restore.
            mode = parse_mode(reply.body.get("mode") or Mode.EXPORT_RESTORE)
        except ValueError as error:
            return str(error)
        declared = parse_capabilities(reply.body.get("capabilities"))
        return interned_member(server, kind, mode, commit_stop=Capability.COMMIT_STOP in declared)

    async def prepare(
        self, participants: Participants, checkpoint_id: str, *, deadline_ts: float
    ) -> PrepareResult:
        body = {"checkpoint_id": checkpoint_id, "deadline_ts": deadline_ts}
        replies: dict[str, dict[str, Any]] = {}
        seconds: dict[str, float] = {}  # every stage's calls stamp into this one
        for kind in STAGES:
            stage = await self._fan_out(
                "prepare", participants.of_kind(kind), body, deadline_ts=deadline_ts, timed=seconds
            )
            replies.update(stage)
            if any(reply.get("phase") != Phase.PREPARED for reply in stage.values()):
                return PrepareResult(prepared=False, replies=replies, seconds=seconds)
        return PrepareResult(prepared=True, replies=replies, seconds=seconds)

    async def renew(
        self, participants: Participants, checkpoint_id: str, *, deadline_ts: float
    ) -> None:
        body = {"checkpoint_id": checkpoint_id, "deadline_ts": deadline_ts}
        await self._fan_out("renew", participants.members, body, deadline_ts=deadline_ts)

    async def retire(
        self,
        participants: Participants,
        checkpoint_id: str,
        episodes: Iterable[EnvironmentEpisode],
        *,
        deadline_ts: float,
    ) -> None:
        episode_ids = _wire(episodes)
        if not episode_ids:
            return
        body = {"checkpoint_id": checkpoint_id, "deadline_ts": deadline_ts}
        await self._in_retire_order("retire", participants, body | {"episode_ids": episode_ids})

    async def forget(
        self,
        participants: Participants,
        checkpoint_id: str,
        rollout_ids: Iterable[str],
        *,
        deadline_ts: float,
    ) -> None:
        ids = sorted(set(rollout_ids))
        if not ids:
            return
        body = {"checkpoint_id": checkpoint_id, "deadline_ts": deadline_ts, "rollout_ids": ids}
        await self._in_retire_order("forget", participants, body)

    async def commit(
        self,
        participants: Participants,
        checkpoint_id: str,
        checkpoint_dir: str,
        episodes: Iterable[EnvironmentEpisode] | None,
        *,
        deadline_ts: float,
        stop: bool = False,
    ) -> dict[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "checkpoint_id": checkpoint_id,
            "deadline_ts": deadline_ts,
            "checkpoint_dir": checkpoint_dir,
            "episode_ids": None if episodes is None else _wire(episodes),
        }
        # Sent only when true, and only to participants that declare it: some
        # Gym builds reject the field, and none of Gym's declares it.
        with_stop = {**body, "stop": True}
        return await self._fan_out(
            "commit",
            participants.members,
            lambda member: with_stop if stop and member.commit_stop else body,
            deadline_ts=deadline_ts,
            timed={},
        )

    async def restore(
        self,
        participants: Participants,
        checkpoint_id: str,
        checkpoint_dir: str,
        episodes: Iterable[EnvironmentEpisode],
        *,
        deadline_ts: float,
    ) -> dict[str, dict[str, Any]]:
        scope = tuple(episodes)
        body = {
            "checkpoint_id": checkpoint_id,
            "deadline_ts": deadline_ts,
            "checkpoint_dir": checkpoint_dir,
            "episode_ids": _wire(scope),
        }
        try:
            return await self._fan_out(
                "restore", participants.members, body, deadline_ts=deadline_ts, timed={}
            )
        except CoordinationError:
            await self.abandon_restore(participants, checkpoint_id, scope, deadline_ts=deadline_ts)
            raise

    async def abandon_restore(
        self,
        participants: Participants,
        checkpoint_id: str,
        scope: Iterable[EnvironmentEpisode],
        *,
        deadline_ts: float,
    ) -> None:
        """Free every restored replacement attempt and resume; never raises.

        Used when this deployment's restore failed, and by the facade when
        another instance's restore failed or the caller raised.
        """
        log = logs.get_logger("envckpt.coordinator").bind(
            checkpoint_id=checkpoint_id, instance_id=self.instance_id
        )
        cleanup_deadline = max(deadline_ts, self._clock.now() + CLEANUP_SECONDS)
        episode_ids = _wire(episode.next_attempt() for episode in scope)
        if episode_ids:
            body = {
                "checkpoint_id": checkpoint_id,
                "deadline_ts": cleanup_deadline,
                "episode_ids": episode_ids,
            }
            try:
                # Past failures: one stage that cannot retire must not leave the
                # replacement attempts of every later stage admissible.
                await self._in_retire_order("retire", participants, body, keep_going=True)
            except CoordinationError as error:
                log.warning("restore cleanup: retire failed", failures=error.failures)
        try:
            await self.resume(participants, checkpoint_id, deadline_ts=cleanup_deadline)
        except CoordinationError as error:
            log.warning("restore cleanup: resume failed", failures=error.failures)

    async def resume(
        self, participants: Participants, checkpoint_id: str, *, deadline_ts: float
    ) -> None:
        body = {"checkpoint_id": checkpoint_id, "deadline_ts": deadline_ts}
        failed: list[CoordinationError] = []
        for kind in reversed(STAGES):
            try:
                await self._fan_out(
                    "resume", participants.of_kind(kind), body, deadline_ts=deadline_ts
                )
            except CoordinationError as error:
                # Keep reopening the other stages; an unreachable participant
                # resumes itself when its lease expires.
                failed.append(error)
        _raise_merged("resume", failed)

    async def _in_retire_order(
        self,
        operation: str,
        participants: Participants,
        body: dict[str, Any],
        *,
        keep_going: bool = False,
    ) -> None:
        """Callers before callees; stop at the first failing group unless ``keep_going``."""
        failed: list[CoordinationError] = []
        for kinds in RETIRE_ORDER:
            members = participants.of_kind(*kinds)
            if not members:
                continue
            try:
                await self._fan_out(operation, members, body, deadline_ts=body["deadline_ts"])
            except CoordinationError as error:
                if not keep_going:
                    raise
                failed.append(error)
        _raise_merged(operation, failed)

    async def _fan_out(
        self,
        operation: str,
        members: Iterable[Member],
        body: Mapping[str, Any] | Callable[[Member], Mapping[str, Any]],
        *,
        deadline_ts: float,
        timed: dict[str, float] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """POST ``operation`` to every member at once (``body``, or ``body(member)``);
        all replies or one error. ``timed`` (the calls a snapshot's record reports:
        prepare, commit, restore) receives how long each call took, and the replies
        are ``ControlReplies`` carrying it; other calls go out unwrapped."""
        members = tuple(members)
        if not members:
            return {}
        body_of = body if callable(body) else lambda _member: body
        timeout = max(0.0, deadline_ts - self._clock.now()) + REPLY_SLACK_SECONDS

        def call(member: Member) -> Coroutine[Any, Any, ControlReply]:
            return self._transport.request(
                member.server_name,
                "POST",
                operation,
                body_of(member),
                timeout=timeout,
                connect_tries=CONTROL_CONNECT_TRIES,
            )

        if timed is None:
            results = await all_at_once([call(member) for member in members])
        else:
            sink, stamp = timed, time.perf_counter

            async def timed_call(member: Member) -> ControlReply:
                # Two monotonic stamps per call, kept in a dict: who held the
                # pause, without a log line per call.
                started = stamp()
                try:
                    return await call(member)
                finally:
                    sink[member.server_name] = stamp() - started

            results = await all_at_once([timed_call(member) for member in members])
        replies: dict[str, dict[str, Any]] = {} if timed is None else ControlReplies(timed)
        failures: dict[str, str] = {}
        codes: dict[str, str] = {}
        for member, result in zip(members, results, strict=True):
            if isinstance(result, Exception):
                failures[member.server_name] = f"{type(result).__name__}: {result}"
            elif not isinstance(result, ControlReply):
                failures[member.server_name] = f"unexpected transport result {result!r}"
            elif result.status != 200 or not isinstance(result.body, dict):
                failures[member.server_name] = result.describe()
                if result.error_code is not None:
                    codes[member.server_name] = result.error_code
            else:
                replies[member.server_name] = result.body
        if failures:
            raise CoordinationError(operation, failures, codes)
        return replies


def _raise_merged(operation: str, errors: list[CoordinationError]) -> None:
    """One error for the failures of several fan-outs of ``operation``, if any failed."""
    if errors:
        failures = {server: text for error in errors for server, text in error.failures.items()}
        codes = {server: code for error in errors for server, code in error.codes.items()}
        raise CoordinationError(operation, failures, codes)
