"""HTTP/1.1 reply framing for ``connections``: where a reply ends, and nothing more.

``read_response`` takes the connection's read buffer and a ``more`` coroutine
that appends one read from the socket to it (``False`` at the connection's
end), and returns the reply and whether the connection may carry another
request::

    response, reusable = await read_response(buffer, more, limits=ReplyLimits())

It skips 1xx interim replies, reads the body by ``Content-Length``, chunked
transfer coding, or (with neither) up to the connection's end, and refuses a
header block or body over its limits with ``BadReply``. A reply to ``HEAD``
is never expected: control calls are ``GET`` and ``POST``.
"""

from __future__ import annotations

import string
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024

More = Callable[[], Awaitable[bool]]

_HEX = frozenset(string.hexdigits.encode())


class BadReply(Exception):
    """The reply cannot be framed as HTTP/1.x, or is larger than the limits allow."""


class ServerDisconnected(Exception):
    """The connection ended before a whole reply arrived.

    ``stale``: it was a pooled connection and no byte of the reply had come,
    so the server closed it while idle and never saw the request.
    """

    def __init__(self, message: str, *, stale: bool) -> None:
        super().__init__(message)
        self.stale = stale

    def __reduce__(self) -> tuple[object, ...]:
        return (_disconnected, (str(self), self.stale))


def _disconnected(message: str, stale: bool) -> ServerDisconnected:
    return ServerDisconnected(message, stale=stale)


@dataclass(frozen=True, slots=True)
class ReplyLimits:
    """The largest header block (status line to the empty line, included) and body."""

    max_header_bytes: int = MAX_HEADER_BYTES
    max_body_bytes: int = MAX_BODY_BYTES


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A whole reply: status, headers (names lower-cased, repeats joined by ``, ``), body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


async def read_response(
    buffer: bytearray, more: More, *, limits: ReplyLimits
) -> tuple[HttpResponse, bool]:
    """The next reply in ``buffer`` (read on with ``more``) and whether to reuse the connection."""
    while True:
        version, status, headers = await _read_head(buffer, more, limits)
        if status >= 200:
            break
        if status == 101:
            raise BadReply("101 Switching Protocols is not a reply to a control call")
        # 100 Continue, 103 Early Hints...: the final reply follows.
    reusable = version == b"HTTP/1.1" and not _says_close(headers.get("connection", ""))
    coding = headers.get("transfer-encoding")
    length = headers.get("content-length")
    if status in (204, 304):
        body = b""
    elif coding is not None:
        if coding.replace(" ", "").lower().split(",")[-1] != "chunked":
            raise BadReply(f"unsupported Transfer-Encoding {coding!r}")
        body = await _read_chunked(buffer, more, limits)
    elif length is not None:
        body = await _read_length(buffer, more, _content_length(length), limits)
    else:
        body = await _read_to_end(buffer, more, limits)
        reusable = False
    if buffer:
        reusable = False  # bytes past the reply answer nothing we sent
    return HttpResponse(status, headers, body), reusable


def _says_close(connection: str) -> bool:
    return any(token.strip().lower() == "close" for token in connection.split(","))


def _content_length(value: str) -> int:
    # A repeated header arrives joined ("12, 12"): every copy must agree.
    values = {part.strip() for part in value.split(",")}
    if len(values) != 1:
        raise BadReply(f"conflicting Content-Length {value!r}")
    (text,) = values
    if not text.isdigit() or not text.isascii():
        raise BadReply(f"bad Content-Length {value!r}")
    return int(text)


async def _read_until(
    buffer: bytearray, more: More, separator: bytes, limit: int, what: str
) -> bytes:
    """Bytes before ``separator`` (both consumed); ``BadReply`` if both are over ``limit``."""
    searched = 0
    while True:
        end = buffer.find(separator, max(0, searched - len(separator) + 1))
        if end >= 0:
            if end + len(separator) > limit:
                raise BadReply(f"{what} over {limit} bytes")
            data = bytes(buffer[:end])
            del buffer[: end + len(separator)]
            return data
        if len(buffer) >= limit:  # a separator still to come would end past the limit
            raise BadReply(f"{what} over {limit} bytes")
        searched = len(buffer)
        if not await more():
            raise ServerDisconnected(
                f"the server closed the connection {'in' if buffer else 'before'} the {what}",
                stale=False,
            )


async def _read_head(
    buffer: bytearray, more: More, limits: ReplyLimits
) -> tuple[bytes, int, dict[str, str]]:
    block = await _read_until(buffer, more, b"\r\n\r\n", limits.max_header_bytes, "reply headers")
    lines = block.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[0]) != 8:
        raise BadReply(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
    code = parts[1]
    if len(code) != 3 or not code.isdigit():
        raise BadReply(f"bad status code in {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise BadReply(f"malformed header line {line[:100]!r}")
        key = name.decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return parts[0], int(code), headers


async def _fill(buffer: bytearray, more: More, size: int) -> None:
    while len(buffer) < size:
        if not await more():
            raise ServerDisconnected(
                "the server closed the connection in the reply body", stale=False
            )


async def _read_length(buffer: bytearray, more: More, length: int, limits: ReplyLimits) -> bytes:
    if length > limits.max_body_bytes:
        raise BadReply(f"reply body of {length} bytes, over {limits.max_body_bytes}")
    await _fill(buffer, more, length)
    body = bytes(buffer[:length])
    del buffer[:length]
    return body


async def _read_chunked(buffer: bytearray, more: More, limits: ReplyLimits) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        line = await _read_until(buffer, more, b"\r\n", limits.max_header_bytes, "chunk size")
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or not _HEX.issuperset(size_text):
            raise BadReply(f"bad chunk size line {line[:100]!r}")
        size = int(size_text, 16)
        if size == 0:
            break
        total += size
        if total > limits.max_body_bytes:
            raise BadReply(f"chunked reply body over {limits.max_body_bytes} bytes")
        await _fill(buffer, more, size + 2)
        if buffer[size : size + 2] != b"\r\n":
            raise BadReply("a chunk does not end with CRLF")
        chunks.append(bytes(buffer[:size]))
        del buffer[: size + 2]
    trailer_bytes = 0
    while True:  # trailer fields, discarded, up to the empty line
        line = await _read_until(buffer, more, b"\r\n", limits.max_header_bytes, "trailer")
        trailer_bytes += len(line) + 2
        if trailer_bytes > limits.max_header_bytes:
            raise BadReply(f"trailer over {limits.max_header_bytes} bytes")
        if not line:
            return b"".join(chunks)


async def _read_to_end(buffer: bytearray, more: More, limits: ReplyLimits) -> bytes:
    # No length given: the body is everything until the server closes.
    while True:
        if len(buffer) > limits.max_body_bytes:
            raise BadReply(f"reply body over {limits.max_body_bytes} bytes")
        if not await more():
            break
    body = bytes(buffer)
    buffer.clear()
    return body
