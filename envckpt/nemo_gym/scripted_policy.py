"""A deterministic OpenAI-compatible policy endpoint that stands in for vLLM.

nemo-gym's own ``vllm_model`` server talks to it exactly as it talks to vLLM
(Chat Completions with ``logprobs`` and ``return_tokens_as_token_ids``, then
``/tokenize`` for the prompt ids). Its reply depends only on the conversation,
so a rollout continued after a restore produces exactly what an uninterrupted
run would have::

    app = scripted_policy_app()                 # POST /v1/chat/completions, POST /tokenize
    python -m envckpt.nemo_gym.scripted_policy --port 8000 --ready-file ready.json \
        [--generation-seconds 8]       # each completion takes this long (decoding)

The plan (``next_reply``) reads the conversation:

* tools include ``increment_counter``: the first user message says what to do
  (``add 1 then add 2 then get the count``); the n-th tool result so far picks
  the n-th call; after the last one it reports the count it was shown;
* the last user message offers ``<action>hit</action>``: hit below 17, else stand;
* otherwise it answers the word after ``Say the word:`` in the last user message.

Tokens are bytes of a rendered prompt, and a rendered assistant turn is the
generation's bytes, so every call's prompt starts with its parent call's
prompt and generation (the prefix nemo-gym's trajectory builder verifies).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

ASSISTANT_OPEN = "<|assistant|>"
ASSISTANT_CLOSE = "<|end|>"
MODEL_NAME = "envckpt-scripted-policy"

_ADD = re.compile(r"\badd\s+(-?\d+)", re.IGNORECASE)
_HAND = re.compile(r"=\s*(\d+)")
_SAY = re.compile(r"say the word:\s*(\S+)", re.IGNORECASE)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def _tool_calls(message: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        calls.append(
            (str(call.get("id")), str(function.get("name")), str(function.get("arguments")))
        )
    return calls


def assistant_body(content: str, tool_calls: Sequence[tuple[str, str, str]]) -> str:
    """How one assistant turn renders; the same text as a generation and in history."""
    calls = json.dumps([list(call) for call in tool_calls], separators=(",", ":"))
    return f"{content}<|calls|>{calls}{ASSISTANT_CLOSE}"


def render_prompt(messages: Sequence[Mapping[str, Any]], tools: Any) -> str:
    """The prompt text of a conversation, ending where the next assistant turn starts."""
    parts = [f"<|tools|>{json.dumps(tools or [], sort_keys=True, separators=(',', ':'))}"]
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            body = assistant_body(_text(message.get("content")), _tool_calls(message))
            parts.append(f"{ASSISTANT_OPEN}{body}")
        elif role == "tool":
            parts.append(f"<|tool {message.get('tool_call_id')}|>{_text(message.get('content'))}")
        else:
            parts.append(f"<|{role}|>{_text(message.get('content'))}")
    parts.append(ASSISTANT_OPEN)
    return "".join(parts)


def token_ids(text: str) -> list[int]:
    """Byte-level fake token ids."""
    return list(text.encode("utf-8"))


def fake_logprob(token: int, position: int) -> float:
    return -round(((token * 31 + position) % 97 + 1) / 100.0, 2)


def next_reply(
    messages: Sequence[Mapping[str, Any]], tools: Any
) -> tuple[str, list[dict[str, Any]]]:
    """The plan: (content, tool calls) for this conversation; a pure function of it."""
    tool_names = {
        str((tool.get("function") or tool).get("name"))
        for tool in (tools or [])
        if isinstance(tool, Mapping)
    }
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    results = [m for m in messages if m.get("role") == "tool"]
    if "increment_counter" in tool_names and users:
        plan: list[tuple[str, dict[str, Any]]] = [
            ("increment_counter", {"count": int(n)}) for n in _ADD.findall(users[0])
        ]
        if "get_counter_value" in tool_names and "count" in users[0].lower():
            plan.append(("get_counter_value", {}))
        done = len(results)
        if done < len(plan):
            name, arguments = plan[done]
            call = {
                "id": f"call_{done}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, sort_keys=True)},
            }
            return "", [call]
        return f"The count is {_last_count(results)}.", []
    last = users[-1] if users else ""
    if "<action>hit</action>" in last:
        values = _HAND.findall(last)
        value = int(values[0]) if values else 21
        return f"<action>{'hit' if value < 17 else 'stand'}</action>", []
    said = _SAY.findall(last)
    return (said[-1] if said else "ok"), []


def _last_count(results: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(results):
        try:
            value = json.loads(_text(message.get("content")))
        except ValueError:
            continue
        if isinstance(value, Mapping) and "count" in value:
            return str(value["count"])
    return "unknown"


def chat_completion(body: Mapping[str, Any]) -> dict[str, Any]:
    """One Chat Completions reply with ``token_id:`` logprobs, as vLLM returns it."""
    messages = body.get("messages") or []
    tools = body.get("tools")
    content, calls = next_reply(messages, tools)
    prompt = render_prompt(messages, tools)
    generation = token_ids(assistant_body(content, _tool_calls({"tool_calls": calls})))
    logprobs = [
        {"token": f"token_id:{token}", "logprob": fake_logprob(token, i), "top_logprobs": []}
        for i, token in enumerate(generation)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:24]
    prompt_tokens = len(token_ids(prompt))
    return {
        "id": f"chatcmpl-{digest}",
        "object": "chat.completion",
        "created": 0,
        "model": str(body.get("model") or MODEL_NAME),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": {"content": logprobs} if body.get("logprobs") else None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(generation),
            "total_tokens": prompt_tokens + len(generation),
        },
    }


def scripted_policy_app(*, latency: float = 0.0) -> FastAPI:
    """The endpoint: ``POST /v1/chat/completions``, ``POST /tokenize``, ``GET /v1/models``.

    ``latency`` seconds pass before each completion (decoding time).
    """
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        if latency > 0:
            await asyncio.sleep(latency)
        return JSONResponse(chat_completion(body))

    @app.post("/tokenize")
    async def tokenize(request: Request) -> JSONResponse:
        body = await request.json()
        tokens = token_ids(render_prompt(body.get("messages") or [], body.get("tools")))
        return JSONResponse({"tokens": tokens, "count": len(tokens), "max_model_len": 1 << 20})

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})

    return app


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    from envckpt.nemo_gym.readiness import announce_when_listening
    from envckpt.process_tie import tie_to_parent

    tie_to_parent()  # dies with the launcher (a no-op when forked: tied already)
    parser = argparse.ArgumentParser(prog="python -m envckpt.nemo_gym.scripted_policy")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ready-file", default=None)
    parser.add_argument(
        "--generation-seconds",
        "--latency",
        dest="latency",
        type=float,
        default=0.0,
        help="seconds each completion takes, as decoding would (a real model: 10-60)",
    )
    args = parser.parse_args(argv)
    app = scripted_policy_app(latency=args.latency)
    if args.ready_file:
        announce_when_listening(app, host=args.host, port=args.port, ready_file=args.ready_file)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
