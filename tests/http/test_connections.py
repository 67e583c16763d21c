"""Tests for envckpt.http.connections: the keep-alive pool against raw servers and uvicorn."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from fastapi import FastAPI, Request

from envckpt.http.connections import (
    BadReply,
    ConnectFailed,
    ConnectionPool,
    HttpResponse,
    LoopBoundPool,
    Origin,
    ReplyLimits,
    ServerDisconnected,
)
from envckpt.http.serve import serve

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HOST = [(b"Host", b"test")]


async def get(connections: ConnectionPool, origin: Origin, *, seconds: float = 5.0) -> HttpResponse:
    """``GET /x`` through the pool."""
    return await connections.request(origin, b"GET", b"/x", HOST, None, deadline=soon(seconds))


def ok(body: bytes = b"{}", extra: bytes = b"") -> bytes:
    """A whole HTTP/1.1 200 reply with a Content-Length."""
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and body (by Content-Length) from a raw connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return head + await reader.readexactly(int(line.split(b":")[1]))
    return head


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[Origin, list[int]]]:
    """A TCP server on 127.0.0.1 running ``handler`` per connection; counts connections."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away: the test checks what it saw
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield Origin("http", "127.0.0.1", port), accepted
    finally:
        server.close()
        await server.wait_closed()


def replying(*replies: bytes, hang_up: bool = False) -> Handler:
    """A handler answering the n-th request of a connection with ``replies[n]``; then it
    waits for the client to close, or with ``hang_up`` closes at once."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for reply in replies:
            await read_request(reader)
            writer.write(reply)
            await writer.drain()
        if not hang_up:
            await reader.read()  # until the client closes

    return handler


def pool(**options: object) -> ConnectionPool:
    """A pool with test defaults, overridable."""
    settings: dict[str, object] = {
        "max_connections": 8,
        "keepalive_seconds": 30.0,
        "connect_timeout": 5.0,
    }
    settings.update(options)
    return ConnectionPool(**settings)  # type: ignore[arg-type]


def soon(seconds: float = 5.0) -> float:
    """A deadline ``seconds`` from now on the running loop's clock."""
    return asyncio.get_running_loop().time() + seconds


async def test_keep_alive_reuses_one_connection() -> None:
    """Two calls in a row travel on one connection; the request goes out as written."""
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            seen.append(await read_request(reader))
            writer.write(ok(b'{"n":1}', b"Content-Type: application/json\r\n"))
        await reader.read()

    async with raw_server(handler) as (origin, accepted):
        connections = pool()
        body = b'{"a":1}'
        headers = [(b"Host", origin.host_header.encode()), (b"X-A", b"1")]
        for _ in range(2):
            response = await connections.request(
                origin, b"POST", b"/p", headers, body, deadline=soon()
            )
            assert (response.status, response.body) == (200, b'{"n":1}')
            assert response.headers["content-type"] == "application/json"
        assert len(accepted) == 1 and connections.idle_connections == 1
        await connections.aclose()
    sent = b"POST /p HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-A: 1\r\ncontent-length: 7\r\n\r\n" % (
        origin.port
    )
    assert seen == [sent + body] * 2


async def test_chunked_reply_is_read_whole() -> None:
    """A chunked reply, with an extension and a trailer, is joined; the connection is kept."""
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4;ext=1\r\n{"a"\r\n3\r\n:12\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n'
    )
    async with raw_server(replying(chunked, ok())) as (origin, accepted):
        connections = pool()
        response = await get(connections, origin)
        assert response.body == b'{"a":12}'
        await get(connections, origin)
        assert len(accepted) == 1
        await connections.aclose()


async def test_a_chunk_without_its_crlf_is_a_bad_reply() -> None:
    """Tampered chunked framing (a chunk longer than its size) is refused."""
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n"
    async with raw_server(replying(chunked)) as (origin, _):
        connections = pool()
        with pytest.raises(BadReply, match="chunk"):
            await get(connections, origin)
        assert connections.open_connections == 0
        await connections.aclose()


@pytest.mark.parametrize(
    "reply",
    [
        ok(extra=b"Connection: close\r\n"),
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\n\r\n{}",  # no length: the body ends with the connection
    ],
    ids=["connection-close", "http-1.0", "read-to-end"],
)
async def test_replies_that_end_the_connection_are_not_reused(reply: bytes) -> None:
    """Connection: close, HTTP/1.0 or a body framed by the close: the next call connects anew."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()
        writer.close()

    async with raw_server(handler) as (origin, accepted):
        connections = pool()
        for _ in range(2):
            response = await get(connections, origin)
            assert (response.status, response.body) == (200, b"{}")
            assert connections.idle_connections == 0
        assert len(accepted) == 2
        await connections.aclose()


async def test_a_keep_alive_reply_is_reused_where_a_closing_one_is_not() -> None:
    """Tampered: the same reply without Connection: close keeps its connection."""
    async with raw_server(replying(ok(extra=b"Connection: keep-alive\r\n"))) as (origin, _):
        connections = pool()
        await get(connections, origin)
        assert connections.idle_connections == 1
        await connections.aclose()


async def test_interim_replies_are_skipped() -> None:
    """100 Continue and 103 Early Hints before the final reply are passed over."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    async with raw_server(replying(interim + ok(b"[1]"))) as (origin, _):
        connections = pool()
        response = await get(connections, origin)
        assert (response.status, response.body) == (200, b"[1]")
        await connections.aclose()


async def test_oversize_headers_and_bodies_are_refused() -> None:
    """Headers or a body (by length, chunked, or to the end) over the limits are BadReply."""
    limits = ReplyLimits(max_header_bytes=1024, max_body_bytes=100)
    big_header = b"X-Pad: " + b"a" * 2000 + b"\r\n"
    cases = {
        "headers": ok(extra=big_header),
        "body": ok(b"x" * 101),
        "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"40\r\n"
        + b"x" * 64
        + b"\r\n"
        + b"40\r\n"
        + b"x" * 64
        + b"\r\n0\r\n\r\n",
        "to the end": b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 101,
    }
    for name, reply in cases.items():

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(reply)  # noqa: B023  (used before the loop moves on)
            await writer.drain()
            writer.close()

        async with raw_server(handler) as (origin, _):
            connections = pool(limits=limits)
            with pytest.raises(BadReply, match="over"):
                await get(connections, origin)
            assert connections.open_connections == 0, name
            await connections.aclose()


async def test_replies_just_within_the_limits_are_read() -> None:
    """Tampered sizes: a header block and body exactly at the limits are accepted."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n"
    pad = 1024 - len(head) - len(b"X-P: \r\n\r\n")
    reply = head + b"X-P: " + b"a" * pad + b"\r\n\r\n" + b"x" * 100
    async with raw_server(replying(reply)) as (origin, _):
        connections = pool(limits=ReplyLimits(max_header_bytes=1024, max_body_bytes=100))
        response = await get(connections, origin)
        assert response.body == b"x" * 100
        await connections.aclose()


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    ],
)
async def test_malformed_replies_are_bad_replies(reply: bytes) -> None:
    """A reply that is not HTTP/1.x framing this client reads is BadReply, never a guess."""
    async with raw_server(replying(reply)) as (origin, _):
        connections = pool()
        with pytest.raises(BadReply):
            await get(connections, origin)
        await connections.aclose()


async def test_a_pooled_connection_closed_while_idle_is_stale() -> None:
    """The server closes after one reply: the next send on that connection is stale, unread."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok())
        await writer.drain()
        await read_request(reader)  # the second request arrives, and is dropped
        writer.close()

    async with raw_server(handler) as (origin, accepted):
        connections = pool()
        await get(connections, origin)
        with pytest.raises(ServerDisconnected) as raised:
            await get(connections, origin)
        assert raised.value.stale
        assert len(accepted) == 1
        await connections.aclose()


async def test_a_closed_idle_connection_the_loop_has_seen_is_not_used() -> None:
    """A pooled connection whose close already arrived is dropped before sending."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok())  # keep-alive framing, then the server closes anyway
        await writer.drain()
        writer.close()

    async with raw_server(handler) as (origin, accepted):
        connections = pool()
        await get(connections, origin)
        await asyncio.sleep(0.1)  # the close reaches the client's loop
        response = await get(connections, origin)
        assert response.status == 200 and len(accepted) == 2
        await connections.aclose()


async def test_a_fresh_connection_dropped_after_the_request_is_not_stale() -> None:
    """A new connection the server closes after reading the request: a failure, not a resend."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.close()

    async with raw_server(handler) as (origin, accepted):
        connections = pool()
        with pytest.raises(ServerDisconnected) as raised:
            await get(connections, origin)
        assert not raised.value.stale and len(accepted) == 1
        await connections.aclose()


async def test_a_reply_cut_short_on_a_pooled_connection_is_not_stale() -> None:
    """Bytes of the reply arrived before the close: the server saw the request, no resend."""
    async with raw_server(replying(ok(), b"HTTP/1.1 200 OK\r\nContent-Le", hang_up=True)) as (
        origin,
        _,
    ):
        connections = pool()
        await get(connections, origin)
        with pytest.raises(ServerDisconnected) as raised:
            await get(connections, origin)
        assert not raised.value.stale
        await connections.aclose()


async def test_a_read_timeout_drops_the_connection() -> None:
    """No reply by the deadline: TimeoutError, and the connection is not kept."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()

    async with raw_server(handler) as (origin, accepted):
        connections = pool()
        with pytest.raises(TimeoutError):
            await get(connections, origin, seconds=0.2)
        assert connections.open_connections == 0 and len(accepted) == 1
        await connections.aclose()


async def test_connect_refused_is_connect_failed() -> None:
    """A port nobody listens on: ConnectFailed, and no slot is kept."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        connections = pool()
        origin = Origin("http", "127.0.0.1", sock.getsockname()[1])
        with pytest.raises(ConnectFailed, match="ConnectionRefusedError"):
            await get(connections, origin)
        assert connections.open_connections == 0
        await connections.aclose()
    finally:
        sock.close()


async def test_max_connections_holds_under_concurrency() -> None:
    """Ten concurrent calls through a pool of three never open more than three connections."""
    live = [0]
    peak = [0]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        try:
            while True:
                await read_request(reader)
                await asyncio.sleep(0.05)
                writer.write(ok())
        finally:
            live[0] -= 1

    async with raw_server(handler) as (origin, accepted):
        connections = pool(max_connections=3)
        replies = await asyncio.gather(*(get(connections, origin) for _ in range(10)))
        assert [r.status for r in replies] == [200] * 10
        assert len(accepted) == 3 and peak[0] == 3
        assert connections.open_connections == 3
        await connections.aclose()


async def test_waiting_for_a_free_connection_ends_at_the_deadline() -> None:
    """With the only connection busy past the deadline, a second call times out waiting."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(0.5)
        writer.write(ok())
        await reader.read()

    async with raw_server(handler) as (origin, accepted):
        connections = pool(max_connections=1)
        slow = asyncio.create_task(get(connections, origin))
        await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):
            await get(connections, origin, seconds=0.1)
        assert (await slow).status == 200
        assert len(accepted) == 1 and connections.open_connections == 1
        await connections.aclose()


async def test_max_connections_closes_an_idle_connection_of_another_origin() -> None:
    """At the limit, an idle connection to another server is closed to make room."""
    async with (
        raw_server(replying(ok(), ok())) as (first, _),
        raw_server(replying(ok())) as (second, _),
    ):
        connections = pool(max_connections=1)
        await get(connections, first)
        await get(connections, second)
        assert connections.open_connections == 1
        await connections.aclose()


async def test_idle_connections_expire() -> None:
    """An idle connection is closed after keepalive_seconds; the server sees it go."""
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok())
        await reader.read()  # EOF: the client closed the idle connection
        closed.set()

    async with raw_server(handler) as (origin, _):
        connections = pool(keepalive_seconds=0.2)
        await get(connections, origin)
        assert connections.idle_connections == 1
        await asyncio.wait_for(closed.wait(), 2.0)
        assert connections.idle_connections == 0
        await connections.aclose()


async def test_idle_connections_are_kept_within_keepalive() -> None:
    """Tampered: with a long keep-alive the same idle connection stays open."""
    async with raw_server(replying(ok(), ok())) as (origin, accepted):
        connections = pool(keepalive_seconds=30.0)
        await get(connections, origin)
        await asyncio.sleep(0.3)
        await get(connections, origin)
        assert len(accepted) == 1
        await connections.aclose()


async def test_against_uvicorn_many_calls_share_connections() -> None:
    """Against a real uvicorn server, sequential posts reuse one connection, bodies intact."""
    app = FastAPI()
    peers: set[tuple[str, int]] = set()

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, object]:
        assert request.client is not None
        peers.add((request.client.host, request.client.port))
        return {"got": await request.json(), "auth": request.headers["authorization"]}

    async with serve(app) as url:
        origin = Origin.from_url(url)
        connections = pool()
        for n in range(20):
            body = b'{"n":%d}' % n
            headers = [
                (b"Host", origin.host_header.encode()),
                (b"Authorization", b"Bearer t"),
                (b"Content-Type", b"application/json"),
            ]
            response = await connections.request(
                origin, b"POST", b"/echo", headers, body, deadline=soon()
            )
            assert response.status == 200
            assert response.body == b'{"got":{"n":%d},"auth":"Bearer t"}' % n
        assert len(peers) == 1
        await connections.aclose()


def self_signed(directory: Path) -> tuple[Path, Path] | None:
    """A certificate and key for 127.0.0.1 from the openssl command, or None without it."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    try:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return cert, key


async def test_tls_to_a_local_server(tmp_path: Path) -> None:
    """https goes over TLS, verified against the given context; an untrusting one fails."""
    pair = self_signed(tmp_path)
    if pair is None:
        pytest.skip("openssl is not available to make a certificate")
    cert, key = pair
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await replying(ok(b"secret"))(reader, writer)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context)
    origin = Origin("https", "127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        trusting = pool(ssl_context=ssl.create_default_context(cafile=str(cert)))
        response = await get(trusting, origin)
        assert response.body == b"secret"
        await trusting.aclose()
        untrusting = pool()  # the system's CAs: the self-signed cert is refused
        with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
            await get(untrusting, origin)
        await untrusting.aclose()
    finally:
        server.close()
        await server.wait_closed()


def test_origins_and_host_headers() -> None:
    """Origins default the port by scheme; Host drops a default port and brackets IPv6."""
    assert Origin.from_url("http://a.b") == Origin("http", "a.b", 80)
    assert Origin.from_url("https://[::1]:8443/x") == Origin("https", "::1", 8443)
    assert Origin("http", "a.b", 80).host_header == "a.b"
    assert Origin("https", "::1", 8443).host_header == "[::1]:8443"
    assert Origin("http", "a.b", 8080).host_header == "a.b:8080"
    with pytest.raises(ValueError):
        Origin.from_url("ftp://a.b")


async def test_a_unix_socket_origin_without_a_deadline(tmp_path: Path) -> None:
    """An origin with ``unix_socket`` connects there and keeps its connection; no deadline
    waits as long as the reply takes (a forwarded rollout)."""
    path = str(tmp_path / "w.sock")
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        await replying(ok(b"[1]"), ok(b"[2]"))(reader, writer)
        writer.close()

    server = await asyncio.start_unix_server(handle, path)
    async with server:
        connections = pool()
        origin = Origin("http", "worker", 80, unix_socket=path)
        bodies = [
            (await connections.request(origin, b"GET", b"/x", HOST, None, deadline=None)).body
            for _ in range(2)
        ]
        await connections.aclose()
    assert bodies == [b"[1]", b"[2]"]
    assert accepted == [1]


def test_a_loop_bound_pool_is_made_once_and_refuses_another_loop() -> None:
    """The same pool for every call on its loop; another loop is refused by the owner's name;
    after ``aclose`` a fresh pool is made on first use."""
    bound = LoopBoundPool(
        "a test client", max_connections=2, keepalive_seconds=1.0, connect_timeout=1.0
    )

    async def twice() -> tuple[ConnectionPool, ConnectionPool]:
        return bound.get(), bound.get()

    first, again = asyncio.run(twice())
    assert first is again
    with pytest.raises(RuntimeError, match="a test client is used from one event loop only"):
        asyncio.run(twice())

    async def closed_then_used() -> ConnectionPool:
        await bound.aclose()
        return bound.get()

    assert asyncio.run(closed_then_used()) is not first
