"""The adapter over one Gym deployment: check the machine, call, then fire.

Every operation first asks the instance lifecycle machine whether its trigger
is legal (``IllegalTransition``, nothing sent, if not), then awaits the
coordination call, then fires the transition. A failed call moves the
instance to the failure state the table defines; a coordination failure is
re-raised as the picklable ``GymCheckpointUnavailable``.

    adapter = GymCheckpointAdapter(instance=inst, coordination=coordinator)
    # or as NeMo RL's seed adapter is built: nemo-gym's ServerClient and the control token
    adapter = GymCheckpointAdapter(instance=inst, client=server_client, auth_token=token)
    await adapter.discover()
    result = await adapter.prepare(cid, deadline_ts=d)
    summary = await adapter.commit(cid, root, result.continued(scope), deadline_ts=d)
    await adapter.resume(cid, deadline_ts=d)
    await adapter.aclose()            # closes the HTTP transport a client= adapter made

Episodes may be Gym's own objects (anything with ``rollout_id`` and
``attempt``, such as nemo-gym's ``EpisodeId``): each is converted to an
``EnvironmentEpisode`` before anything else (``summaries.as_episode``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from envckpt import logs
from envckpt.clock import SYSTEM_CLOCK, Clock
from envckpt.coordination.coordinator import CLEANUP_SECONDS, Coordinator
from envckpt.coordination.types import GymCoordination, Participants, PrepareResult
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import (
    CoordinationError,
    CorruptCheckpoint,
    GymCheckpointUnavailable,
    IncompatibleCheckpoint,
    UnsupportedDeployment,
)
from envckpt.extras import missing_extra
from envckpt.gym import replies
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.gym.summaries import GymCheckpointCommitSummary, as_episodes
from envckpt.machines.binding import MachineState, bind
from envckpt.machines.tables import INSTANCE_LIFECYCLE, InstanceState
from envckpt.protocol import ErrorCode

_LIFECYCLE = bind(INSTANCE_LIFECYCLE)


class GymCheckpointAdapter:
    """Checkpoint operations for exactly one Gym deployment."""

    # A trainer holds one per Gym instance: no per-object dict.
    __slots__ = ("_coordination", "_instance", "_machine", "_owned_transport", "_participants")

    def __init__(
        self,
        *,
        instance: GymCheckpointInstance,
        coordination: GymCoordination | None = None,
        client: Any = None,
        auth_token: str | None = None,
    ) -> None:
        """Over ``coordination``, or, the seeds' way, nemo-gym's ``client`` and ``auth_token``.

        ``client`` is a nemo-gym ``ServerClient`` (anything with its
        ``global_config_dict``): the adapter then reaches every server of that
        config over HTTP with ``auth_token`` (``HttpTransport``, core only, no
        extra needed) and owns the transport: ``aclose`` closes it.
        """
        self._owned_transport: Any = None
        if coordination is None:
            if client is None or not auth_token:
                raise TypeError(
                    "GymCheckpointAdapter needs coordination=, or client= (a nemo-gym "
                    "ServerClient) with auth_token="
                )
            self._owned_transport = _transport_for(client, auth_token)
            coordination = Coordinator(self._owned_transport, instance_id=instance.instance_id)
        elif client is not None or auth_token is not None:
            raise TypeError("give coordination= or client= with auth_token=, not both")
        self._instance = instance
        self._coordination = coordination
        self._participants: Participants | None = None
        self._machine: MachineState[InstanceState] = _LIFECYCLE.new(instance.instance_id)

    @classmethod
    def from_server_client(
        cls,
        *,
        instance: GymCheckpointInstance,
        client: Any,
        auth_token: str,
        **transport_options: Any,
    ) -> GymCheckpointAdapter:
        """The seeds' construction, with ``HttpTransport`` options (``max_connections``...)."""
        transport = _transport_for(client, auth_token, **transport_options)
        coordinator = Coordinator(transport, instance_id=instance.instance_id)
        adapter = cls(instance=instance, coordination=coordinator)
        adapter._owned_transport = transport
        return adapter

    async def aclose(self) -> None:
        """Close the HTTP transport this adapter made from a ``client``; else nothing."""
        transport, self._owned_transport = self._owned_transport, None
        if transport is not None:
            await transport.aclose()

    @property
    def instance(self) -> GymCheckpointInstance:
        return self._instance

    @property
    def state(self) -> InstanceState:
        return self._machine.state

    @property
    def participants(self) -> Participants:
        if self._participants is None:
            raise GymCheckpointUnavailable(
                f"Gym instance {self._instance.instance_id!r} has not discovered its deployment",
                operation="discover",
            )
        return self._participants

    @contextlib.contextmanager
    def _unavailable(self, operation: str) -> Iterator[None]:
        try:
            yield
        except CoordinationError as error:
            if error.all_refused_with(ErrorCode.INVALID_CHECKPOINT_STATE):
                # Every failing participant found its saved state unusable:
                # retrying cannot help, the caller must pick another checkpoint.
                raise CorruptCheckpoint(
                    f"{self._instance.instance_id}: {error}", path=operation
                ) from error
            raise GymCheckpointUnavailable(
                f"{self._instance.instance_id}: {error}",
                operation=operation,
                failures=error.failures,
                codes=error.codes,
            ) from error

    def _fire(self, trigger: str, checkpoint_id: str | None) -> None:
        _LIFECYCLE.fire(self._machine, trigger, checkpoint_id=checkpoint_id)

    async def _step(
        self,
        trigger: str,
        call: Callable[..., Awaitable[None]],
        checkpoint_id: str,
        *arguments: object,
        deadline_ts: float,
    ) -> None:
        """``call`` (the coordination's operation of that name) over the participants, once
        the machine allows ``trigger``; fired only when it succeeded, a failure leaving the
        state as it was (renew, retire, forget and resume may all be tried again)."""
        _LIFECYCLE.check(self._machine, trigger)
        with self._unavailable(trigger):
            await call(self.participants, checkpoint_id, *arguments, deadline_ts=deadline_ts)
        self._fire(trigger, checkpoint_id)

    def _fail(self, trigger: str, checkpoint_id: str) -> None:
        if _LIFECYCLE.can_fire(self._machine, trigger):
            self._fire(trigger, checkpoint_id)

    async def discover(self) -> None:
        """Find the deployment's participants; a second call is a no-op."""
        if self.state is not InstanceState.UNDISCOVERED:
            return
        _LIFECYCLE.check(self._machine, "discover")
        with self._unavailable("discover"):
            participants = await self._coordination.discover()
        environment = sorted(m.server_name for m in participants.of_kind("environment"))
        if environment:
            # Their rows go through the legacy relay, not a participant, so a
            # commit would misattribute episodes they own.
            raise UnsupportedDeployment(
                f"turn-level recovery does not support environment-server participants: "
                f"{environment!r}; route them through a legacy agent relay"
            )
        self._participants = participants
        self._fire("discover", None)

    async def restart_only_servers(self) -> list[str]:
        """Participants whose rollouts start over after a crash (mode restart_only)."""
        return sorted(m.server_name for m in self.participants.members if m.mode == "restart_only")

    async def prepare(self, checkpoint_id: str, *, deadline_ts: float) -> PrepareResult:
        _LIFECYCLE.check(self._machine, "prepare")
        try:
            with self._unavailable("prepare"):
                result = await self._coordination.prepare(
                    self.participants, checkpoint_id, deadline_ts=deadline_ts
                )
        except BaseException:
            # Typed failures and cancellation alike: participants may have
            # opened the checkpoint, so only resume (abort) may follow.
            self._fail("fail", checkpoint_id)
            raise
        self._fire("prepare" if result.prepared else "prepare_blocked", checkpoint_id)
        return result

    async def renew(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        # A failed renew is not itself fatal (the lease may still hold) and it
        # runs beside commit, so it never moves the machine to failed; a lost
        # lease shows up as a failed commit.
        await self._step("renew", self._coordination.renew, checkpoint_id, deadline_ts=deadline_ts)

    async def retire(
        self,
        checkpoint_id: str,
        episodes: Iterable[EnvironmentEpisode],
        *,
        deadline_ts: float,
    ) -> None:
        scope = as_episodes(episodes)
        await self._step(
            "retire", self._coordination.retire, checkpoint_id, scope, deadline_ts=deadline_ts
        )

    async def forget(
        self, checkpoint_id: str, rollout_ids: Iterable[str], *, deadline_ts: float
    ) -> None:
        ids = tuple(rollout_ids)
        await self._step(
            "forget", self._coordination.forget, checkpoint_id, ids, deadline_ts=deadline_ts
        )

    async def commit(
        self,
        checkpoint_id: str,
        checkpoint_root: str | Path,
        episodes: Iterable[EnvironmentEpisode],
        *,
        deadline_ts: float,
    ) -> GymCheckpointCommitSummary:
        scope = as_episodes(episodes)
        _LIFECYCLE.check(self._machine, "commit")
        checkpoint_dir = self._instance.checkpoint_dir(checkpoint_root)
        try:
            with self._unavailable("commit"):
                raw = await self._coordination.commit(
                    self.participants,
                    checkpoint_id,
                    str(checkpoint_dir),
                    scope,
                    deadline_ts=deadline_ts,
                )
            summary = replies.commit_summary(self.participants, scope, raw)
        except BaseException:
            self._fail("fail", checkpoint_id)
            raise
        self._fire("commit", checkpoint_id)
        return summary

    async def restore(
        self,
        checkpoint_id: str,
        checkpoint_root: str | Path,
        episodes: Iterable[EnvironmentEpisode],
        *,
        participants: Iterable[str],
        source_checkpoint_id: str,
        deadline_ts: float,
    ) -> None:
        """Restore ``episodes`` (saved attempts) as their next attempts.

        ``participants`` are the servers that committed the checkpoint; each
        must be live here, or its state would be silently dropped.
        """
        scope = as_episodes(episodes)
        _LIFECYCLE.check(self._machine, "restore")
        missing = sorted(set(participants) - self.participants.names)
        if missing:
            raise IncompatibleCheckpoint(
                f"Gym instance {self._instance.instance_id!r} lacks participants the "
                f"checkpoint saved state for: {missing!r}"
            )
        try:
            with self._unavailable("restore"):
                raw = await self._coordination.restore(
                    self.participants,
                    checkpoint_id,
                    str(self._instance.checkpoint_dir(checkpoint_root)),
                    scope,
                    deadline_ts=deadline_ts,
                )
            replies.check_restore_replies(
                self.participants, scope, raw, source_checkpoint_id=source_checkpoint_id
            )
        except BaseException:
            # Including cancellation: some participants may hold restored state.
            self._fire("fail_restore", checkpoint_id)
            raise
        self._fire("restore", checkpoint_id)

    async def abandon_restore(
        self,
        checkpoint_id: str,
        episodes: Iterable[EnvironmentEpisode],
        *,
        deadline_ts: float,
        retire_attempts: int = 3,
    ) -> None:
        """Drop what a restore installed: retire the next attempts, then resume.

        Legal after a restore (kept or failed). The retire is what frees the
        restored state and fences it, so it is tried ``retire_attempts``
        times, always under ``checkpoint_id``: retire is a cleanup call that
        participants accept under a finished id (the coordinator's own
        all-or-nothing cleanup may have resumed it already). Resume runs even
        if the retire never succeeded, and the retire's failure is raised after.
        """
        scope = as_episodes(episodes)
        if self.state is InstanceState.RESTORED:
            # Remember the decision before any I/O: the restore is void now.
            self._fire("abandon_restore", checkpoint_id)
        _LIFECYCLE.check(self._machine, "retire")
        replacements = [e.next_attempt() for e in scope]
        failure: GymCheckpointUnavailable | None = None
        for _ in range(max(1, retire_attempts)):
            # Each try gets room of its own: an attempt that timed out may have
            # used up the caller's deadline, and participants refuse a retire
            # whose deadline has passed, yet this cleanup must still happen.
            attempt_deadline = max(deadline_ts, self._cleanup_clock().now() + CLEANUP_SECONDS)
            try:
                await self.retire(checkpoint_id, replacements, deadline_ts=attempt_deadline)
            except GymCheckpointUnavailable as error:
                failure = error
                continue
            failure = None
            break
        if failure is not None:
            logs.get_logger("envckpt.adapter").warning(
                "abandon restore: retire failed",
                instance_id=self._instance.instance_id,
                failures=failure.failures,
            )
        resume_deadline = max(deadline_ts, self._cleanup_clock().now() + CLEANUP_SECONDS)
        await self.resume(checkpoint_id, deadline_ts=resume_deadline)
        if failure is not None:
            raise failure

    def _cleanup_clock(self) -> Clock:
        # The coordination's own clock, so cleanup deadlines are on the clock
        # the participants' deadlines are checked against (a fake one in tests).
        clock = getattr(self._coordination, "clock", None)
        return clock if clock is not None else SYSTEM_CLOCK

    async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        """Reopen every participant (also aborts). On failure the state stays, so
        resume can be retried; an unreachable participant resumes at lease expiry."""
        await self._step(
            "resume", self._coordination.resume, checkpoint_id, deadline_ts=deadline_ts
        )


def _transport_for(client: Any, token: str, **options: Any) -> Any:
    """``HttpTransport.from_server_client``; ``MissingExtra`` if a broken install lacks a part."""
    try:
        from envckpt.http.client import HttpTransport
    except ModuleNotFoundError as error:
        extra = missing_extra(error)
        if extra is None:
            raise
        raise extra from error
    return HttpTransport.from_server_client(client, token=token, **options)
