"""Tests for envckpt.sim.data_clients: the agent's model and tool clients, the trainer's
agent client and the staging sinks, over real HTTP (uvicorn on ephemeral ports)."""

from __future__ import annotations

import asyncio
import json
import pickle
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.http.serve import serve, serve_many
from envckpt.sim.data_clients import (
    CallbackStagingSink,
    DataPlaneUnavailable,
    HttpAgentClient,
    HttpModelClient,
    HttpStagingSink,
    HttpToolClient,
)
from envckpt.sim.data_routes import agent_router, model_router, rows_router, tool_router
from envckpt.sim.gym import expected_transcript
from envckpt.sim.kinds.agent import AgentServer
from envckpt.sim.kinds.model import PolicyModelServer, policy_action, staging_payload
from envckpt.sim.kinds.resources import ToolServer

from helpers.raw_http import RawHttpServer

Ep = EnvironmentEpisode
TOKEN = "rows-token-77c2-a9f1"
TASK: dict[str, Any] = {"prompt": "go", "turns": 4}


def deadline() -> float:
    return time.time() + 10


def gen(episode: Ep, turn: int = 0, observation: str = "hi") -> dict[str, Any]:
    return {"episode": episode.to_wire(), "turn": turn, "observation": observation}


def closed_port_url() -> str:
    """A URL nothing listens on: a port the kernel just handed out and took back."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class Served:
    """A model and a tool on their own servers, and HTTP clients to them."""

    def __init__(self, model: PolicyModelServer, tool: ToolServer, urls: list[str]) -> None:
        self.model, self.tool = model, tool
        self.model_client = HttpModelClient(urls[0])
        self.tool_client = HttpToolClient(urls[1])

    def agent(self) -> AgentServer:
        return AgentServer(model=self.model_client, tools=self.tool_client, park_poll_seconds=0.002)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    model, tool = PolicyModelServer(seed=4), ToolServer(seed=4)
    model_app, tool_app = FastAPI(), FastAPI()
    model_app.include_router(model_router(model))
    tool_app.include_router(tool_router(tool))
    async with serve_many([model_app, tool_app]) as urls:
        deployment = Served(model, tool, urls)
        try:
            yield deployment
        finally:
            await deployment.model_client.aclose()
            await deployment.tool_client.aclose()


async def test_model_and_tool_clients_round_trip(served: Served) -> None:
    """generate, call and both finishes return exactly the servers' replies."""
    reply = await served.model_client.generate(gen(Ep("r", 0)))
    assert reply == {"text": policy_action(4, "r", 0, "hi"), "staging_key": "r/t0"}
    effect = await served.tool_client.call(
        {"episode": Ep("r", 0).to_wire(), "turn": 0, "action": "a"}
    )
    assert effect["applied"] is True
    assert (await served.model_client.finish({"episode": Ep("r", 0).to_wire()}))[
        "staging_keys"
    ] == ["r/t0"]
    assert (await served.tool_client.finish({"episode": Ep("r", 0).to_wire()}))["released"] == "r"


async def test_error_envelopes_come_back_as_the_same_participant_error(served: Served) -> None:
    """admission_closed and stale_attempt keep their codes across the wire."""
    await served.model.core.prepare("ck-1", deadline_ts=deadline())
    with pytest.raises(ParticipantError) as closed:
        await served.model_client.generate(gen(Ep("r", 0)))
    assert closed.value.code == "admission_closed"
    await served.model.core.resume("ck-1", deadline_ts=deadline())
    await served.model.core.retire("rt-1", deadline_ts=deadline(), episode_ids=[Ep("r", 0)])
    with pytest.raises(ParticipantError) as stale:
        await served.model_client.generate(gen(Ep("r", 0)))
    assert stale.value.code == "stale_attempt"


async def test_agent_over_http_parks_on_admission_closed_and_finishes(served: Served) -> None:
    """A model closed for a checkpoint parks the agent's run; after resume the run completes."""
    agent = served.agent()
    await served.model.core.prepare("ck-1", deadline_ts=deadline())
    await agent.core.prepare("ck-1", deadline_ts=deadline())
    run = asyncio.create_task(agent.run({"episode": Ep("r", 0).to_wire(), "task": TASK}))
    while not agent.parked():
        await asyncio.sleep(0.002)
    await agent.core.resume("ck-1", deadline_ts=deadline())
    await served.model.core.resume("ck-1", deadline_ts=deadline())
    result = await asyncio.wait_for(run, 10)
    assert agent.parks >= 1
    assert result["transcript"] == expected_transcript("r", TASK, seed=4)


async def test_agent_over_http_stops_on_stale_attempt(served: Served) -> None:
    """A stale_attempt from the model ends the agent's run with that error."""
    agent = served.agent()
    await served.model.core.retire("rt-1", deadline_ts=deadline(), episode_ids=[Ep("r", 0)])
    with pytest.raises(ParticipantError) as stale:
        await agent.run({"episode": Ep("r", 0).to_wire(), "task": TASK})
    assert stale.value.code == "stale_attempt"


async def test_connection_refused_raises_data_plane_unavailable() -> None:
    """Nothing listening: a clear DataPlaneUnavailable naming the URL, which pickles intact."""
    url = closed_port_url()
    async with HttpModelClient(url) as client:
        with pytest.raises(DataPlaneUnavailable) as failure:
            await client.generate(gen(Ep("r", 0)))
    assert failure.value.url == f"{url}/generate"
    assert "cannot connect" in str(failure.value)
    copy = pickle.loads(pickle.dumps(failure.value))
    assert (type(copy), copy.url, copy.reason, str(copy)) == (
        DataPlaneUnavailable,
        failure.value.url,
        failure.value.reason,
        str(failure.value),
    )


async def test_a_silent_server_raises_data_plane_unavailable() -> None:
    """A reply slower than the timeout is reported as no reply, not retried."""
    calls = 0
    release = asyncio.Event()
    app = FastAPI()

    @app.post("/call")
    async def slow() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        await release.wait()
        return {}

    async with serve(app) as url, HttpToolClient(url, timeout=0.2) as client:
        with pytest.raises(DataPlaneUnavailable, match="no reply"):
            await client.call({})
        release.set()
    assert calls == 1


async def test_replies_without_the_envelope_become_checkpoint_errors() -> None:
    """A plain-text 500, FastAPI's 422 and a non-object 200 are checkpoint_error with the text."""
    app = FastAPI()

    @app.post("/generate")
    async def plain() -> PlainTextResponse:
        return PlainTextResponse("Internal Server Error", status_code=500)

    @app.post("/finish")
    async def listing() -> JSONResponse:
        return JSONResponse([1, 2])

    async with serve(app) as url, HttpModelClient(url) as client:
        with pytest.raises(ParticipantError) as plain_error:
            await client.generate({})
        with pytest.raises(ParticipantError) as list_error:
            await client.finish({})
    assert plain_error.value.code == "checkpoint_error"
    assert plain_error.value.detail == "HTTP 500 Internal Server Error"
    assert list_error.value.code == "checkpoint_error" and "[1,2]" in list_error.value.detail


def test_clients_refuse_unusable_urls() -> None:
    """A base URL must be http(s) without query or fragment."""
    for bad in ("ftp://host", "localhost:80", "http://host/?q=1"):
        with pytest.raises(ValueError):
            HttpModelClient(bad)


async def test_agent_client_runs_a_rollout_over_http(served: Served) -> None:
    """HttpAgentClient.run returns the remote agent's result for the episode."""
    agent = served.agent()
    app = FastAPI()
    app.include_router(agent_router(agent))
    async with serve(app) as url, HttpAgentClient(url) as client:
        result = await client.run(Ep("r", 0), TASK, timeout=10)
        with pytest.raises(ParticipantError) as bad:
            await client.run(Ep("q", 0), {"prompt": "p"})
    assert result["transcript"] == expected_transcript("r", TASK, seed=4)
    assert bad.value.code == "invalid_request"


async def test_http_staging_sink_posts_rows_with_the_token() -> None:
    """Rows reach the trainer route; a wrong token is refused; the token stays out of repr."""
    rows: list[tuple[str, str, str]] = []
    app = FastAPI()
    app.include_router(rows_router(lambda *row: rows.append(row), token=TOKEN))
    async with serve(app) as url:
        async with HttpStagingSink(f"{url}/rows", TOKEN) as sink:
            await sink.stage("r", "r/t0", "payload")
            assert TOKEN not in repr(sink)
        async with HttpStagingSink(f"{url}/rows", "wrong") as wrong:
            with pytest.raises(ParticipantError) as refused:
                await wrong.stage("r", "r/t1", "payload")
    assert refused.value.code == "unauthorized"
    assert rows == [("r", "r/t0", "payload")]
    with pytest.raises(ValueError):
        HttpStagingSink(f"{url}/rows", "")


async def test_callback_sink_accepts_plain_and_coroutine_functions() -> None:
    """A plain callback and an async one both receive the row."""
    seen: list[str] = []

    async def later(capture_key: str, staging_key: str, payload: str) -> None:
        seen.append(f"async {staging_key}")

    await CallbackStagingSink(lambda c, k, p: seen.append(f"sync {k}")).stage("r", "r/t0", "p")
    await CallbackStagingSink(later).stage("r", "r/t1", "p")
    assert seen == ["sync r/t0", "async r/t1"]


async def test_model_stages_each_row_before_recording_it() -> None:
    """Each generation stages its deterministic payload, then records the key."""
    rows: dict[str, tuple[str, str]] = {}
    model = PolicyModelServer(
        seed=9, staging_sink=CallbackStagingSink(lambda c, k, p: rows.__setitem__(k, (c, p)))
    )
    reply = await model.generate(gen(Ep("r", 1), 3, "obs"))
    assert rows == {"r-a1/t3": ("r-a1", staging_payload(3, reply["text"]))}
    assert json.loads(rows["r-a1/t3"][1]) == {"turn": 3, "text": reply["text"]}
    assert model.staging_ledger() == {"r-a1": ("r-a1/t3",)}


async def test_a_failing_sink_fails_the_generation_and_records_nothing() -> None:
    """A sink error (even a protocol one) is checkpoint_error, and the ledger stays empty."""

    def refuse(capture_key: str, staging_key: str, payload: str) -> None:
        raise ParticipantError("admission_closed", "trainer data plane closed")

    model = PolicyModelServer(staging_sink=CallbackStagingSink(refuse))
    with pytest.raises(ParticipantError) as failure:
        await model.generate(gen(Ep("r", 0)))
    assert failure.value.code == "checkpoint_error"
    assert "r/t0" in failure.value.detail
    assert model.staging_ledger() == {}
    assert model.live_episodes() == frozenset()


async def test_a_rollout_retired_while_staging_records_no_row() -> None:
    """Retire racing the sink: the generation is refused stale and the ledger gets nothing back."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(capture_key: str, staging_key: str, payload: str) -> None:
        entered.set()
        await release.wait()

    model = PolicyModelServer(staging_sink=CallbackStagingSink(slow))
    generation = asyncio.create_task(model.generate(gen(Ep("r", 0))))
    await entered.wait()
    retire = asyncio.create_task(
        model.core.retire("rt-1", deadline_ts=deadline(), episode_ids=[Ep("r", 0)])
    )
    while model.core.fence.mark("r") is None:
        await asyncio.sleep(0)
    release.set()
    with pytest.raises(ParticipantError) as stale:
        await generation
    await retire
    assert stale.value.code == "stale_attempt"
    assert model.staging_ledger() == {}


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (b"HTTP/1.x 200 OK\r\nContent-Length: 2\r\n\r\n{}", "BadReply"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n" + b"[" * 200, "BadReply"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}", "ServerDisconnected"),
    ],
    ids=["not-http-1", "nested-too-deep", "cut-short"],
)
async def test_a_reply_that_is_not_one_raises_data_plane_unavailable(
    reply: bytes, reason: str
) -> None:
    """Framing the h11 client refuses, JSON nested too deep or a reply cut short: no reply."""
    with RawHttpServer([[reply]], close_after=True) as server:
        async with HttpToolClient(server.url) as client:
            with pytest.raises(DataPlaneUnavailable, match=reason):
                await client.call({})
