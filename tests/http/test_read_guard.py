"""Tests for envckpt.http.read_guard: a request must arrive whole in time, over real sockets."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI, Request

from envckpt.http.read_guard import REQUEST_READ_SECONDS, guarded_h11
from envckpt.http.serve import ServerLimits, serve

READ_SECONDS = 0.4


def slow_app() -> FastAPI:
    app = FastAPI()

    @app.post("/work")
    async def work(request: Request) -> dict[str, int]:
        body = await request.body()
        await asyncio.sleep(READ_SECONDS * 3)  # slower than the read deadline, once received
        return {"bytes": len(body)}

    return app


@pytest.fixture
async def port() -> AsyncIterator[int]:
    limits = ServerLimits(request_read_seconds=READ_SECONDS, keep_alive_seconds=1)
    async with serve(slow_app(), limits=limits) as url:
        yield int(url.rsplit(":", 1)[1])


async def exchange(port: int, *pieces: bytes, pause: float = 0.0) -> tuple[bytes, float]:
    """Send ``pieces`` (``pause`` s apart) while reading until the server closes the
    connection; (everything read, seconds taken). Writes after the close are dropped."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(pause)

    sender = asyncio.create_task(send())
    try:
        reply = await asyncio.wait_for(reader.read(), timeout=10)
    except ConnectionResetError:
        reply = b""
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        writer.close()
    return reply, time.monotonic() - started


def envelope_of(reply: bytes) -> dict[str, str]:
    body = json.loads(reply.partition(b"\r\n\r\n")[2])
    error: dict[str, str] = body["error"]
    return error


def test_the_default_and_a_bad_deadline() -> None:
    """Requests get 30 s by default; a deadline that is not positive is refused."""
    assert REQUEST_READ_SECONDS == 30.0 == ServerLimits().request_read_seconds
    for seconds in (0.0, -1.0):
        with pytest.raises(ValueError):
            guarded_h11(read_seconds=seconds)


async def test_a_silent_connection_is_closed_with_408(port: int) -> None:
    """Connect and send nothing: closed after the read deadline, with a 408 envelope."""
    reply, seconds = await exchange(port)
    assert reply.startswith(b"HTTP/1.1 408")
    assert envelope_of(reply)["code"] == "invalid_request"
    assert READ_SECONDS * 0.8 <= seconds < READ_SECONDS + 3


async def test_trickled_headers_are_cut_off(port: int) -> None:
    """Headers sent a few bytes at a time, never finished: 408 at the deadline, not later."""
    pieces = [b"POST /work HTTP/1.1\r\n", b"Host: x\r\n", b"X-Slow: 1\r\n"] * 4
    reply, seconds = await exchange(port, *pieces, pause=READ_SECONDS / 4)
    assert reply.startswith(b"HTTP/1.1 408")
    assert seconds < READ_SECONDS * 4


async def test_a_half_sent_body_is_cut_off(port: int) -> None:
    """A body that stops arriving: the connection is closed at the deadline (the app sees it go)."""
    head = b"POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    reply, seconds = await exchange(port, head + b"x" * 10)
    assert b"200 OK" not in reply
    assert seconds < READ_SECONDS + 3


async def test_a_request_received_in_time_may_take_longer_to_answer(port: int) -> None:
    """The deadline covers receiving only: a slow handler still answers."""
    request = b"POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    reply, seconds = await exchange(port, request)
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b'{"bytes":2}')
    assert seconds >= READ_SECONDS * 3


async def test_keep_alive_then_idle_is_closed_and_a_next_request_gets_its_own_deadline(
    port: int,
) -> None:
    """Two requests on one connection both answer; then the idle connection is closed."""
    request = b"POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(2):
            writer.write(request)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b'{"bytes":2}'), timeout=10)
            assert head.startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), timeout=10) == b""  # closed by the server
        assert time.monotonic() - started < 3
    finally:
        writer.close()


async def test_oversize_headers_and_garbage_get_a_400_envelope() -> None:
    """Headers past the limit, or bytes that are not HTTP: 400 with the envelope, closed."""
    limits = ServerLimits(request_read_seconds=5.0, max_header_bytes=2048)
    async with serve(slow_app(), limits=limits) as url:
        port = int(url.rsplit(":", 1)[1])
        # Still incomplete past the limit (h11 buffers at most max_header_bytes).
        big = [b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ", b"a" * 4096]
        for request in (big, [b"\x16\x03\x01 not http at all\r\n\r\n"]):
            reply, _ = await exchange(port, *request, pause=0.05)
            assert reply.startswith(b"HTTP/1.1 400"), reply
            assert envelope_of(reply)["code"] == "invalid_request"
