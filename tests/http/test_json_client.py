"""Tests for envckpt.http.json_client: JSON calls to any URL on envckpt's h11 pool."""

from __future__ import annotations

import asyncio
import socket

import pytest

from envckpt.http.connections import BadReply, ConnectFailed, ServerDisconnected
from envckpt.http.json_client import JsonClient

from helpers.raw_http import RawHttpServer, ok

TOKEN = "json-client-token-5e1f"


async def test_a_post_sends_json_with_the_fixed_headers_and_reads_the_reply() -> None:
    """One write per request: Host, Accept, the caller's headers, the JSON body with its length."""
    with RawHttpServer([[ok(b'{"run":1}'), ok(b"[2]")]]) as server:
        async with JsonClient(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            reply = await client.post(f"{server.url}/run?x=1", {"a": [1, 2]}, timeout=5.0)
            again = await client.get(f"{server.url}/status", timeout=5.0)
    assert (reply.status, reply.ok, reply.json(), again.json()) == (200, True, {"run": 1}, [2])
    assert server.connections == 1
    post, get = server.requests[0]
    assert post == (
        b"POST /run?x=1 HTTP/1.1\r\nhost: 127.0.0.1:%d\r\naccept: application/json\r\n"
        b"authorization: Bearer %s\r\ncontent-type: application/json\r\n"
        b'content-length: 11\r\n\r\n{"a":[1,2]}' % (server.port, TOKEN.encode())
    )
    assert get.startswith(b"GET /status HTTP/1.1\r\n") and b"content-length" not in get


async def test_a_path_outside_ascii_is_percent_encoded() -> None:
    """A URL's non-ASCII path goes out percent-encoded, never as raw bytes."""
    with RawHttpServer([[ok()]]) as server:
        async with JsonClient() as client:
            await client.get(f"{server.url}/caf\u00e9", timeout=5.0)
    assert server.requests[0][0].startswith(b"GET /caf%C3%A9 HTTP/1.1\r\n")


async def test_replies_that_are_not_json_or_too_deep() -> None:
    """Not JSON: None with the text kept; nested past the limit: BadReply."""
    boom = b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nboom"
    with RawHttpServer([[boom, ok(b"[" * 100)]]) as server:
        async with JsonClient() as client:
            plain = await client.get(server.url, timeout=5.0)
            assert (plain.ok, plain.text, plain.json()) == (False, "boom", None)
            deep = await client.get(server.url, timeout=5.0)
            with pytest.raises(BadReply, match="nests deeper"):
                deep.json()


async def test_hostile_framing_is_a_bad_reply() -> None:
    """The pool's refusals reach the caller typed (the data clients map them)."""
    with RawHttpServer([[b"HTTP/1.x 200 OK\r\nContent-Length: 2\r\n\r\n{}"]]) as server:
        async with JsonClient() as client:
            with pytest.raises(BadReply):
                await client.get(server.url, timeout=5.0)


async def test_nothing_listening_is_connect_failed_and_a_dropped_call_is_a_disconnect() -> None:
    """Refused: ConnectFailed; the server closing without a reply: ServerDisconnected."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with JsonClient() as client:
            with pytest.raises(ConnectFailed):
                await client.get(url, timeout=5.0)
    with RawHttpServer([[b""]], close_after=True) as server:
        async with JsonClient() as client:
            with pytest.raises(ServerDisconnected):
                await client.get(server.url, timeout=5.0)


async def test_no_reply_in_time_is_a_timeout_and_nothing_is_resent() -> None:
    """A silent server: TimeoutError at the deadline, and the request went out once."""
    with RawHttpServer([[]]) as server:
        async with JsonClient() as client:
            with pytest.raises(TimeoutError):
                await client.get(server.url, timeout=0.2)
    assert server.connections == 1


async def test_a_closed_client_refuses_calls() -> None:
    """After aclose every call is ConnectFailed; the token stays out of the repr."""
    client = JsonClient(headers={"Authorization": f"Bearer {TOKEN}"})
    await client.aclose()
    assert client.is_closed and TOKEN not in repr(client)
    with pytest.raises(ConnectFailed):
        await client.get("http://127.0.0.1:9/x", timeout=1.0)


def test_a_client_belongs_to_one_event_loop() -> None:
    """The pool is made in the first call's loop; another loop is refused, not shared."""
    with RawHttpServer([[ok()]]) as server:
        client = JsonClient()
        assert asyncio.run(client.get(server.url, timeout=5.0)).status == 200
        with pytest.raises(RuntimeError, match="one event loop"):
            asyncio.run(client.get(server.url, timeout=5.0))


def test_bad_arguments_are_refused() -> None:
    """Non-positive limits and timeouts, NaN bodies and non-http URLs are ValueError."""
    with pytest.raises(ValueError):
        JsonClient(max_connections=0)
    with pytest.raises(ValueError):
        JsonClient(connect_timeout=0)

    async def calls() -> None:
        async with JsonClient() as client:
            for call in (
                client.get("http://127.0.0.1:9/", timeout=0),
                client.post("http://127.0.0.1:9/", {"x": float("nan")}, timeout=1.0),
                client.get("ftp://127.0.0.1/", timeout=1.0),
            ):
                with pytest.raises(ValueError):
                    await call

    asyncio.run(calls())
