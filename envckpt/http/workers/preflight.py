"""What only some workers of a multi-worker participant would refuse, refused first.

Each worker decides for its own episodes, so a request one worker refuses
could otherwise be carried out by the others (one process changes nothing
when it refuses). Before a commit, every worker's status is checked
(``commit_refusal``): phases that differ, a worker no longer ready, a scope
naming a restart one worker reported, a directory the write would fail in.
Before a restore, each worker is asked whether it would install its part
(``RESTORE_CHECK``, sent like a control route: ``restorable``)::

    refused = await commit_refusal(statuses, request, core)   # None: go ahead
    status, reply = restorable(core, body_of_this_worker)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envckpt.errors import ParticipantError
from envckpt.http.workers import merge
from envckpt.http.workers.commit_merge import check_writable
from envckpt.http.workers.merge import Share
from envckpt.participant import rules
from envckpt.participant.core import ParticipantCore
from envckpt.protocol import CommitRequest, ErrorCode, Phase, RestoreRequest

# Sent to a worker like a control route: would it install its part of this restore?
RESTORE_CHECK = "restore-check"


async def commit_refusal(
    statuses: Sequence[Share], request: CommitRequest, core: ParticipantCore
) -> tuple[int, dict[str, Any]] | None:
    """The refusal of a commit that some workers would accept and others not, or None."""
    bodies = [dict(share.body or {}) for share in statuses if share.ok]
    if len(bodies) < len(statuses):
        return None  # a gone worker: the commit itself refuses, naming it
    states = {(b.get("phase"), b.get("checkpoint_id")) for b in bodies}
    if {open_id for _, open_id in states} != {request.checkpoint_id}:
        return None  # another id, or a finished one: every core refuses it alike
    if len(states) > 1:
        # Some workers prepared, some not (a turn still in flight on one).
        phases = sorted(str(phase) for phase, _ in states)
        return merge.refusal(
            ErrorCode.INVALID_PHASE, f"commit is not legal while workers are {phases}"
        )
    if states != {(Phase.PREPARED, request.checkpoint_id)}:
        return None  # one phase everywhere: the commit itself refuses (or replays) alike
    reports = [b.get("report") or {} for b in bodies]
    if not all(report.get("ready") for report in reports):
        return merge.refusal(
            ErrorCode.INVALID_PHASE, "no longer ready: episodes left their boundary"
        )
    restarts = {key for report in reports for key in report.get("restarts", ())}
    named = sorted(restarts & {e.capture_key for e in request.episode_ids or ()})
    if named:
        return merge.refusal(
            ErrorCode.RESTART_IN_SCOPE, f"scope names reported restarts: {named[:10]}"
        )
    try:
        where = Path(request.checkpoint_dir)
        await asyncio.to_thread(check_writable, where, kind=core.kind, instance=core.instance)
    except ParticipantError as error:
        return error.status, error.to_wire()
    return None


def restorable(core: ParticipantCore, body: Any) -> tuple[int, dict[str, Any]]:
    """Whether ``core`` would install its part of a restore: 200, or its refusal.

    Checked only from idle, where the core checks it; a restored worker replays.
    """
    try:
        request = RestoreRequest.model_validate(body)
        if core.phase is Phase.IDLE:
            held = core.hooks.live_episodes() | core.fence.in_flight()
            rules.check_restorable(request.episode_ids, held)
    except ParticipantError as error:
        return error.status, error.to_wire()
    except ValueError as error:
        return merge.refusal(ErrorCode.INVALID_REQUEST, str(error)[:300])
    return 200, {}
