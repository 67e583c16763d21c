"""A keep-alive pool of HTTP/1.1 connections for control calls, framed by h11.

``HttpTransport`` sends one control call at a time per task and reads a small
JSON reply. The pool keeps what a control call needs and nothing more
(no cookies, proxies, redirects or streaming); the bytes on each connection
are framed by h11 (``exchange.py``)::

    pool = ConnectionPool(max_connections=64, keepalive_seconds=4.0, connect_timeout=10.0)
    origin = Origin.from_url("http://10.0.0.5:8000")
    headers = [(b"host", origin.host_header.encode()), (b"authorization", b"Bearer ...")]
    response = await pool.request(origin, b"POST", b"/ng-control/v1/checkpoint/prepare",
                                  headers, body, deadline=loop.time() + 5.0)
    response.status, response.body       # the reply, read whole
    await pool.aclose()

Connections are kept per ``Origin`` (scheme, host, port, or a Unix socket
for calls between the workers of one server), at most
``max_connections`` open in all, reused most-recent first, and dropped when
idle ``keepalive_seconds``, when the peer closed them or sent bytes while
idle, or when h11 does not report the exchange complete on both sides
(``Connection: close``, HTTP/1.0, a body framed by the connection's end, any
byte past the reply).

What can go wrong, by what the caller can do about it:

* ``ConnectFailed``: no connection was made (refused, timed out, name or TLS
  failure); nothing was sent.
* ``ServerDisconnected``: the connection ended or was reset before a whole
  reply arrived. ``stale`` is true when the connection was a pooled one and
  not a byte of the reply had arrived: the server closed it while idle, so the
  request may be sent again on a new connection.
* ``BadReply``: h11 refuses the reply, or it is larger than
  ``MAX_HEADER_BYTES`` / ``MAX_BODY_BYTES`` (see ``exchange.py``).
* ``TimeoutError``: the ``deadline`` passed; the connection is dropped.

Replies are not interpreted beyond HTTP framing; redirects are not followed.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from envckpt.http.exchange import (
    BadReply,
    Headers,
    HttpResponse,
    ReplyLimits,
    RequestHeads,
    ServerDisconnected,
    Wire,
    connect,
    exchange,
)

__all__ = [
    "BadReply",
    "ConnectFailed",
    "ConnectionPool",
    "Headers",
    "HttpResponse",
    "Origin",
    "ReplyLimits",
    "ServerDisconnected",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class ConnectFailed(Exception):
    """No connection could be opened to the origin; nothing was sent."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where connections go: scheme, host (no brackets) and port.

    With ``unix_socket``, connections go to that Unix socket instead (host
    and port then name the server only in the ``Host`` header).
    """

    scheme: str
    host: str
    port: int
    unix_socket: str | None = None

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
        # The request heads h11 validated, sent again (a call to the same
        # server and route usually differs by its body's length at most).
        self._heads = RequestHeads()
        # Idle connections per origin, most recently used last.
        self._idle: dict[Origin, list[Wire]] = {}
        self._busy: set[Wire] = set()
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

    async def request(
        self,
        origin: Origin,
        method: bytes,
        target: bytes,
        headers: Headers,
        body: bytes | None,
        *,
        deadline: float | None,
    ) -> HttpResponse:
        """Send one request to ``origin`` and read the reply, by ``deadline``.

        ``headers`` carry ``Host`` and the rest but the length (added for a
        ``body``); ``deadline`` is on the running loop's clock (``loop.time()``),
        ``None`` for none (a forwarded call that lasts as long as its rollout).
        """
        connection = await self._acquire(origin, deadline)
        try:
            async with asyncio.timeout_at(deadline):
                response, reusable = await exchange(
                    connection, method, target, headers, body, self._limits, self._heads
                )
        except BaseException:
            self._discard(connection)
            raise
        if reusable:
            self._put_back(connection, origin)
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
            await connection.wait_closed()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    # -- connections in and out -------------------------------------------------

    async def _acquire(self, origin: Origin, deadline: float | None) -> Wire:
        while True:
            if self._closed:
                raise ConnectFailed("the connection pool is closed")
            connection = self._take_idle(origin)
            if connection is not None:
                return connection
            if self.open_connections < self._max_connections or self._close_oldest_idle():
                return await self._open(origin, deadline)
            await self._wait_for_room(deadline)

    def _take_idle(self, origin: Origin) -> Wire | None:
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
        oldest: list[Wire] | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest[0].idle_since):
                oldest = idle
        if oldest is None:
            return False
        self._close(oldest.pop(0))
        return True

    async def _wait_for_room(self, deadline: float | None) -> None:
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

    async def _open(self, origin: Origin, deadline: float | None) -> Wire:
        loop = asyncio.get_running_loop()
        connect_by = loop.time() + self._connect_timeout
        if deadline is not None:
            connect_by = min(deadline, connect_by)
        self._opening += 1
        try:
            try:
                async with asyncio.timeout_at(connect_by):
                    connection = await connect(
                        origin.host,
                        origin.port,
                        limits=self._limits,
                        ssl_context=self._tls() if origin.scheme == "https" else None,
                        unix_socket=origin.unix_socket,
                    )
            except TimeoutError as error:
                where = origin.unix_socket or f"{origin.host}:{origin.port}"
                raise ConnectFailed(f"timed out connecting to {where}") from error
            except OSError as error:  # refused, unreachable, name not found, TLS failure
                raise ConnectFailed(f"{type(error).__name__}: {error}") from error
        except BaseException:
            self._opening -= 1
            self._wake_one()  # the slot is free again
            raise
        self._opening -= 1
        self._busy.add(connection)
        if self._closed:  # closed while connecting
            self._discard(connection)
            raise ConnectFailed("the connection pool is closed")
        return connection

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def _put_back(self, connection: Wire, origin: Origin) -> None:
        self._busy.discard(connection)
        if self._closed:
            connection.close()
            return
        loop = asyncio.get_running_loop()
        connection.idle_since = loop.time()
        self._idle.setdefault(origin, []).append(connection)
        if self._sweeper is None:
            self._sweeper = loop.call_at(
                connection.idle_since + self._keepalive_seconds, self._sweep
            )
        self._wake_one()

    def _discard(self, connection: Wire) -> None:
        self._busy.discard(connection)
        self._close(connection)

    def _close(self, connection: Wire) -> None:
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


class LoopBoundPool:
    """A ``ConnectionPool`` made on first use, for the event loop that first used it.

    A pool's connections belong to one loop: a client used from another loop
    is a bug, refused with ``RuntimeError`` naming ``owner``.
    """

    def __init__(self, owner: str, **options: Any) -> None:
        self._owner = owner
        self._options = options  # ConnectionPool's keywords
        self._pool: ConnectionPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> ConnectionPool:
        loop = asyncio.get_running_loop()
        if self._pool is None:
            self._pool = ConnectionPool(**self._options)
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError(f"{self._owner} is used from one event loop only")
        return self._pool

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.aclose()
