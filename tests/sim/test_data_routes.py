"""Tests for envckpt.sim.data_routes: the kinds' data-plane handlers as FastAPI routes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from envckpt.episodes import EnvironmentEpisode
from envckpt.sim.data_routes import (
    agent_router,
    data_router,
    model_router,
    rows_router,
    tool_router,
)
from envckpt.sim.kinds.agent import AgentServer, InProcessModelClient, InProcessToolClient
from envckpt.sim.kinds.model import PolicyModelServer, policy_action
from envckpt.sim.kinds.resources import ToolServer

Ep = EnvironmentEpisode
TOKEN = "rows-token-5b1e-c3d0"


def deadline() -> float:
    return time.time() + 10


def client_for(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@pytest.fixture
async def model() -> PolicyModelServer:
    return PolicyModelServer(seed=5)


@pytest.fixture
async def model_http(model: PolicyModelServer) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(model_router(model))
    async with client_for(app) as client:
        yield client


def gen(episode: Ep, turn: int = 0, observation: str = "hi") -> dict[str, Any]:
    return {"episode": episode.to_wire(), "turn": turn, "observation": observation}


def error_of(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "detail"}
    code: str = body["error"]["code"]
    return code


async def test_generate_and_finish_answer_what_the_handler_returns(
    model_http: httpx.AsyncClient,
) -> None:
    """POST /generate and /finish return the model's own replies as JSON."""
    reply = await model_http.post("/generate", json=gen(Ep("r1", 0)))
    assert reply.status_code == 200
    assert reply.json() == {"text": policy_action(5, "r1", 0, "hi"), "staging_key": "r1/t0"}
    finished = await model_http.post("/finish", json={"episode": Ep("r1", 0).to_wire()})
    assert finished.json() == {"released": "r1", "staging_keys": ["r1/t0"]}


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b"{not json", 422, "invalid_request"),
        (b"", 422, "invalid_request"),
        (b'{"x": NaN}', 422, "invalid_request"),
        (b"[1, 2]", 422, "invalid_request"),
        (b'{"turn": 0, "observation": "o"}', 400, "rollout_id_required"),
        (b'{"episode": {"rollout_id": "r", "attempt": 0}, "turn": 0}', 422, "invalid_request"),
    ],
)
async def test_malformed_bodies_get_the_envelope(
    model_http: httpx.AsyncClient, content: bytes, status: int, code: str
) -> None:
    """Bad JSON, a non-object, a missing episode or missing fields come back as envelopes."""
    reply = await model_http.post(
        "/generate", content=content, headers={"Content-Type": "application/json"}
    )
    assert reply.status_code == status
    assert error_of(reply) == code


async def test_a_refusal_keeps_its_code_and_status(
    model: PolicyModelServer, model_http: httpx.AsyncClient
) -> None:
    """admission_closed while a checkpoint is open, stale_attempt after a retire: 409 each."""
    await model.core.prepare("ck-1", deadline_ts=deadline())
    closed = await model_http.post("/generate", json=gen(Ep("r1", 0)))
    assert (closed.status_code, error_of(closed)) == (409, "admission_closed")
    await model.core.resume("ck-1", deadline_ts=deadline())
    await model.core.retire("rt-1", deadline_ts=deadline(), episode_ids=[Ep("r1", 0)])
    stale = await model_http.post("/generate", json=gen(Ep("r1", 0)))
    assert (stale.status_code, error_of(stale)) == (409, "stale_attempt")


async def test_an_unexpected_failure_is_a_checkpoint_error_envelope() -> None:
    """A handler raising anything else answers 500 checkpoint_error, never a bare page."""

    async def broken(request: Any) -> dict[str, Any]:
        raise RuntimeError("boom")

    app = FastAPI()
    app.include_router(data_router("broken", {"call": broken}))
    async with client_for(app) as client:
        reply = await client.post("/call", json={})
    assert (reply.status_code, error_of(reply)) == (500, "checkpoint_error")
    assert "RuntimeError: boom" in reply.json()["error"]["detail"]


async def test_tool_routes_call_and_finish() -> None:
    """POST /call applies the effect and /finish releases the session."""
    tool = ToolServer(seed=2)
    app = FastAPI()
    app.include_router(tool_router(tool))
    async with client_for(app) as client:
        reply = await client.post(
            "/call", json={"episode": Ep("r", 0).to_wire(), "turn": 0, "action": "act-1"}
        )
        assert reply.status_code == 200 and reply.json()["applied"] is True
        finished = await client.post("/finish", json={"episode": Ep("r", 0).to_wire()})
    assert finished.json()["released"] == "r"
    assert tool.sessions() == {}


async def test_agent_run_route_runs_a_rollout() -> None:
    """POST /run drives the episode to its end and returns the agent's result."""
    model, tool = PolicyModelServer(seed=1), ToolServer(seed=1)
    agent = AgentServer(model=InProcessModelClient(model), tools=InProcessToolClient(tool))
    app = FastAPI()
    app.include_router(agent_router(agent))
    async with client_for(app) as client:
        reply = await client.post(
            "/run", json={"episode": Ep("r", 0).to_wire(), "task": {"prompt": "p", "turns": 3}}
        )
    assert reply.status_code == 200
    assert reply.json()["status"] == "completed" and len(reply.json()["turns"]) == 3


async def test_a_run_stopped_by_shutdown_answers_checkpoint_error() -> None:
    """When the agent stops its runs (process shutdown) the caller gets an envelope, not a hang."""
    model, tool = PolicyModelServer(seed=1, latency=0.05), ToolServer(seed=1)
    agent = AgentServer(model=InProcessModelClient(model), tools=InProcessToolClient(tool))
    app = FastAPI()
    app.include_router(agent_router(agent))
    async with client_for(app) as client:
        pending = asyncio.create_task(
            client.post(
                "/run", json={"episode": Ep("r", 0).to_wire(), "task": {"prompt": "p", "turns": 50}}
            )
        )
        while not agent.running():
            await asyncio.sleep(0.001)
        await agent.shutdown()
        reply = await pending
    assert (reply.status_code, error_of(reply)) == (500, "checkpoint_error")
    assert "stopped" in reply.json()["error"]["detail"]


async def test_rows_route_checks_the_token_and_the_row() -> None:
    """The trainer's rows route needs the bearer token and exactly three string fields."""
    rows: list[tuple[str, str, str]] = []

    async def receive(capture_key: str, staging_key: str, payload: str) -> None:
        rows.append((capture_key, staging_key, payload))

    app = FastAPI()
    app.include_router(rows_router(receive, token=TOKEN))
    row = {"capture_key": "r", "staging_key": "r/t0", "payload": "{}"}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with client_for(app) as client:
        assert error_of(await client.post("/rows", json=row)) == "unauthorized"
        wrong = await client.post("/rows", json=row, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        extra = await client.post("/rows", json={**row, "x": 1}, headers=auth)
        assert (extra.status_code, error_of(extra)) == (422, "invalid_request")
        typed = await client.post("/rows", json={**row, "payload": 3}, headers=auth)
        assert error_of(typed) == "invalid_request"
        ok = await client.post("/rows", json=row, headers=auth)
    assert ok.json() == {"staged": "r/t0"}
    assert rows == [("r", "r/t0", "{}")]


def test_rows_router_refuses_an_empty_token() -> None:
    """A rows route is never installed unauthenticated."""
    with pytest.raises(ValueError):
        rows_router(lambda *row: None, token="")
