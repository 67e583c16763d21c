"""Which control call a participant refuses, and with which code: pure checks.

Every function here reads the participant's state and the call's arguments
and raises the ``ParticipantError`` the protocol names (protocol.md 4 and 7),
or returns. None of them changes anything or awaits, so the core runs them
under its lock before any hook I/O, and a refused call has no effect.

    require_open(open_, checkpoint_id)                 # checkpoint_conflict
    require_no_checkpoint_open(phase, open_, cid, op)   # invalid_phase / conflict
    check_commit(open_, cid, phase=..., ready=..., scope=...)
    replayed = restore_replay(open_, cid, args, phase=...)  # a recorded reply, or None
    check_restorable(scope, held)                       # stale_attempt
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from envckpt.episodes import EnvironmentEpisode, capture_keys
from envckpt.errors import ParticipantError
from envckpt.machines.tables import PHASES_OPEN
from envckpt.participant.fence import AttemptFence
from envckpt.participant.open_checkpoint import OpenCheckpoint, RestoreArgs
from envckpt.protocol import ErrorCode, Phase


def admission_refusal(
    episode: EnvironmentEpisode | None,
    fence: AttemptFence,
    phase: Phase,
    checkpoint_id: str | None,
) -> tuple[ErrorCode, str] | None:
    """Why one call of episode work is refused, or None if it may run now."""
    if episode is None:
        return ErrorCode.ROLLOUT_ID_REQUIRED, "episode work needs a rollout identity"
    refusal = fence.refusal(episode)
    if refusal is not None:
        return refusal
    if phase is not Phase.IDLE:
        return ErrorCode.ADMISSION_CLOSED, f"checkpoint {checkpoint_id} is open ({phase})"
    return None


def require_open(open_: OpenCheckpoint | None, checkpoint_id: str) -> None:
    """``checkpoint_id`` must be the open checkpoint (or none is open)."""
    current = None if open_ is None else open_.checkpoint_id
    if current != checkpoint_id:
        raise ParticipantError(
            ErrorCode.CHECKPOINT_CONFLICT, f"checkpoint {current} is open, not {checkpoint_id}"
        )


def require_no_checkpoint_open(
    phase: Phase, open_: OpenCheckpoint | None, checkpoint_id: str, operation: str
) -> None:
    """Retire and forget: never while a checkpoint is open; in restored, same id."""
    if phase in PHASES_OPEN:
        current = None if open_ is None else open_.checkpoint_id
        raise ParticipantError(
            ErrorCode.INVALID_PHASE, f"{operation} is refused while checkpoint {current} is open"
        )
    if phase is Phase.RESTORED:
        require_open(open_, checkpoint_id)


def prepare_replay(
    open_: OpenCheckpoint, checkpoint_id: str, *, phase: Phase
) -> dict[str, Any] | None:
    """A prepare while one is open: the recorded ready reply, or None to wait again.

    The ready reply is replayed for as long as its checkpoint is open, after
    the commit too: every call is safe to retry with the same id.
    """
    require_open(open_, checkpoint_id)
    if open_.prepare_reply is not None:
        return open_.prepare_reply  # recorded, replayed verbatim
    if phase is not Phase.PREPARING:
        raise ParticipantError(ErrorCode.INVALID_PHASE, f"prepare is not legal in phase {phase}")
    return None


def still_preparing(
    open_: OpenCheckpoint | None, checkpoint_id: str, *, phase: Phase
) -> OpenCheckpoint:
    """After prepare's wait: the same checkpoint must still be preparing (or prepared)."""
    if open_ is None or open_.checkpoint_id != checkpoint_id:
        raise ParticipantError(
            ErrorCode.STALE_CHECKPOINT, f"checkpoint {checkpoint_id} was resumed while preparing"
        )
    if phase is Phase.PREPARED and open_.prepare_reply is not None:
        return open_
    if phase is not Phase.PREPARING:
        raise ParticipantError(
            ErrorCode.STALE_CHECKPOINT,
            f"checkpoint {checkpoint_id} moved on to {phase} while preparing",
        )
    return open_


def check_deadline(now: float, deadline_ts: float, operation: str) -> None:
    if now > deadline_ts:
        raise ParticipantError(ErrorCode.DEADLINE_EXCEEDED, f"{operation} deadline has passed")


def check_commit(
    open_: OpenCheckpoint | None,
    checkpoint_id: str,
    *,
    phase: Phase,
    ready: bool,
    scope: tuple[EnvironmentEpisode, ...] | None,
) -> None:
    """A first commit: prepared, still ready, no reported restart in its scope.

    No scope (null) means everything this participant holds, for every kind.
    """
    if open_ is None:
        raise ParticipantError(ErrorCode.INVALID_PHASE, "no checkpoint is open; prepare first")
    require_open(open_, checkpoint_id)
    if phase is not Phase.PREPARED:
        raise ParticipantError(ErrorCode.INVALID_PHASE, f"commit is not legal in phase {phase}")
    if not ready:
        # restart_only never waits, so its in-flight work is no blocker.
        raise ParticipantError(
            ErrorCode.INVALID_PHASE, "no longer ready: episodes left their boundary"
        )
    restarts = open_.prepared_restarts
    in_scope = restarts & set(scope) if restarts and scope is not None else frozenset()
    if in_scope:
        raise ParticipantError(
            ErrorCode.RESTART_IN_SCOPE,
            f"scope names reported restarts: {capture_keys(in_scope)[:10]}",
        )


def check_commit_replay(checkpoint_id: str, sent: tuple[Any, ...], args: tuple[Any, ...]) -> None:
    """A repeated commit must name the directory and scope it was first sent with."""
    if sent != args:
        raise ParticipantError(
            ErrorCode.CHECKPOINT_CONFLICT,
            f"commit {checkpoint_id} was already sent with another directory or scope",
        )


def restore_replay(
    open_: OpenCheckpoint | None, checkpoint_id: str, args: RestoreArgs, *, phase: Phase
) -> dict[str, Any] | None:
    """The recorded reply of a repeated restore, or None when a restore may run now."""
    if open_ is None:
        return None
    require_open(open_, checkpoint_id)
    if open_.restore is None:
        raise ParticipantError(ErrorCode.INVALID_PHASE, f"restore is not legal in {phase}")
    recorded_args, reply = open_.restore
    if recorded_args != args:
        raise ParticipantError(
            ErrorCode.CHECKPOINT_CONFLICT,
            f"restore {checkpoint_id} was already sent with other arguments",
        )
    return reply()


def check_restorable(
    scope: Iterable[EnvironmentEpisode], held: frozenset[EnvironmentEpisode]
) -> None:
    """A restore must not install over live work (``stale_attempt`` if it would).

    ``held`` is what this process holds or runs. A restored rollout holding
    the attempt the restore would install, or a newer one, would mix two
    checkpoints' state of one attempt, or revive an attempt a newer one
    superseded. (Older held attempts are retired by the restore itself; a
    next attempt that is retired here but holds nothing is installed, and
    stays refused, as Gym does.)
    """
    newest: dict[str, int] = {}
    for episode in held:
        newest[episode.rollout_id] = max(episode.attempt, newest.get(episode.rollout_id, -1))
    if not newest:
        return  # a fresh process holds nothing: the scope is not even read
    live = [e for e in scope if newest.get(e.rollout_id, -1) > e.attempt]
    if live:
        raise ParticipantError(
            ErrorCode.STALE_ATTEMPT,
            f"restore would install over attempts live here: {capture_keys(live)[:10]}",
        )
