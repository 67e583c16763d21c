"""Tests for envckpt.http.framing: replies fed in pieces of every size, limits, errors that pickle.

The same framing runs over real sockets in test_connections.py; here the bytes
arrive in chosen pieces, so every boundary (a separator split across reads) is
crossed on purpose.
"""

from __future__ import annotations

import pickle

import pytest

from envckpt.http.framing import (
    BadReply,
    HttpResponse,
    More,
    ReplyLimits,
    ServerDisconnected,
    read_response,
)

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nSet-A: 1\r\nset-a: 2\r\n\r\n"
    b"3\r\nabc\r\nA\r\n0123456789\r\n0\r\n\r\n"
)


def feeder(data: bytes, piece: int, buffer: bytearray) -> More:
    """A ``more`` that appends ``data`` to ``buffer`` ``piece`` bytes at a time."""
    position = 0

    async def more() -> bool:
        nonlocal position
        if position >= len(data):
            return False
        buffer.extend(data[position : position + piece])
        position += piece
        return True

    return more


async def read(
    data: bytes, piece: int = 1 << 16, limits: ReplyLimits | None = None
) -> tuple[HttpResponse, bool, bytes]:
    """The reply in ``data`` fed in ``piece``-byte reads, its reuse verdict, and bytes left."""
    buffer = bytearray()
    response, reusable = await read_response(
        buffer, feeder(data, piece, buffer), limits=limits or ReplyLimits()
    )
    return response, reusable, bytes(buffer)


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64, 1 << 16])
async def test_chunked_reply_in_pieces_of_any_size(piece: int) -> None:
    """Separators split across reads are found: the same reply whatever the read size."""
    response, reusable, left = await read(CHUNKED, piece)
    assert (response.status, response.body, reusable, left) == (200, b"abc0123456789", True, b"")
    assert response.headers["set-a"] == "1, 2"


async def test_two_replies_back_to_back_are_not_reused() -> None:
    """Bytes past the reply answer no request: the connection is not reused."""
    reply = b"HTTP/1.1 204 No Content\r\n\r\n"
    response, reusable, left = await read(reply + reply)
    assert (response.status, response.body, reusable, left) == (204, b"", False, reply)
    assert (await read(reply))[1] is True  # tampered: one reply alone keeps it


async def test_a_header_block_at_the_limit_is_read_one_over_is_refused() -> None:
    """The header limit counts the block to the end of its empty line, exactly."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX: "
    exact = head + b"a" * (200 - len(head)) + b"\r\n\r\n"
    limits = ReplyLimits(max_header_bytes=200 + 4)
    for piece in (1, 50, 1000):
        assert (await read(exact, piece, limits))[0].status == 200
        over = head + b"a" * (201 - len(head)) + b"\r\n\r\n"
        with pytest.raises(BadReply, match="reply headers over"):
            await read(over, piece, limits)


async def test_a_connection_ending_early_is_server_disconnected() -> None:
    """An end before the status line, inside the headers or inside the body: not stale here."""
    for data, where in (
        (b"", "before the reply headers"),
        (b"HTTP/1.1 200 OK\r\nContent-", "in the reply headers"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", "in the reply body"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "in the reply body"),
    ):
        with pytest.raises(ServerDisconnected, match=where) as raised:
            await read(data, 3)
        assert raised.value.stale is False


def test_errors_pickle_with_their_fields() -> None:
    """ServerDisconnected keeps its message and stale flag through pickle; BadReply its text."""
    copy = pickle.loads(pickle.dumps(ServerDisconnected("gone", stale=True)))
    assert (str(copy), copy.stale) == ("gone", True)
    assert str(pickle.loads(pickle.dumps(BadReply("bad")))) == "bad"
