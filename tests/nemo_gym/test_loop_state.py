"""Tests of the conversation pieces the agent recipes keep as JSON."""

from __future__ import annotations

import pytest

pytest.importorskip("nemo_gym.openai_utils")

from nemo_gym.openai_utils import NeMoGymResponseUsage

from envckpt.nemo_gym.loop_state import (
    add_usage,
    check_loop,
    input_items,
    response_with_output,
    user_message,
)

from helpers.nemo_gym_responses import EMPTY_RESPONSE


def test_a_string_input_becomes_one_user_message() -> None:
    """As upstream: a string prompt is one user message; a list stays as sent."""
    assert input_items({"input": "hi"}) == [{"role": "user", "content": "hi"}]
    items = [{"role": "user", "content": "x", "type": "message"}]
    assert input_items({"input": items}) == items


def test_usage_accumulates_over_saved_json() -> None:
    """Token counts add up across turns kept as JSON."""
    usage = NeMoGymResponseUsage(
        input_tokens=3,
        output_tokens=2,
        total_tokens=5,
        input_tokens_details={"cached_tokens": 0},
        output_tokens_details={"reasoning_tokens": 0},
    )
    total = add_usage(None, usage)
    total = add_usage(total, usage)
    assert total is not None and (total["input_tokens"], total["total_tokens"]) == (6, 10)
    assert add_usage(total, None) == total


def test_final_response_carries_every_output() -> None:
    """Function-call outputs and user observations come back typed in the final response."""
    outputs = [
        {"type": "function_call_output", "call_id": "c", "output": "o"},
        user_message("next"),
    ]
    final = response_with_output(EMPTY_RESPONSE, outputs, None)
    assert [type(item).__name__ for item in final.output] == [
        "NeMoGymFunctionCallOutput",
        "NeMoGymEasyInputMessage",
    ]


def test_loop_shape_is_checked() -> None:
    """Missing keys, wrong types and negative steps are refused."""
    check_loop({"step": 1, "input": []}, {"step": int, "input": list})
    for bad in ({"step": 1}, {"step": True, "input": []}, {"step": -1, "input": []}):
        with pytest.raises(ValueError):
            check_loop(bad, {"step": int, "input": list})
