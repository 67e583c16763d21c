"""A participant's ``GET status`` reply: the protocol's keys, then envckpt's own.

The protocol names ``kind, mode, instance, phase, checkpoint_id,
lease_expires_at, retired_rollouts, report`` and allows more; envckpt adds
``server_name``, ``served_traffic``, ``capabilities`` (what it accepts beyond
the protocol), ``counters`` (``counters.ParticipantCounters``) and, on a
policy model, ``model_calls`` (its policy for generations a prepare finds
running, and how many it refused; see ``model_calls``)::

    reply = status_reply(core)      # under the core's lock, after the lease check
"""

from __future__ import annotations

from typing import Any, Protocol

from envckpt.participant.counters import ParticipantCounters
from envckpt.participant.fence import AttemptFence
from envckpt.participant.model_calls import STATUS_KEY as MODEL_CALLS_KEY
from envckpt.participant.model_calls import ModelCalls
from envckpt.protocol import CAPABILITIES


class StatusSource(Protocol):
    """What a status reply reads of a participant (``ParticipantCore``; a protocol,
    so this module sits below the core instead of importing it back)."""

    kind: Any
    mode: Any
    instance: str
    server_name: str
    served_traffic: bool
    fence: AttemptFence
    counters: ParticipantCounters
    model_calls: ModelCalls | None

    @property
    def phase(self) -> Any: ...

    @property
    def checkpoint_id(self) -> str | None: ...

    @property
    def lease_expires_at(self) -> float | None: ...

    def report(self) -> dict[str, Any]: ...


def status_reply(core: StatusSource) -> dict[str, Any]:
    """The status body of ``core`` as it is now."""
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
        "counters": core.counters.to_json(),
        **extra,
    }
