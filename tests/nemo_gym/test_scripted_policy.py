"""Tests of the scripted policy endpoint that stands in for vLLM."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from envckpt.http.serve import serve
from envckpt.nemo_gym.examples import COUNTER_TOOLS
from envckpt.nemo_gym.scripted_policy import (
    chat_completion,
    next_reply,
    render_prompt,
    scripted_policy_app,
    token_ids,
)


def counter_conversation(results: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "add 4 then add 5 then get the count"}
    ]
    plan = [("increment_counter", '{"count": 4}'), ("increment_counter", '{"count": 5}')]
    plan.append(("get_counter_value", "{}"))
    outputs = ['{"success":true}', '{"success":true}', '{"count":15}']
    for n in range(results):
        name, arguments = plan[n]
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": outputs[n]})
    return messages


def test_counter_plan_follows_the_tool_results_so_far() -> None:
    """The n-th tool result picks the n-th planned call; after the last the count is reported."""
    tools = [{"type": "function", "function": t} for t in COUNTER_TOOLS]
    calls = [next_reply(counter_conversation(n), tools)[1] for n in range(3)]
    assert [c[0]["function"]["name"] for c in calls] == [
        "increment_counter",
        "increment_counter",
        "get_counter_value",
    ]
    assert [json.loads(c[0]["function"]["arguments"]) for c in calls] == [
        {"count": 4},
        {"count": 5},
        {},
    ]
    assert next_reply(counter_conversation(3), tools) == ("The count is 15.", [])


def test_other_plans() -> None:
    """Blackjack hits below 17 and stands above; otherwise the asked word is answered."""
    hand = (
        "Your hand: [9, 5] = {v}\nDealer shows: K\n"
        "Respond with <action>hit</action> or <action>stand</action>."
    )
    assert (
        next_reply([{"role": "user", "content": hand.format(v=14)}], None)[0]
        == "<action>hit</action>"
    )
    assert (
        next_reply([{"role": "user", "content": hand.format(v=18)}], None)[0]
        == "<action>stand</action>"
    )
    say = [
        {"role": "user", "content": "Say the word: alpha"},
        {"role": "user", "content": "Say the word: delta"},
    ]
    assert next_reply(say, None) == ("delta", [])


def test_reply_depends_only_on_the_conversation() -> None:
    """Two identical requests get identical replies, token ids and logprobs included."""
    body = {"messages": counter_conversation(1), "tools": COUNTER_TOOLS, "logprobs": True}
    assert chat_completion(body) == chat_completion(json.loads(json.dumps(body)))
    other = {**body, "messages": counter_conversation(2)}
    assert chat_completion(body) != chat_completion(other)


def test_each_prompt_starts_with_the_previous_prompt_and_generation() -> None:
    """Byte tokens: the next call's prompt extends the parent's prompt plus its generation."""
    first = counter_conversation(0)
    reply = chat_completion({"messages": first, "tools": COUNTER_TOOLS, "logprobs": True})
    generated = [
        int(e["token"].removeprefix("token_id:"))
        for e in reply["choices"][0]["logprobs"]["content"]
    ]
    cumulative = token_ids(render_prompt(first, COUNTER_TOOLS)) + generated
    following = token_ids(render_prompt(counter_conversation(1), COUNTER_TOOLS))
    assert following[: len(cumulative)] == cumulative
    assert len(following) > len(cumulative)


async def test_endpoint_serves_completions_and_tokenize() -> None:
    """The app answers Chat Completions with token_id logprobs and /tokenize with the prompt ids."""
    messages = counter_conversation(2)
    async with serve(scripted_policy_app()) as url, httpx.AsyncClient() as client:
        reply = await client.post(
            f"{url}/v1/chat/completions",
            json={"messages": messages, "tools": COUNTER_TOOLS, "logprobs": True},
        )
        tokens = await client.post(
            f"{url}/tokenize", json={"messages": messages, "tools": COUNTER_TOOLS}
        )
    assert reply.status_code == 200
    choice = reply.json()["choices"][0]
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_counter_value"
    assert all(e["token"].startswith("token_id:") for e in choice["logprobs"]["content"])
    assert tokens.json()["tokens"] == token_ids(render_prompt(messages, COUNTER_TOOLS))


@pytest.mark.parametrize("latency", [0.2])
async def test_latency_delays_completions(latency: float) -> None:
    """A configured latency passes before each completion."""
    import time

    async with serve(scripted_policy_app(latency=latency)) as url, httpx.AsyncClient() as client:
        started = time.monotonic()
        await client.post(f"{url}/v1/chat/completions", json={"messages": counter_conversation(0)})
        assert time.monotonic() - started >= latency
