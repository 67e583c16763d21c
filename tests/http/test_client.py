"""Tests for envckpt.http.client: HttpTransport's retries, replies, discovery and config parsing."""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Response
from pydantic import BaseModel

from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.transport import TransportFailure
from envckpt.coordination.types import Member, Participants
from envckpt.errors import CoordinationError
from envckpt.http import client as client_module
from envckpt.http.client import (
    HttpTransport,
    checked_base_url,
    encode_body,
    nemo_gym_server_urls,
)
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
async def tcp_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """``handle`` serving each connection on an ephemeral port of 127.0.0.1: its base URL."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def dropping_server() -> AsyncIterator[tuple[str, list[int]]]:
    """A TCP server that reads a request and hangs up without replying; counts connections."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async with tcp_server(handle) as url:
        yield url, accepted


@asynccontextmanager
async def stale_keepalive_server() -> AsyncIterator[tuple[str, list[str]]]:
    """Answers the first request of each connection and keeps it open; on the next
    request of that connection hangs up unanswered, as a server whose keep-alive
    timeout expired just as the request was sent. Logs "reply" or "hang up"."""
    log: list[str] = []
    reply = b'{"phase":"prepared"}'

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        log.append("reply")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(reply)}\r\n\r\n".encode()
            + reply
        )
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        log.append("hang up")
        writer.close()

    async with tcp_server(handle) as url:
        yield url, log


@asynccontextmanager
async def serve_with_keepalive(
    apps: list[FastAPI], *, keepalive_seconds: int
) -> AsyncIterator[list[str]]:
    """Serve each app under uvicorn (in this loop) with the given keep-alive timeout."""
    servers = [
        uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=0,
                log_config=None,
                log_level="warning",
                timeout_keep_alive=keepalive_seconds,
            )
        )
        for app in apps
    ]
    for server in servers:
        server.install_signal_handlers = False  # type: ignore[attr-defined]
    tasks = [asyncio.create_task(server.serve()) for server in servers]
    try:
        while not all(server.started for server in servers):
            await asyncio.sleep(0.01)
        yield [f"http://127.0.0.1:{s.servers[0].sockets[0].getsockname()[1]}" for s in servers]
    finally:
        for server in servers:
            server.should_exit = True
        await asyncio.gather(*tasks)


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
        with pytest.raises(TransportFailure, match="ServerDisconnected"):
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


async def test_a_closed_pooled_connection_is_resent_on_a_new_one() -> None:
    """A call on a kept-alive connection the server closed unanswered is sent again, once."""
    body = {"checkpoint_id": "c", "deadline_ts": deadline()}
    async with (
        stale_keepalive_server() as (url, log),
        HttpTransport({"gym": url}, token=TOKEN) as transport,
    ):
        first = await transport.request("gym", "POST", "prepare", body, timeout=5.0)
        second = await transport.request("gym", "POST", "prepare", body, timeout=5.0)
        assert first.body == second.body == {"phase": "prepared"}
        assert log == ["reply", "hang up", "reply"]
        assert (transport.requests, transport.attempts, transport.stale_retries) == (2, 3, 1)


async def test_without_the_stale_retry_a_closed_pooled_connection_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tampered: with no resends allowed, the same closed pooled connection is a failure."""
    monkeypatch.setattr(client_module, "STALE_CONNECTION_RETRIES", 0)
    body = {"checkpoint_id": "c", "deadline_ts": deadline()}
    async with (
        stale_keepalive_server() as (url, log),
        HttpTransport({"gym": url}, token=TOKEN) as transport,
    ):
        await transport.request("gym", "POST", "prepare", body, timeout=5.0)
        with pytest.raises(TransportFailure, match="Server"):
            await transport.request("gym", "POST", "prepare", body, timeout=5.0)
        assert log == ["reply", "hang up"]


async def test_snapshot_after_idling_exactly_the_servers_keepalive_timeout(
    tmp_path: Path,
) -> None:
    """Idle exactly the servers' keep-alive timeout after each snapshot, then snapshot again."""
    keepalive = 1  # uvicorn's default is 5 s: the same race, shorter
    cores = trio()
    names = list(cores)
    apps = [participant_app(cores[name]) for name in names]
    async with serve_with_keepalive(apps, keepalive_seconds=keepalive) as url_list:
        urls = dict(zip(names, url_list, strict=True))
        # The client keeps connections longer than the servers do, so it reuses them.
        async with HttpTransport(urls, token=TOKEN, keepalive_seconds=30) as transport:
            coordinator = Coordinator(transport)
            participants = await coordinator.discover()
            for _ in range(3):
                cid = new_id()
                result = await coordinator.prepare(participants, cid, deadline_ts=deadline())
                assert result.prepared
                await coordinator.commit(
                    participants, cid, str(tmp_path / cid), [], deadline_ts=deadline()
                )
                await coordinator.resume(participants, cid, deadline_ts=deadline())
                await asyncio.sleep(keepalive)
    assert all(core.phase == "idle" for core in cores.values())
    # Whatever the timing, the only resends were of calls on closed pooled connections.
    assert transport.requests == 3 + 3 * 9
    assert transport.attempts == transport.requests + transport.stale_retries


def test_bodies_encode_as_the_standard_library_reads_them() -> None:
    """orjson's output and the standard-library fallback decode to the same body."""
    for body in (
        {
            "checkpoint_id": "c",
            "deadline_ts": 1.5e9,
            "episode_ids": [{"rollout_id": "é", "attempt": 0}],
        },
        {"checkpoint_id": "c", "episode_ids": None},  # null: the fallback encodes it
        {"checkpoint_id": "c", "big": 2**70},  # orjson refuses it: the fallback encodes it
    ):
        assert json.loads(encode_body(body)) == body


async def test_non_finite_numbers_are_refused_before_sending() -> None:
    """NaN and Infinity are not JSON: the call raises ValueError and sends nothing."""
    async with HttpTransport({"a": "http://127.0.0.1:9"}, token=TOKEN) as transport:
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(ValueError, match="JSON"):
                body = {"checkpoint_id": "c", "deadline_ts": value}
                await transport.request("a", "POST", "prepare", body, timeout=1.0)
        assert transport.attempts == 0


async def test_a_reply_with_nan_is_not_parsed() -> None:
    """A reply body holding NaN is not JSON: it comes back as raw text with no body."""
    app = FastAPI()

    @app.get(f"{PREFIX}/status")
    async def status() -> Response:
        return Response('{"kind": "model", "lease": NaN}', media_type="application/json")

    async with serve(app) as url, HttpTransport({"gym": url}, token=TOKEN) as transport:
        reply = await transport.request("gym", "GET", "status", None, timeout=5.0)
    assert (reply.status, reply.body) == (200, None)
    assert reply.raw == '{"kind": "model", "lease": NaN}'


async def test_an_integer_beyond_64_bits_is_parsed_exactly() -> None:
    """An integer beyond 64 bits (orjson would read a float) is parsed exactly."""
    app = FastAPI()

    @app.get(f"{PREFIX}/status")
    async def status() -> Response:
        return Response(
            json.dumps({"kind": "model", "n": 2**70 + 1}), media_type="application/json"
        )

    async with serve(app) as url, HttpTransport({"gym": url}, token=TOKEN) as transport:
        reply = await transport.request("gym", "GET", "status", None, timeout=5.0)
    assert reply.body == {"kind": "model", "n": 2**70 + 1}


def test_a_transport_belongs_to_one_event_loop() -> None:
    """A transport used from a second event loop refuses instead of sharing its pool."""
    core = make_core("policy", "model")
    with serve_in_thread(participant_app(core)) as url:
        transport = HttpTransport({"policy": url}, token=TOKEN)

        async def status() -> int:
            return (await transport.request("policy", "GET", "status", None, timeout=5.0)).status

        async def status_then_close() -> int:
            try:
                return await status()
            finally:
                await transport.aclose()

        runner = asyncio.Runner()
        try:
            assert runner.run(status()) == 200
            with pytest.raises(RuntimeError, match="one event loop"):
                asyncio.run(status())
            assert runner.run(status_then_close()) == 200
        finally:
            runner.close()


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
    """An empty or multi-line token, proxies, a non-http URL, an unknown server or route
    are refused."""
    with pytest.raises(ValueError, match="non-empty bearer token"):
        HttpTransport({"a": "http://127.0.0.1:1"}, token="")
    with pytest.raises(ValueError, match="printable"):
        HttpTransport({"a": "http://127.0.0.1:1"}, token="tok\r\nX-Evil: 1")
    with pytest.raises(ValueError, match="straight to the servers"):
        HttpTransport({"a": "http://127.0.0.1:1"}, token=TOKEN, trust_env=True)
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


def test_a_base_url_is_checked_and_named_by_what_it_is_for() -> None:
    """A string http(s) URL with a host loses its trailing slashes; anything else is a
    ValueError that starts with what the URL was for."""
    assert checked_base_url("https://h:1/v1//", "rows URL") == "https://h:1/v1"
    for url, problem in (
        (None, "must be a string"),
        ("h:1", "is not an http(s) URL"),
        ("https:///v1", "is not an http(s) URL"),
        ("http://h/?a=1", "has a query or fragment"),
        ("http://h/#top", "has a query or fragment"),
    ):
        with pytest.raises(ValueError, match=rf"^rows URL .*{re.escape(problem)}"):
            checked_base_url(url, "rows URL")


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
