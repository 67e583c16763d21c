"""Tests for envckpt.http.client: HttpTransport's retries, replies, discovery and config parsing."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.transport import TransportFailure
from envckpt.coordination.types import Member, Participants
from envckpt.errors import CoordinationError
from envckpt.http.client import HttpTransport, nemo_gym_server_urls
from envckpt.http.serve import serve, serve_in_thread

from helpers.http_deployment import (
    TOKEN,
    deadline,
    deploy,
    make_core,
    new_id,
    participant_app,
    trio,
)
from helpers.nemo_gym_config import realistic_config

PREFIX = "/ng-control/v1/checkpoint"


@contextmanager
def closed_port() -> Iterator[str]:
    """A base URL whose port is bound but not listening: every connect is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@asynccontextmanager
async def dropping_server() -> AsyncIterator[tuple[str, list[int]]]:
    """A TCP server that reads a request and hangs up without replying; counts connections."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", accepted
    finally:
        server.close()
        await server.wait_closed()


class _Strict(BaseModel):
    checkpoint_id: int
    field_with_a_long_name_number_one: int
    field_with_a_long_name_number_two: int
    field_with_a_long_name_number_three: int


def gym_like_app() -> tuple[FastAPI, dict[str, int], asyncio.Event]:
    """Control routes as a Gym build without the envelope answers them."""
    app = FastAPI()
    hits = {"status": 0}
    release = asyncio.Event()

    @app.post(f"{PREFIX}/prepare")
    async def prepare(body: _Strict) -> dict[str, Any]:
        return {}

    @app.post(f"{PREFIX}/commit")
    async def commit() -> dict[str, Any]:
        raise RuntimeError("hook exploded")

    @app.get(f"{PREFIX}/status")
    async def status() -> dict[str, Any]:
        hits["status"] += 1
        await release.wait()
        return {"kind": "model"}

    return app, hits, release


async def test_connection_refused_is_retried_then_fails() -> None:
    """A refused connection is tried exactly connect_tries times, then TransportFailure."""
    with closed_port() as url:
        async with HttpTransport({"down": url}, token=TOKEN) as transport:
            for tries in (1, 3):
                before = transport.attempts
                with pytest.raises(TransportFailure) as raised:
                    await transport.request(
                        "down", "GET", "status", None, timeout=5.0, connect_tries=tries
                    )
                assert transport.attempts - before == tries
                text = str(raised.value)
                assert text.startswith("down GET status: cannot connect to")
                assert f"after {tries} {'try' if tries == 1 else 'tries'}" in text


async def test_read_timeout_is_not_retried() -> None:
    """A request that reached the server and timed out is never sent again."""
    app, hits, release = gym_like_app()
    async with serve(app) as url, HttpTransport({"slow": url}, token=TOKEN) as transport:
        with pytest.raises(TransportFailure, match=r"no reply within 0\.3 s"):
            await transport.request("slow", "GET", "status", None, timeout=0.3, connect_tries=3)
        assert transport.attempts == 1
        release.set()
        await asyncio.sleep(0.05)
        assert hits["status"] == 1


async def test_dropped_connection_is_not_retried() -> None:
    """A server hanging up after reading the request fails at once, without a resend."""
    async with (
        dropping_server() as (url, accepted),
        HttpTransport({"flaky": url}, token=TOKEN) as transport,
    ):
        with pytest.raises(TransportFailure, match="RemoteProtocolError"):
            await transport.request(
                "flaky",
                "POST",
                "prepare",
                {"checkpoint_id": "c", "deadline_ts": deadline()},
                timeout=5.0,
                connect_tries=3,
            )
        assert transport.attempts == 1
        assert len(accepted) == 1


async def test_non_envelope_replies_are_described_raw() -> None:
    """FastAPI's default 422 and a plain-text 500 are described as HTTP <status> <200 bytes>."""
    app, _, release = gym_like_app()
    release.set()
    async with serve(app) as url, HttpTransport({"gym": url}, token=TOKEN) as transport:
        body = {"checkpoint_id": "c", "deadline_ts": deadline()}
        invalid = await transport.request("gym", "POST", "prepare", body, timeout=5.0)
        assert invalid.status == 422 and isinstance(invalid.body["detail"], list)
        assert invalid.error_code is None
        assert len(invalid.raw.encode()) > 200
        assert invalid.describe() == f"HTTP 422 {invalid.raw[:200]}"

        crashed = await transport.request("gym", "POST", "commit", body, timeout=5.0)
        assert (crashed.status, crashed.body, crashed.raw) == (500, None, "Internal Server Error")
        assert crashed.describe() == "HTTP 500 Internal Server Error"

        coordinator = Coordinator(transport)
        participants = Participants(members=(Member("gym", "model"),))
        with pytest.raises(CoordinationError) as raised:
            await coordinator.prepare(participants, new_id(), deadline_ts=deadline())
        assert raised.value.failures["gym"].startswith('HTTP 422 {"detail":')
        with pytest.raises(CoordinationError) as raised:
            await coordinator.commit(participants, new_id(), "/tmp/x", [], deadline_ts=deadline())
        assert raised.value.failures == {"gym": "HTTP 500 Internal Server Error"}


async def test_envelope_reply_is_parsed() -> None:
    """An envelope reply keeps status, parsed body and raw text; describe names the code."""
    async with deploy({"policy": make_core("policy", "model")}) as d:
        reply = await d.post("policy", "renew", {"checkpoint_id": "c", "deadline_ts": deadline()})
        assert reply.status == 409 and reply.error_code == "invalid_phase"
        assert reply.raw.startswith('{"error":')
        assert reply.describe().startswith("invalid_phase: ")


async def test_discovery_skips_a_server_without_control_routes() -> None:
    """A 404 on status means not a participant: discovery leaves that server out."""
    async with deploy(trio(), others={"judge": FastAPI()}) as d:
        assert d.transport.server_names() == ("agent", "judge", "policy", "resources")
        participants = await d.coordinator.discover()
        assert participants.names == {"agent", "policy", "resources"}


async def test_discovery_fails_on_unauthorized() -> None:
    """A participant answering 401 fails discovery outright."""
    async with deploy(trio(), transport_token="not-the-token") as d:
        with pytest.raises(CoordinationError) as raised:
            await d.coordinator.discover()
        assert raised.value.operation == "discover"
        assert set(raised.value.failures) == {"agent", "policy", "resources"}
        assert all(text.startswith("unauthorized:") for text in raised.value.failures.values())


async def test_discovery_fails_on_a_down_server() -> None:
    """A server that refuses connections fails discovery after three connection tries."""
    async with deploy({"policy": make_core("policy", "model")}) as d:
        with closed_port() as down:
            urls = {**d.urls, "down": down}
            async with HttpTransport(urls, token=TOKEN) as transport:
                with pytest.raises(CoordinationError) as raised:
                    await Coordinator(transport).discover()
                assert set(raised.value.failures) == {"down"}
                assert "after 3 tries" in raised.value.failures["down"]
                assert transport.attempts == 1 + 3


async def test_server_outside_the_loop() -> None:
    """serve_in_thread runs a participant on its own loop; the transport reaches it."""
    core = make_core("policy", "model")
    with serve_in_thread(participant_app(core)) as url:
        async with HttpTransport({"policy": url}, token=TOKEN) as transport:
            coordinator = Coordinator(transport)
            participants = await coordinator.discover()
            cid = new_id()
            result = await coordinator.prepare(participants, cid, deadline_ts=deadline())
            assert result.prepared
            await coordinator.resume(participants, cid, deadline_ts=deadline())
    assert core.phase == "idle"


async def test_serve_reports_a_failed_startup() -> None:
    """An app whose startup fails makes serve raise instead of yielding a URL."""

    @asynccontextmanager
    async def broken(app: FastAPI) -> AsyncIterator[None]:
        raise RuntimeError("startup exploded")
        yield

    with pytest.raises(RuntimeError, match="uvicorn failed to start"):
        async with serve(FastAPI(lifespan=broken)):
            pytest.fail("serve yielded for an app that did not start")


async def test_transport_refuses_bad_arguments() -> None:
    """An empty token, a non-http URL, an unknown server or route are refused."""
    with pytest.raises(ValueError, match="non-empty bearer token"):
        HttpTransport({"a": "http://127.0.0.1:1"}, token="")
    for url in ("127.0.0.1:80", "ftp://host/", "http://host/?q=1", "http://"):
        with pytest.raises(ValueError):
            HttpTransport({"a": url}, token=TOKEN)
    async with HttpTransport({"a": "http://127.0.0.1:9/base/"}, token=TOKEN) as transport:
        assert transport.base_url("a") == "http://127.0.0.1:9/base"
        assert TOKEN not in repr(transport)
        with pytest.raises(TransportFailure, match="no server named 'b'"):
            await transport.request("b", "GET", "status", None, timeout=1.0)
        with pytest.raises(ValueError, match="unknown control route"):
            await transport.request("a", "POST", "explode", {}, timeout=1.0)


def test_from_nemo_gym_config_parses_a_realistic_config() -> None:
    """Every server instance of a resolved nemo-gym config, and nothing else, becomes a server."""
    transport = HttpTransport.from_nemo_gym_config(realistic_config(), token=TOKEN)
    assert {name: transport.base_url(name) for name in transport.server_names()} == {
        "judge_model": "http://127.0.0.1:41004",
        "math_env": "http://127.0.0.1:41005",
        "math_with_judge": "http://127.0.0.1:41002",
        "math_with_judge_simple_agent": "http://127.0.0.1:41003",
        "policy_model": "http://127.0.0.1:41001",
    }
    client = SimpleNamespace(global_config_dict=realistic_config())
    from_client = HttpTransport.from_server_client(client, token=TOKEN, max_connections=4)
    assert from_client.server_names() == transport.server_names()


def test_nemo_gym_config_errors_and_ipv6() -> None:
    """Unresolved ports and malformed server entries are refused; IPv6 hosts get brackets."""
    config = realistic_config()
    config["math_env"]["environment_servers"]["legacy_agent"]["host"] = "::1"
    assert nemo_gym_server_urls(config)["math_env"] == "http://[::1]:41005"
    for bad_port in (None, -1, 0, "41001", True):
        config = realistic_config()
        config["policy_model"]["responses_api_models"]["vllm_model"]["port"] = bad_port
        with pytest.raises(ValueError, match="policy_model"):
            nemo_gym_server_urls(config)
    config = realistic_config()
    config["policy_model"]["responses_api_models"]["second"] = {"host": "h", "port": 1}
    with pytest.raises(ValueError, match="exactly one"):
        nemo_gym_server_urls(config)
    config = realistic_config()
    config["policy_model"]["resources_servers"] = {"x": {"host": "h", "port": 1}}
    with pytest.raises(ValueError, match="several server types"):
        nemo_gym_server_urls(config)
