"""An empty Responses API reply, the body nemo-gym's resources servers and steps take.

action = NeMoGymResponse.model_validate(EMPTY_RESPONSE)
hit = {**EMPTY_RESPONSE, "output": [...]}   # the same reply with an assistant message
"""

from __future__ import annotations

from typing import Any

EMPTY_RESPONSE: dict[str, Any] = {
    "id": "resp_1",
    "created_at": 0,
    "model": "m",
    "object": "response",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


def without_ids(value: Any) -> Any:
    """A response with its random ids removed (messages and responses get fresh uuids)."""
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items() if k not in ("id", "created_at")}
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value
