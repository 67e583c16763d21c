"""The participant's ``GET status`` reply, read from its core.

    document = status_document(core)    # under the core's lock, after the lease check

Gym's fields (``kind, instance, phase, checkpoint_id, lease_expires_at,
retired_rollouts, report``) and envckpt's (``mode``, ``server_name``,
``served_traffic``, ``capabilities``; a policy model adds ``model_calls``:
its policy for generations a prepare finds running, see ``model_calls``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envckpt.participant.model_calls import STATUS_KEY as MODEL_CALLS_KEY
from envckpt.protocol import CAPABILITIES

if TYPE_CHECKING:
    from envckpt.participant.core import ParticipantCore


def status_document(core: ParticipantCore) -> dict[str, Any]:
    """What ``GET status`` answers for ``core`` now."""
    calls = core.model_calls
    extra = {} if calls is None else {MODEL_CALLS_KEY: calls.status()}
    return {
        "kind": core.kind,
        "mode": core.mode,
        "instance": core.instance,
        "server_name": core.server_name,
        "phase": core.phase,
        "checkpoint_id": core.checkpoint_id,
        "lease_expires_at": core.lease_expires_at,
        "retired_rollouts": core.fence.retired_rollouts,
        "served_traffic": core.served_traffic,
        "capabilities": list(CAPABILITIES),
        "report": core.report(),
        **extra,
    }
