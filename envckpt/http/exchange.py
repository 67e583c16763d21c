"""One HTTP/1.1 request and its reply on a kept-alive socket, framed by h11.

``connections.ConnectionPool`` keeps the sockets; this module frames what
goes over one of them with h11's public ``Connection`` (client role), so
status lines, header syntax, transfer codings and where a reply ends are
h11's verdict, not a hand-written parser's::

    wire = await connect(origin_host, port, limits=ReplyLimits(), ssl_context=None)
    response, reusable = await exchange(wire, b"GET", b"/x", headers, None, ReplyLimits())
    response.status, response.body       # the reply, read whole

A ``Wire`` is one socket with one ``h11.Connection`` kept for its whole life:
after a clean exchange h11 starts its next cycle. ``reusable`` is true only
when h11 reports both sides ``DONE``, the next cycle started, and not a byte
past the reply is waiting; bytes that arrive while no exchange is waiting
(a second reply nobody asked for) close the socket at once, so a pooled
connection never hands a later call an earlier call's reply.

What can go wrong, by what the caller can do about it:

* ``ServerDisconnected``: the connection ended or was reset before a whole
  reply arrived; ``stale`` when the socket was a pooled one (``reused``) and
  not a byte of the reply had come, so the request may be sent again.
* ``BadReply``: h11 refuses the reply (``RemoteProtocolError``: a malformed
  status line such as ``HTTP/1.x`` or a status ``099``, a malformed header or
  chunk, a transfer coding but a single ``chunked``, ``101`` to a request
  that asked no upgrade, a header block over ``max_header_bytes``...), or it
  is not one a control call accepts: a version other than HTTP/1.0 or 1.1, a
  control character in a header value or the reason phrase, both
  Transfer-Encoding and Content-Length (a smuggling shape), or a body over
  ``max_body_bytes``.

The socket's writes are one ``transport.write`` per request (head and body
joined); TCP_NODELAY is set, so a small request goes out at once.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import h11

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024

Headers = list[tuple[bytes, bytes]]

_VERSIONS = (b"1.1", b"1.0")

# RFC 9110 5.5 and 9112 4: no control character but HTAB in a field value or
# the reason phrase. h11 refuses only NUL, CR and LF there.
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


class BadReply(Exception):
    """The reply is not HTTP/1.x h11 and a control call accept, or is over the limits."""


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
    """A whole reply: status, headers (names lower-cased, repeats joined by ``, ``), body.

    ``fields`` are the headers as they came, one pair each (names lower-cased):
    what a proxy passes on (two ``Set-Cookie`` headers do not join).
    """

    status: int
    headers: Mapping[str, str]
    body: bytes
    fields: Sequence[tuple[bytes, bytes]] = ()


class Wire(asyncio.Protocol):
    """One socket and its ``h11.Connection``; bytes go to h11 only while an exchange waits.

    A protocol rather than a stream reader: received bytes are handed to h11
    directly, and bytes that come when no exchange is listening are seen the
    moment they arrive (the socket is closed: they answer nothing sent).
    """

    def __init__(self, limits: ReplyLimits) -> None:
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=limits.max_header_bytes)
        self.transport: asyncio.Transport | None = None
        self.reused = False  # it carried an earlier exchange (a pooled connection)
        self.idle_since = 0.0
        self.listening = False
        self.received = False  # a byte of the current reply came
        self.ended = False  # the peer closed, the socket was lost, or stray bytes came
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._gone = asyncio.Event()
        self._writable: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self.listening:
            # Bytes while idle would be read as the reply to the next request.
            self.ended = True
            self.close()
            return
        self.received = True
        self.h11.receive_data(data)
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        if exc is not None and self.error is None:
            self.error = exc
        self._gone.set()
        self._wake()
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    # -- for the pool and the exchange ---------------------------------------------

    async def send(self, data: bytes) -> None:
        """One write; waits only when the transport's buffer is over its high-water mark."""
        if self.transport is not None:
            self.transport.write(data)
        if self._writable is not None:
            await self._writable

    async def more(self) -> None:
        """Until bytes or the connection's end arrive."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def alive(self) -> bool:
        """Not closed by either side, and nothing received since the last reply."""
        transport = self.transport
        return not self.ended and transport is not None and not transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def wait_closed(self) -> None:
        """Until the closed socket is gone (the transport reports ``connection_lost``)."""
        if self.transport is not None:
            await self._gone.wait()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def connect(
    host: str,
    port: int,
    *,
    limits: ReplyLimits,
    ssl_context: ssl.SSLContext | None,
    unix_socket: str | None = None,
) -> Wire:
    """A new ``Wire`` to ``host:port`` (TLS when ``ssl_context`` is given), with TCP_NODELAY;
    to the Unix socket ``unix_socket`` instead when it is given.

    Raises ``OSError`` (``ssl.SSLError`` included) as the event loop does.
    """
    loop = asyncio.get_running_loop()
    server_hostname = host if ssl_context is not None else None
    if unix_socket is not None:
        _, wire = await loop.create_unix_connection(
            lambda: Wire(limits), unix_socket, ssl=ssl_context, server_hostname=server_hostname
        )
        return wire
    _, wire = await loop.create_connection(
        lambda: Wire(limits), host, port, ssl=ssl_context, server_hostname=server_hostname
    )
    sock = wire.transport.get_extra_info("socket") if wire.transport is not None else None
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return wire


# h11's end of a request: one frozen event serves every request.
_END = h11.EndOfMessage()


class RequestHeads:
    """h11 ``Request`` events, validated once and sent again: a bounded cache.

    h11 checks every header name and value and the target of each ``Request``
    it is given (a regex match per field); a control call's head differs from
    an earlier one to the same server and route only by its ``Content-Length``
    (a prepare body's length changes with its deadline's digits: about a third
    of a coordinator's heads came from here at 32 instances), so a pool keeps
    the events it built. h11's events are frozen, and a ``Connection``
    only reads the one it sends.

    At ``size`` entries the least recently used goes. An event is about
    800 bytes; a coordinator's pool uses 9 per snapshot (3 servers, 3 routes)
    times the body lengths its deadlines give, some 15 to 27 heads in all. At
    16 entries, emptied when full, that working set thrashed: 48% of the
    heads of 60 snapshots of 8 instances were built again; at 32, none.
    """

    __slots__ = ("_events", "_size")

    def __init__(self, size: int = 32) -> None:
        # A dict keeps insertion order: a hit moves its key to the end, so the
        # first key is the least recently used.
        self._events: dict[tuple[bytes, bytes, tuple[tuple[bytes, bytes], ...], int], h11.Request]
        self._events = {}
        self._size = size

    def of(
        self, method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]], length: int
    ) -> h11.Request:
        """The event for these fields and body length (-1: no body); ``ValueError`` if refused."""
        key = (method, target, tuple(headers), length)
        events = self._events
        event = events.pop(key, None)
        if event is None:
            event = request_head(method, target, headers, length)
            if len(events) >= self._size:
                del events[next(iter(events))]
        events[key] = event
        return event


def request_head(
    method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]], length: int
) -> h11.Request:
    """h11's ``Request`` for these fields, with ``Content-Length`` unless ``length`` is -1.

    ``ValueError`` when h11 refuses a header or the target.
    """
    fields = list(headers)
    if length >= 0:
        fields.append((b"content-length", b"%d" % length))
    try:
        return h11.Request(method=method, target=target, headers=fields)
    except h11.LocalProtocolError as error:
        raise ValueError(f"h11 refuses the request: {error}") from error


def request_bytes(
    connection: h11.Connection,
    method: bytes,
    target: bytes,
    headers: Headers,
    body: bytes | None,
    heads: RequestHeads | None = None,
) -> bytes:
    """The whole request (head, body, end) as h11 writes it, for one write.

    ``headers`` hold ``Host`` and anything else but the length, which is added
    here for a body. ``ValueError`` when h11 refuses a header or the target.
    ``heads``: where the validated head events are kept between calls.
    """
    length = -1 if body is None else len(body)
    if heads is None:
        event = request_head(method, target, headers, length)
    else:
        event = heads.of(method, target, headers, length)
    try:
        data = connection.send(event) or b""
        if body:
            data += connection.send(h11.Data(data=body)) or b""
        connection.send(_END)  # writes nothing after a sized body; h11 is DONE
        return data
    except h11.LocalProtocolError as error:
        raise ValueError(f"h11 refuses the request: {error}") from error


async def exchange(
    wire: Wire,
    method: bytes,
    target: bytes,
    headers: Headers,
    body: bytes | None,
    limits: ReplyLimits,
    heads: RequestHeads | None = None,
) -> tuple[HttpResponse, bool]:
    """Send one request on ``wire`` and read its reply; whether ``wire`` may carry another.

    ``heads``: validated request heads kept between calls (``RequestHeads``).
    """
    transport = wire.transport
    if transport is None or not wire.alive():
        raise ServerDisconnected("the connection was closed before sending", stale=wire.reused)
    data = request_bytes(wire.h11, method, target, headers, body, heads)
    wire.received = False
    wire.listening = True
    try:
        await wire.send(data)
        response = await _read_reply(wire, limits)
    finally:
        wire.listening = False
    return response, _next_cycle(wire)


def _next_cycle(wire: Wire) -> bool:
    """Start h11's next cycle if the exchange ended cleanly with nothing left over."""
    connection = wire.h11
    if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
        return False  # Connection: close, HTTP/1.0, a body ended by the close...
    connection.start_next_cycle()
    left, closed = connection.trailing_data
    return not left and not closed and wire.alive()


async def _read_reply(wire: Wire, limits: ReplyLimits) -> HttpResponse:
    connection = wire.h11
    status = 0
    headers: dict[str, str] = {}
    fields: Sequence[tuple[bytes, bytes]] = ()
    chunks: list[bytes] = []
    size = 0
    eof_given = False
    if not wire.received and not wire.ended:
        # Nothing of the reply yet (the usual case right after sending): wait
        # for it before asking h11, which would only answer NEED_DATA.
        await wire.more()
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as error:
            if eof_given:  # what h11 still waited for will not come
                raise _cut_short(wire, str(error)) from error
            if error.error_status_hint == 431:  # h11's max_incomplete_event_size
                limit = limits.max_header_bytes
                raise BadReply(f"reply headers or a chunk line over {limit} bytes") from error
            raise BadReply(f"h11: {error}") from error
        if event is h11.NEED_DATA:
            if wire.ended:
                lost = wire.error
                if lost is not None:
                    raise _cut_short(wire, f"{type(lost).__name__}: {lost}") from lost
                connection.receive_data(b"")  # the connection's end, for h11 to judge
                eof_given = True
            else:
                await wire.more()
        elif type(event) is h11.Data:
            size += len(event.data)
            if size > limits.max_body_bytes:
                raise BadReply(f"reply body over {limits.max_body_bytes} bytes")
            chunks.append(event.data)
        elif type(event) is h11.Response:
            status = event.status_code
            headers = _final_head(event, limits)
            fields = event.headers
        elif type(event) is h11.EndOfMessage:
            _refuse_controls(b"", event.headers)  # the trailers of a chunked body
            return HttpResponse(status, headers, b"".join(chunks), fields)
        elif type(event) is h11.InformationalResponse:
            _refuse_controls(event.reason, event.headers)
            # 100 Continue, 103 Early Hints...: the final reply follows.
        elif type(event) is h11.ConnectionClosed:
            raise _cut_short(wire, "the server closed the connection")
        else:  # PAUSED cannot come before EndOfMessage in the client role
            raise BadReply(f"unexpected h11 event {event!r}")


def _final_head(event: h11.Response, limits: ReplyLimits) -> dict[str, str]:
    if event.http_version not in _VERSIONS:
        raise BadReply(f"HTTP/{event.http_version.decode()} is not HTTP/1.0 or HTTP/1.1")
    fields = list(event.headers)  # h11's Headers iterate in Python: once
    _refuse_controls(event.reason, fields)
    # h11 bounds only a head still incomplete; this bounds one that came whole.
    # "HTTP/1.1 200 reason\r\n", "name: value\r\n" each, the empty line.
    size = 17 + len(event.reason) + 4 * len(fields)
    size += sum([len(name) + len(value) for name, value in fields])
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in fields}
    if len(headers) < len(fields):  # a name repeats: its values join
        headers = {}
        for name, value in fields:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
    if size > limits.max_header_bytes:
        raise BadReply(f"reply headers over {limits.max_header_bytes} bytes")
    if "transfer-encoding" in headers and "content-length" in headers:
        # RFC 9112 6.1: ought to be handled as an error (request smuggling).
        raise BadReply("the reply has both Transfer-Encoding and Content-Length")
    length = headers.get("content-length")
    if length is not None and int(length) > limits.max_body_bytes:  # h11 checked the digits
        raise BadReply(f"reply body of {length} bytes, over {limits.max_body_bytes}")
    return headers


def _refuse_controls(reason: bytes, fields: Iterable[tuple[bytes, bytes]]) -> None:
    # One search over everything joined by HTAB, which is allowed: no
    # separator can make or hide a control character.
    if _CONTROL.search(b"\t".join([reason] + [value for _, value in fields])):
        raise BadReply("a control character in the reply's status line or a header value")


def _cut_short(wire: Wire, reason: str) -> ServerDisconnected:
    where = "in" if wire.received else "before"
    # A pooled connection the server had closed never read the request.
    return ServerDisconnected(
        f"{reason} ({where} the reply)", stale=wire.reused and not wire.received
    )
