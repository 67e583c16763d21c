"""Conversation pieces both agent recipes keep in their saved ``loop`` state, as JSON.

Items are stored as upstream sends them (``model_dump(exclude_unset=True)``,
what ``ServerClient`` posts), so the model receives byte-for-byte the body an
uninterrupted upstream run would send::

    items = input_items(params)                       # a string input becomes one user message
    loop["outputs"] += dump_items(model_response.output)
    usage = add_usage(loop["usage"], model_response.usage)
    final = response_with_output(last_response_json, loop["outputs"], usage)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nemo_gym.openai_utils import (
    NeMoGymEasyInputMessage,
    NeMoGymResponse,
    NeMoGymResponseUsage,
    accumulate_response_usage,
)


def dump_item(item: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = item.model_dump(mode="json", exclude_unset=True)
    return dumped


def dump_items(items: Iterable[Any]) -> list[dict[str, Any]]:
    return [dump_item(item) for item in items]


def input_items(params: Mapping[str, Any]) -> list[Any]:
    """The conversation a run starts from (upstream turns a string into one user message)."""
    items = params.get("input")
    if isinstance(items, str):
        return [dump_item(NeMoGymEasyInputMessage(role="user", content=items))]
    return list(items or [])


def user_message(text: str) -> dict[str, Any]:
    return dump_item(NeMoGymEasyInputMessage(role="user", content=text))


def add_usage(total: Mapping[str, Any] | None, additional: Any) -> dict[str, Any] | None:
    """``accumulate_response_usage`` over the saved JSON total."""
    current = None if total is None else NeMoGymResponseUsage.model_validate(dict(total))
    summed = accumulate_response_usage(current, additional)
    return None if summed is None else dict(summed.model_dump(mode="json"))


def _typed(item: Mapping[str, Any]) -> dict[str, Any]:
    # An exclude_unset dump of a message drops its default ``type``; a
    # response's output items need it to tell the item kinds apart.
    if "type" not in item and "role" in item:
        return {**item, "type": "message"}
    return dict(item)


def response_with_output(
    response: Mapping[str, Any], outputs: Sequence[Mapping[str, Any]], usage: Any
) -> NeMoGymResponse:
    """The last model response carrying every output so far (upstream's final response)."""
    document = {**response, "output": [_typed(item) for item in outputs], "usage": usage}
    return NeMoGymResponse.model_validate(document)


def check_loop(loop: Mapping[str, Any], required: Mapping[str, type | tuple[type, ...]]) -> None:
    """Raise ValueError unless ``loop`` has exactly these keys with these types."""
    if set(loop) != set(required):
        raise ValueError(f"loop state must have exactly {sorted(required)}, got {sorted(loop)}")
    for key, kind in required.items():
        value = loop[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise ValueError(f"loop.{key} has the wrong type {type(value).__name__}")
    if loop.get("step", 0) < 0:
        raise ValueError("loop.step must not be negative")
