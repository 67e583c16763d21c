"""The kind's work, started and stopped: the hook I/O the core awaits around transitions.

Two steps that prepare, restore and retire share, each turning a hook's
failure into the protocol's error:

    await close_admission(hooks)     # prepare, restore; reopens if closing fails
    await stop_retired(hooks, fence, clock, changed, episodes, deadline_ts)

``stop_retired`` runs after the retire marks went up (so no new call of those
attempts is admitted): it asks the hooks to stop and free them, then waits
until none of their calls is still in flight. Cut short, the work stays
tracked in the fence, so it blocks the next prepare.
"""

from __future__ import annotations

import asyncio
import contextlib

from envckpt.clock import Clock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant.fence import AttemptFence
from envckpt.participant.hooks import StateHooks
from envckpt.protocol import ErrorCode


async def close_admission(hooks: StateHooks) -> None:
    """Close admission; if that fails half-way, reopen and raise ``checkpoint_error``."""
    try:
        await hooks.close_admission()
    except Exception as error:
        with contextlib.suppress(Exception):
            await hooks.open_admission()
        raise ParticipantError(
            ErrorCode.CHECKPOINT_ERROR, f"closing admission failed: {error}"
        ) from error


async def stop_retired(
    hooks: StateHooks,
    fence: AttemptFence,
    clock: Clock,
    changed: asyncio.Event,
    episodes: tuple[EnvironmentEpisode, ...],
    deadline_ts: float,
) -> None:
    """Stop and free ``episodes`` (and earlier attempts); wait for their calls to end.

    ``changed`` is set whenever a call leaves. Raises ``checkpoint_error`` if
    the hooks fail, ``deadline_exceeded`` if calls are still running at the
    deadline.
    """
    try:
        await hooks.retire(episodes)
    except Exception as error:
        raise ParticipantError(
            ErrorCode.CHECKPOINT_ERROR, f"stopping retired work failed: {error}"
        ) from error
    while fence.busy_at_or_below(episodes):
        changed.clear()
        if not await clock.wait_for_event(changed, deadline_ts):
            raise ParticipantError(
                ErrorCode.DEADLINE_EXCEEDED, "retired work did not stop before the deadline"
            )
