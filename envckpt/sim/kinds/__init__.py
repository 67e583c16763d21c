"""Participant kinds: the state hooks and data-plane handlers of each Gym server.

* ``PolicyModelServer`` (kind ``model``): scripted policy + staging ledger.
* ``AgentServer`` (kind ``agent``): multi-turn sessions driven by ``run``.
* ``ToolServer`` (kind ``resources``): tool effects in any of the three modes.

Handlers take and return JSON-able dicts and raise ``ParticipantError`` with
protocol codes, so they can be served in-process or behind HTTP routes.
"""

from envckpt.sim.kinds.agent import (
    AgentServer,
    AgentSession,
    InProcessModelClient,
    InProcessToolClient,
    ModelClient,
    ToolClient,
    opening_line,
    turn_lines,
)
from envckpt.sim.kinds.model import PolicyModelServer, StagingState, policy_action
from envckpt.sim.kinds.resources import (
    ToolServer,
    ToolSession,
    effect_key,
    effect_value,
    tool_observation,
)

__all__ = [
    "AgentServer",
    "AgentSession",
    "InProcessModelClient",
    "InProcessToolClient",
    "ModelClient",
    "PolicyModelServer",
    "StagingState",
    "ToolClient",
    "ToolServer",
    "ToolSession",
    "effect_key",
    "effect_value",
    "opening_line",
    "policy_action",
    "tool_observation",
    "turn_lines",
]
