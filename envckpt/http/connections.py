"""A small HTTP/1.1 keep-alive client for control calls: a pool of persistent connections.

``HttpTransport`` sends one control call at a time per task and reads a small
JSON reply; a general-purpose client spends most of a call's CPU on features
control calls never use (cookies, proxies, redirects, tracing, streaming).
This pool does only what a control call needs::

    pool = ConnectionPool(max_connections=64, keepalive_seconds=4.0, connect_timeout=10.0)
    origin = Origin.from_url("http://10.0.0.5:8000")
    head = request_head("POST", "/ng-control/v1/checkpoint/prepare", host=origin.host_header,
                        headers=b"Authorization: Bearer ...\\r\\n", body=body)
    response = await pool.request(origin, head + body, deadline=loop.time() + 5.0)
    response.status, response.body       # the reply, read whole
    await pool.aclose()

Connections are kept per ``Origin`` (scheme, host, port), at most
``max_connections`` open in all, reused most-recent first, and dropped when
idle ``keepalive_seconds``, when the peer closed them, or when a reply says
``Connection: close`` (or is HTTP/1.0, or is framed by the connection's end).

What can go wrong, by what the caller can do about it:

* ``ConnectFailed``: no connection was made (refused, timed out, name or TLS
  failure); nothing was sent.
* ``ServerDisconnected``: the connection ended or was reset before a whole
  reply arrived. ``stale`` is true when the connection was a pooled one and
  not a byte of the reply had arrived: the server closed it while idle, so the
  request may be sent again on a new connection.
* ``BadReply``: the reply is not HTTP/1.x this client can frame, or is larger
  than ``MAX_HEADER_BYTES`` / ``MAX_BODY_BYTES``.
* ``TimeoutError``: the ``deadline`` passed; the connection is dropped.

Replies are not interpreted beyond HTTP framing; redirects are not followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

from envckpt.http.framing import (
    BadReply,
    HttpResponse,
    ReplyLimits,
    ServerDisconnected,
    read_response,
)

__all__ = [
    "BadReply",
    "ConnectFailed",
    "ConnectionPool",
    "HttpResponse",
    "Origin",
    "ReplyLimits",
    "ServerDisconnected",
    "request_head",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class ConnectFailed(Exception):
    """No connection could be opened to the origin; nothing was sent."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where connections go: scheme, host (no brackets) and port."""

    scheme: str
    host: str
    port: int

    @classmethod
    def from_url(cls, url: str) -> Origin:
        """The origin of an ``http://`` or ``https://`` URL; ``ValueError`` otherwise."""
        parts = urlsplit(url)
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL")
        return cls(parts.scheme, parts.hostname, parts.port or _DEFAULT_PORTS[parts.scheme])

    @property
    def host_header(self) -> str:
        """The ``Host`` header's value: the port only when it is not the scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port == _DEFAULT_PORTS[self.scheme]:
            return host
        return f"{host}:{self.port}"


def request_head(
    method: str, target: str, *, host: str, headers: bytes, body: bytes | None
) -> bytes:
    """The request line and headers; ``headers`` are whole ``Name: value\\r\\n`` lines."""
    length = b"" if body is None else b"Content-Length: %d\r\n" % len(body)
    return b"%s %s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n" % (
        method.encode("ascii"),
        target.encode("ascii"),
        host.encode("ascii"),
        headers,
        length,
    )


class _Connection:
    """One open connection and the bytes read from it but not yet consumed."""

    __slots__ = ("buffer", "idle_since", "origin", "reader", "reused", "writer")

    def __init__(
        self, origin: Origin, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.origin = origin
        self.reader = reader
        self.writer = writer
        self.buffer = bytearray()
        self.reused = False
        self.idle_since = 0.0

    def alive(self) -> bool:
        """Not closed by either side, as far as the event loop has seen."""
        return not (self.reader.at_eof() or self.writer.transport.is_closing())

    def close(self) -> None:
        self.writer.close()


class ConnectionPool:
    """Persistent HTTP/1.1 connections per origin, for one event loop (see module docstring)."""

    def __init__(
        self,
        *,
        max_connections: int,
        keepalive_seconds: float,
        connect_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        limits: ReplyLimits = ReplyLimits(),
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if keepalive_seconds <= 0 or connect_timeout <= 0:
            raise ValueError("keepalive_seconds and connect_timeout must be positive")
        self._max_connections = max_connections
        self._keepalive_seconds = keepalive_seconds
        self._connect_timeout = connect_timeout
        self._ssl_context = ssl_context
        self._limits = limits
        # Idle connections per origin, most recently used last.
        self._idle: dict[Origin, list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._opening = 0  # slots taken by connections being opened
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        """Connections open or being opened: idle, in use, connecting."""
        return self._opening + len(self._busy) + sum(map(len, self._idle.values()))

    @property
    def idle_connections(self) -> int:
        return sum(map(len, self._idle.values()))

    async def request(self, origin: Origin, data: bytes, *, deadline: float) -> HttpResponse:
        """Send ``data`` (a whole request) to ``origin`` and read the reply, by ``deadline``.

        ``deadline`` is on the running loop's clock (``loop.time()``).
        """
        connection = await self._acquire(origin, deadline)
        try:
            async with asyncio.timeout_at(deadline):
                response, reusable = await _exchange(connection, data, self._limits)
        except BaseException:
            self._discard(connection)
            raise
        if reusable:
            self._put_back(connection)
        else:
            self._discard(connection)
        return response

    async def aclose(self) -> None:
        """Close every connection; requests in flight fail, later ones are refused."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        connections = [c for idle in self._idle.values() for c in idle] + list(self._busy)
        self._idle.clear()
        for connection in connections:
            connection.close()
        for connection in connections:
            # A connection the peer reset is closed all the same.
            with contextlib.suppress(OSError, ssl.SSLError):
                await connection.writer.wait_closed()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    # -- connections in and out -------------------------------------------------

    async def _acquire(self, origin: Origin, deadline: float) -> _Connection:
        while True:
            if self._closed:
                raise ConnectFailed("the connection pool is closed")
            connection = self._take_idle(origin)
            if connection is not None:
                return connection
            if self.open_connections < self._max_connections or self._close_oldest_idle():
                return await self._open(origin, deadline)
            await self._wait_for_room(deadline)

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        expired_before = asyncio.get_running_loop().time() - self._keepalive_seconds
        while idle:
            connection = idle.pop()
            if connection.alive() and connection.idle_since > expired_before:
                connection.reused = True
                self._busy.add(connection)
                return connection
            self._close(connection)
        return None

    def _close_oldest_idle(self) -> bool:
        """Make room by closing the longest-idle connection of any origin."""
        oldest: list[_Connection] | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest[0].idle_since):
                oldest = idle
        if oldest is None:
            return False
        self._close(oldest.pop(0))
        return True

    async def _wait_for_room(self, deadline: float) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._wake_one()  # woken but leaving: pass the turn on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _open(self, origin: Origin, deadline: float) -> _Connection:
        loop = asyncio.get_running_loop()
        self._opening += 1
        try:
            try:
                async with asyncio.timeout_at(min(deadline, loop.time() + self._connect_timeout)):
                    reader, writer = await asyncio.open_connection(
                        origin.host,
                        origin.port,
                        ssl=self._tls() if origin.scheme == "https" else None,
                        server_hostname=origin.host if origin.scheme == "https" else None,
                    )
            except TimeoutError as error:
                where = f"{origin.host}:{origin.port}"
                raise ConnectFailed(f"timed out connecting to {where}") from error
            except OSError as error:  # refused, unreachable, name not found, TLS failure
                raise ConnectFailed(f"{type(error).__name__}: {error}") from error
        except BaseException:
            self._opening -= 1
            self._wake_one()  # the slot is free again
            raise
        self._opening -= 1
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = _Connection(origin, reader, writer)
        self._busy.add(connection)
        if self._closed:  # closed while connecting
            self._discard(connection)
            raise ConnectFailed("the connection pool is closed")
        return connection

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def _put_back(self, connection: _Connection) -> None:
        self._busy.discard(connection)
        if self._closed:
            connection.close()
            return
        loop = asyncio.get_running_loop()
        connection.idle_since = loop.time()
        self._idle.setdefault(connection.origin, []).append(connection)
        if self._sweeper is None:
            self._sweeper = loop.call_at(
                connection.idle_since + self._keepalive_seconds, self._sweep
            )
        self._wake_one()

    def _discard(self, connection: _Connection) -> None:
        self._busy.discard(connection)
        self._close(connection)

    def _close(self, connection: _Connection) -> None:
        connection.close()
        self._wake_one()

    def _sweep(self) -> None:
        """Close connections idle for ``keepalive_seconds``; come back for the next one."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        next_expiry: float | None = None
        for origin, idle in list(self._idle.items()):
            kept = []
            for connection in idle:
                expiry = connection.idle_since + self._keepalive_seconds
                if expiry <= now or not connection.alive():
                    connection.close()
                    continue
                kept.append(connection)
                next_expiry = expiry if next_expiry is None else min(next_expiry, expiry)
            if kept:
                self._idle[origin] = kept
            else:
                del self._idle[origin]
        if next_expiry is not None:
            self._sweeper = loop.call_at(next_expiry, self._sweep)
        self._wake_one()


async def _exchange(
    connection: _Connection, data: bytes, limits: ReplyLimits
) -> tuple[HttpResponse, bool]:
    """Write ``data``, read one reply; whether the connection may carry another request."""
    reader, writer = connection.reader, connection.writer
    received = False

    async def more() -> bool:
        # One read from the socket into the buffer; False at the connection's end.
        nonlocal received
        try:
            chunk = await reader.read(65536)
        except OSError as error:  # reset, aborted, TLS failure (ssl.SSLError is one)
            raise ServerDisconnected(f"{type(error).__name__}: {error}", stale=False) from error
        if not chunk:
            return False
        received = True
        connection.buffer += chunk
        return True

    try:
        writer.write(data)
        if writer.transport.get_write_buffer_size():
            await writer.drain()
        return await read_response(connection.buffer, more, limits=limits)
    except OSError as error:  # from the write: reset, broken pipe
        disconnected = ServerDisconnected(f"{type(error).__name__}: {error}", stale=False)
        if connection.reused and not received:
            raise ServerDisconnected(str(disconnected), stale=True) from error
        raise disconnected from error
    except ServerDisconnected as error:
        if connection.reused and not received:
            # A pooled connection the server had closed: it never read the request.
            raise ServerDisconnected(str(error), stale=True) from error
        raise
