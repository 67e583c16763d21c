"""Tests for envckpt.http.exchange: one request and its reply on a Wire, framed by h11."""

from __future__ import annotations

import asyncio
import pickle
import socket
import threading
from pathlib import Path

import h11
import pytest

from envckpt.http.exchange import (
    BadReply,
    HttpResponse,
    ReplyLimits,
    RequestHeads,
    ServerDisconnected,
    Wire,
    connect,
    exchange,
    request_bytes,
)

from helpers.raw_http import RawHttpServer, Unasked, ok

HOST = [(b"Host", b"test")]
LIMITS = ReplyLimits()


async def wire_to(server: RawHttpServer, limits: ReplyLimits = LIMITS) -> Wire:
    """A new Wire to ``server``."""
    return await connect("127.0.0.1", server.port, limits=limits, ssl_context=None)


async def get(wire: Wire, limits: ReplyLimits = LIMITS) -> tuple[HttpResponse, bool]:
    """``GET /x`` on ``wire``: the reply and whether the wire may carry another."""
    return await asyncio.wait_for(exchange(wire, b"GET", b"/x", HOST, None, limits), 5.0)


async def closed(wire: Wire) -> None:
    wire.close()
    await wire.wait_closed()


async def get_once(reply: bytes) -> tuple[HttpResponse, bool]:
    """``get`` on a new Wire to a server that answers ``reply``, closed after."""
    with RawHttpServer([[reply]]) as server:
        wire = await wire_to(server)
        try:
            return await get(wire)
        finally:
            await closed(wire)


def test_a_request_is_written_whole_by_h11() -> None:
    """Head and body in one piece, with the length added; h11 is then done with its side."""
    connection = h11.Connection(h11.CLIENT)
    data = request_bytes(connection, b"POST", b"/p", [(b"Host", b"h")], b'{"a":1}')
    assert data == b'POST /p HTTP/1.1\r\nHost: h\r\ncontent-length: 7\r\n\r\n{"a":1}'
    assert connection.our_state is h11.DONE


def test_a_request_without_a_body_has_no_length() -> None:
    """A GET carries no Content-Length and no body."""
    data = request_bytes(h11.Connection(h11.CLIENT), b"GET", b"/g", [(b"Host", b"h")], None)
    assert data == b"GET /g HTTP/1.1\r\nHost: h\r\n\r\n"


@pytest.mark.parametrize(
    ("target", "headers"),
    [(b"/a b", [(b"Host", b"h")]), (b"/", [(b"Host", b"h\r\nX: y")]), (b"/", [])],
    ids=["space-in-target", "line-break-in-header", "no-host"],
)
def test_a_request_h11_refuses_is_a_value_error(
    target: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """A request h11 would not write never reaches the socket."""
    with pytest.raises(ValueError, match="h11 refuses"):
        request_bytes(h11.Connection(h11.CLIENT), b"GET", target, headers, None)


def test_kept_heads_write_the_same_bytes_as_fresh_ones() -> None:
    """A head kept from an earlier request writes exactly what h11 writes for a new one."""
    heads = RequestHeads()
    for body in (b'{"a":1}', b'{"a":2}', b'{"a":10}', None):
        fresh = request_bytes(h11.Connection(h11.CLIENT), b"POST", b"/p", HOST, body)
        kept = request_bytes(h11.Connection(h11.CLIENT), b"POST", b"/p", HOST, body, heads)
        assert kept == fresh


def test_heads_are_kept_per_method_target_fields_and_length() -> None:
    """The same fields and length give the same event; any difference gives another."""
    heads = RequestHeads()
    first = heads.of(b"POST", b"/p", HOST, 7)
    assert heads.of(b"POST", b"/p", list(HOST), 7) is first
    others = [
        heads.of(b"POST", b"/p", HOST, 8),
        heads.of(b"POST", b"/q", HOST, 7),
        heads.of(b"PUT", b"/p", HOST, 7),
        heads.of(b"POST", b"/p", [(b"Host", b"other")], 7),
        heads.of(b"POST", b"/p", HOST, -1),
    ]
    assert all(other is not first for other in others)
    assert (b"content-length", b"8") in list(others[0].headers)
    assert all(name != b"content-length" for name, _ in others[-1].headers)


def test_heads_stay_bounded_and_refusals_are_not_kept() -> None:
    """Past ``size`` entries the least recently used head goes; a refused head raises
    every time."""
    heads = RequestHeads(size=2)
    a = heads.of(b"GET", b"/a", HOST, -1)
    b = heads.of(b"GET", b"/b", HOST, -1)
    assert heads.of(b"GET", b"/a", HOST, -1) is a  # used again: /b is now the oldest
    c = heads.of(b"GET", b"/c", HOST, -1)  # full: /b goes
    assert heads.of(b"GET", b"/a", HOST, -1) is a
    assert heads.of(b"GET", b"/c", HOST, -1) is c
    assert heads.of(b"GET", b"/b", HOST, -1) is not b  # built again; /a goes
    assert heads.of(b"GET", b"/a", HOST, -1) is not a
    for _ in range(2):
        with pytest.raises(ValueError, match="h11 refuses"):
            heads.of(b"GET", b"/a b", HOST, -1)


async def test_a_clean_keep_alive_exchange_leaves_the_wire_reusable() -> None:
    """Both sides DONE, nothing left over: the same wire carries the next exchange."""
    with RawHttpServer([[ok(b"[1]"), ok(b"[2]")]]) as server:
        wire = await wire_to(server)
        first, reusable = await get(wire)
        assert (first.status, first.body, reusable) == (200, b"[1]", True)
        second, _ = await get(wire)
        assert second.body == b"[2]"
        await closed(wire)
    assert server.connections == 1
    assert server.requests[0] == [b"GET /x HTTP/1.1\r\nHost: test\r\n\r\n"] * 2


async def test_nodelay_is_set() -> None:
    """Small requests go out at once: TCP_NODELAY is on."""
    with RawHttpServer([[]]) as server:
        wire = await wire_to(server)
        assert wire.transport is not None
        sock = wire.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        await closed(wire)


async def test_headers_are_lower_cased_and_repeats_joined() -> None:
    """Header names come back lower-cased; a repeated header is one value joined by ', '."""
    reply = ok(extra=b"X-Tag: a\r\nx-tag: b\r\nServer: raw\r\n")
    response, _ = await get_once(reply)
    assert response.headers["x-tag"] == "a, b"
    assert response.headers["server"] == "raw"


@pytest.mark.parametrize(
    "reply",
    [
        ok(extra=b"Connection: close\r\n"),
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
        ok() + b"H",
        ok() + ok(),
    ],
    ids=["connection-close", "http-1.0", "one-byte-more", "a-second-reply"],
)
async def test_an_exchange_that_did_not_end_cleanly_is_not_reusable(reply: bytes) -> None:
    """Connection: close, HTTP/1.0 or any byte past the reply: the wire is not reused."""
    response, reusable = await get_once(reply)
    assert (response.body, reusable) == (b"{}", False)


async def test_bytes_while_idle_close_the_wire() -> None:
    """Bytes that come when no exchange listens answer nothing: the wire closes at once."""
    idle = threading.Event()
    with RawHttpServer([[ok(), Unasked(ok(b"[0]"), gate=idle)]]) as server:
        wire = await wire_to(server)
        _, reusable = await get(wire)
        assert reusable and wire.alive()
        idle.set()
        await asyncio.wait_for(wire.wait_closed(), 5.0)
        assert not wire.alive()
        with pytest.raises(ServerDisconnected, match="closed before sending"):
            await get(wire)


async def test_interim_replies_are_passed_over_but_101_is_refused() -> None:
    """100 and 103 precede the final reply; 101 (no upgrade was asked) is a BadReply."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    with RawHttpServer(
        [[interim + ok(b"[1]")], [b"HTTP/1.1 101 Switching Protocols\r\n\r\n"]]
    ) as server:
        wire = await wire_to(server)
        response, _ = await get(wire)
        assert response.body == b"[1]"
        await closed(wire)
        wire = await wire_to(server)
        with pytest.raises(BadReply, match="h11"):
            await get(wire)
        await closed(wire)


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (b"HTTP/1.1 099 X\r\n\r\n", "h11"),
        (b"HTTP/1.x 200 OK\r\n\r\n", "h11"),
        (b"HTTP/1.1 200 OK\r\nX-A: \x07\r\nContent-Length: 0\r\n\r\n", "control character"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
            "both Transfer-Encoding and Content-Length",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "h11"),
    ],
    ids=["status-099", "http-1.x", "control-character", "te-and-cl", "gzip-chunked"],
)
async def test_a_reply_h11_or_the_client_refuses_is_a_bad_reply(reply: bytes, match: str) -> None:
    """Each refusal names its reason."""
    with RawHttpServer([[reply]]) as server:
        wire = await wire_to(server)
        with pytest.raises(BadReply, match=match):
            await get(wire)
        await closed(wire)


async def test_header_and_body_limits_are_exact() -> None:
    """A head or body one byte over its limit is refused; at the limit it is read."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n"
    pad = 200 - len(head) - len(b"X-P: \r\n\r\n")
    at_limit = head + b"X-P: " + b"a" * pad + b"\r\n\r\n" + b"x" * 10
    over_head = head + b"X-P: " + b"a" * (pad + 1) + b"\r\n\r\n" + b"x" * 10
    over_body = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n" + b"x" * 11
    limits = ReplyLimits(max_header_bytes=200, max_body_bytes=10)
    with RawHttpServer([[at_limit], [over_head], [over_body]]) as server:
        wire = await wire_to(server, limits)
        response, _ = await get(wire, limits)
        assert response.body == b"x" * 10
        await closed(wire)
        for _ in range(2):
            wire = await wire_to(server, limits)
            with pytest.raises(BadReply, match="over"):
                await get(wire, limits)
            await closed(wire)


async def test_a_reply_cut_short_is_a_disconnect_stale_only_if_pooled_and_silent() -> None:
    """Closed before any byte on a reused wire: stale (resendable); mid-reply: never stale."""
    with RawHttpServer(
        [[ok(), b""], [b"HTTP/1.1 200 OK\r\nContent-Le"]], close_after=True
    ) as server:
        wire = await wire_to(server)
        await get(wire)
        wire.reused = True  # as the pool marks a connection it hands out again
        with pytest.raises(ServerDisconnected) as silent:
            await get(wire)
        assert silent.value.stale
        wire = await wire_to(server)
        wire.reused = True
        with pytest.raises(ServerDisconnected) as partial:
            await get(wire)
        assert not partial.value.stale


def test_server_disconnected_pickles_with_its_staleness() -> None:
    """The error crosses process boundaries (Ray) with ``stale`` kept."""
    error = pickle.loads(pickle.dumps(ServerDisconnected("gone", stale=True)))
    assert (str(error), error.stale) == ("gone", True)


async def test_connecting_to_a_closed_port_is_an_os_error() -> None:
    """No listener: ``connect`` raises the loop's OSError (the pool makes it ConnectFailed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(OSError):
            await connect("127.0.0.1", port, limits=LIMITS, ssl_context=None)


async def test_fields_keep_repeated_headers_apart() -> None:
    """What a proxy passes on: two Set-Cookie headers stay two pairs, in order."""
    reply = ok(extra=b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n")
    response, _ = await get_once(reply)
    assert [pair for pair in response.fields if pair[0] == b"set-cookie"] == [
        (b"set-cookie", b"a=1"),
        (b"set-cookie", b"b=2"),
    ]


async def test_a_wire_over_a_unix_socket(tmp_path: Path) -> None:
    """With ``unix_socket`` the exchange goes over that socket (calls between workers)."""
    path = str(tmp_path / "w.sock")
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(ok(b"[7]"))
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(handle, path)
    async with server:
        wire = await connect("worker", 80, limits=LIMITS, ssl_context=None, unix_socket=path)
        response, _ = await get(wire)
        await closed(wire)
    assert response.body == b"[7]"
    assert seen == [b"GET /x HTTP/1.1\r\nHost: test\r\n\r\n"]
