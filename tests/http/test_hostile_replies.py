"""Hostile replies through the real client: each ends in ``TransportFailure``, never a guess.

Every case a hostile server found in the hand-framed client (issue 26) is
served byte for byte by a raw TCP server (``helpers.raw_http``) and called
through ``HttpTransport.request``, and where a reply reaches discovery,
through ``Coordinator.discover`` (which reports the transport failure per
server in a ``CoordinationError``).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.transport import TransportFailure
from envckpt.errors import CoordinationError
from envckpt.http.client import HttpTransport
from envckpt.http.exchange import BadReply
from envckpt.http.reply_json import MAX_REPLY_DEPTH

from helpers.raw_http import RawHttpServer, Unasked, ok

TOKEN = "hostile-test-token"
STATUS_BODY = b'{"kind":"model","mode":"export_restore","capabilities":[]}'


async def call(server: RawHttpServer, transport: HttpTransport | None = None) -> object:
    """``GET status`` on ``server`` through a transport (a new one unless given); the body."""
    if transport is not None:
        return (await transport.request("policy", "GET", "status", None, timeout=5.0)).body
    async with HttpTransport({"policy": server.url}, token=TOKEN) as fresh:
        return await call(server, fresh)


async def refused(reply: bytes) -> TransportFailure:
    """The ``TransportFailure`` of one call answered with ``reply``; fails if none is raised."""
    with RawHttpServer([[reply]]) as server, pytest.raises(TransportFailure) as raised:
        await call(server)
    return raised.value


async def refused_by_discovery(reply: bytes) -> str:
    """What discovery reports for a participant answering ``reply`` to its status call."""
    with RawHttpServer([[reply]]) as server:
        async with HttpTransport({"policy": server.url}, token=TOKEN) as transport:
            with pytest.raises(CoordinationError) as raised:
                await Coordinator(transport).discover()
    assert raised.value.operation == "discover"
    return raised.value.failures["policy"]


async def test_a_well_formed_reply_is_read() -> None:
    """Tampered: the same server with a plain reply is read and discovered, so refusals below
    are the reply's doing."""
    with RawHttpServer([[ok(STATUS_BODY)]]) as server:
        assert await call(server) == {"kind": "model", "mode": "export_restore", "capabilities": []}
    with RawHttpServer([[ok(STATUS_BODY)]]) as server:
        async with HttpTransport({"policy": server.url}, token=TOKEN) as transport:
            participants = await Coordinator(transport).discover()
    assert participants.names == {"policy"}


async def test_status_099_is_not_taken_for_an_interim_reply() -> None:
    """A ``099`` status before a good reply is refused, not skipped as a 1xx."""
    reply = b"HTTP/1.1 099 Early\r\n\r\n" + ok(STATUS_BODY)
    failure = await refused(reply)
    assert isinstance(failure.__cause__, BadReply)
    assert "BadReply" in await refused_by_discovery(reply)


@pytest.mark.parametrize("version", [b"HTTP/1.x", b"HTTP/1.2", b"HTTP/2.0", b"HTTP/11"])
async def test_a_status_line_that_is_not_http_1_0_or_1_1_is_refused(version: bytes) -> None:
    """``HTTP/1.x`` (and other versions this client does not speak) is refused."""
    reply = version + b" 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    failure = await refused(reply)
    assert isinstance(failure.__cause__, BadReply)
    assert "BadReply" in await refused_by_discovery(reply)


@pytest.mark.parametrize(
    "reply",
    [
        ok(STATUS_BODY, b"X-Note: a\x01b\r\n"),
        ok(STATUS_BODY, b"X-Note: a\x1bb\r\n"),
        ok(STATUS_BODY, b"X-Note: a\x7f\r\n"),
        ok(STATUS_BODY, b"X-Note: a\x00b\r\n"),
        ok(STATUS_BODY, b"X-Note: a\rb\r\n"),
        ok(STATUS_BODY, b"X\x01Note: ab\r\n"),
        b"HTTP/1.1 200 O\x01K\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 103 Hints\r\nLink: \x01\r\n\r\n" + ok(STATUS_BODY),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: \x01\r\n\r\n",
    ],
    ids=["soh", "esc", "del", "nul", "cr", "in-name", "in-reason", "in-interim", "in-trailer"],
)
async def test_a_control_character_in_a_header_is_refused(reply: bytes) -> None:
    """A control character (not HTAB) anywhere in a header or the status line is refused."""
    failure = await refused(reply)
    assert isinstance(failure.__cause__, BadReply)
    assert "BadReply" in await refused_by_discovery(reply)


async def test_a_tab_in_a_header_value_is_accepted() -> None:
    """Tampered: HTAB is the one control character a field value may hold."""
    with RawHttpServer([[ok(STATUS_BODY, b"X-Note: a\tb\r\n")]]) as server:
        assert await call(server) == {"kind": "model", "mode": "export_restore", "capabilities": []}


async def test_gzip_then_chunked_is_refused() -> None:
    """``Transfer-Encoding: gzip, chunked`` is refused, not read as plain chunks."""
    reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    failure = await refused(reply)
    assert isinstance(failure.__cause__, BadReply)
    assert "BadReply" in await refused_by_discovery(reply)


@pytest.mark.parametrize(
    "codings",
    [b"Transfer-Encoding: chunked, chunked\r\n", b"Transfer-Encoding: chunked\r\n" * 2],
    ids=["one-header", "two-headers"],
)
async def test_a_doubled_chunked_is_refused(codings: bytes) -> None:
    """``chunked`` twice (in one header or two) is refused."""
    reply = b"HTTP/1.1 200 OK\r\n" + codings + b"\r\n2\r\n{}\r\n0\r\n\r\n"
    failure = await refused(reply)
    assert isinstance(failure.__cause__, BadReply)
    assert "BadReply" in await refused_by_discovery(reply)


async def test_transfer_encoding_with_content_length_is_refused_and_not_reused() -> None:
    """Both framings in one reply: refused, and the next call opens a new connection."""
    smuggled = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n"
        b"2\r\n{}\r\n0\r\n\r\n"
    )
    with RawHttpServer([[smuggled, ok(b'{"on":"the same connection"}')], [ok()]]) as server:
        async with HttpTransport({"policy": server.url}, token=TOKEN) as transport:
            with pytest.raises(TransportFailure) as raised:
                await call(server, transport)
            assert isinstance(raised.value.__cause__, BadReply)
            assert await call(server, transport) == {}
        assert server.connections == 2
        assert [len(requests) for requests in server.requests] == [1, 1]
    assert "BadReply" in await refused_by_discovery(smuggled)


async def test_bytes_past_a_reply_are_never_the_next_calls_reply() -> None:
    """A second reply sent after the first, in the same write: the next call connects anew
    and reads its own reply, not the leftover."""
    leftover = ok(b'{"reply":"nobody asked for"}')
    with RawHttpServer([[ok(b'{"reply":1}') + leftover], [ok(b'{"reply":2}')]]) as server:
        async with HttpTransport({"policy": server.url}, token=TOKEN) as transport:
            assert await call(server, transport) == {"reply": 1}
            assert await call(server, transport) == {"reply": 2}
        assert server.connections == 2
        assert [len(requests) for requests in server.requests] == [1, 1]


async def test_bytes_arriving_on_an_idle_pooled_connection_are_never_a_reply() -> None:
    """Bytes that come while the connection idles in the pool: it is dropped, and the next
    call connects anew and reads its own reply."""
    pooled = threading.Event()
    leftover = Unasked(ok(b'{"reply":"nobody asked for"}'), gate=pooled)
    with RawHttpServer([[ok(b'{"reply":1}'), leftover], [ok(b'{"reply":2}')]]) as server:
        async with HttpTransport({"policy": server.url}, token=TOKEN) as transport:
            assert await call(server, transport) == {"reply": 1}
            pooled.set()
            assert await asyncio.to_thread(server.script_done[0].wait, 5.0)
            await asyncio.sleep(0.05)  # the loop polls the socket and sees the bytes
            assert await call(server, transport) == {"reply": 2}
        assert server.connections == 2
        assert [len(requests) for requests in server.requests] == [1, 1]


async def test_a_well_behaved_connection_is_reused() -> None:
    """Tampered: without leftovers the second call travels on the first connection, so the
    two tests above see the guard, not a pool that never reuses."""
    with RawHttpServer([[ok(b'{"reply":1}'), ok(b'{"reply":2}')]]) as server:
        async with HttpTransport({"policy": server.url}, token=TOKEN) as transport:
            assert await call(server, transport) == {"reply": 1}
            assert await call(server, transport) == {"reply": 2}
        assert server.connections == 1


@pytest.mark.parametrize("opening", [b"[", b'{"a":'], ids=["arrays", "objects"])
async def test_a_deeply_nested_json_reply_is_a_transport_failure(opening: bytes) -> None:
    """100,000 levels of nesting end in TransportFailure, not a bare RecursionError."""
    reply = ok(opening * 100_000)
    failure = await refused(reply)
    assert f"nests deeper than {MAX_REPLY_DEPTH} levels" in str(failure)
    assert not isinstance(failure.__cause__, RecursionError)
    assert "nests deeper" in await refused_by_discovery(reply)
