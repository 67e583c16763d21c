"""Tests of the trainer's backend over nemo-gym agents' /run."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.http.serve import serve
from envckpt.nemo_gym.backend import NemoGymBackend, final_text, run_body, summarize

REPLY = {
    "reward": 1.0,
    "response": {
        "output": [
            {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "done"}],
            },
        ]
    },
    "staging_keys": ["r1/a"],
    "envckpt": {"attempt": 0},
}


def test_summary_keeps_what_the_trainer_needs() -> None:
    """Reward, final answer, output kinds, staging keys and the agent's record; not the tokens."""
    assert summarize(REPLY) == {
        "reward": 1.0,
        "final_text": "done",
        "output_types": ["function_call", "message"],
        "staging_keys": ["r1/a"],
        "envckpt": {"attempt": 0},
    }
    assert final_text({"output": [{"type": "message", "role": "user", "content": "hi"}]}) == ""
    assert run_body({"x": 1}, EnvironmentEpisode("r1", 2)) == {
        "x": 1,
        "_ng_rollout_id": "r1",
        "_ng_attempt_index": 2,
    }


async def test_run_posts_the_attempt_and_maps_refusals() -> None:
    """The body carries the attempt; an envelope reply raises its ParticipantError."""
    seen: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/run")
    async def run(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        if body["_ng_attempt_index"] == 1:
            return JSONResponse(
                {"error": {"code": "stale_attempt", "detail": "old"}}, status_code=409
            )
        return JSONResponse(REPLY)

    async with serve(app) as url:
        backend = NemoGymBackend({"shard/replica-0": url})
        try:
            summary = await backend.run("shard/replica-0", EnvironmentEpisode("r1", 0), {"t": 1})
            with pytest.raises(ParticipantError) as caught:
                await backend.run("shard/replica-0", EnvironmentEpisode("r1", 1), {"t": 1})
        finally:
            await backend.aclose()
    assert summary["reward"] == 1.0
    assert caught.value.code == "stale_attempt"
    assert seen[0] == {"t": 1, "_ng_rollout_id": "r1", "_ng_attempt_index": 0}


async def test_a_reply_that_is_not_a_json_object_is_a_checkpoint_error() -> None:
    """A 200 whose body is a list or not JSON at all names the text, never a bare ValueError."""
    app = FastAPI()

    @app.post("/run")
    async def run(request: Request) -> Response:
        body = await request.json()
        if body["_ng_attempt_index"] == 0:
            return JSONResponse([1, 2])
        return PlainTextResponse("all good")

    async with serve(app) as url, NemoGymBackend({"shard/replica-0": url}) as backend:
        for attempt, text in ((0, "[1,2]"), (1, "all good")):
            with pytest.raises(ParticipantError) as caught:
                await backend.run("shard/replica-0", EnvironmentEpisode("r1", attempt), {})
            assert caught.value.code == "checkpoint_error"
            assert f"not a JSON object: {text}" in caught.value.detail
