"""JSON calls to any http(s) URL on envckpt's own h11 pool: the data plane's client.

The control plane's ``HttpTransport`` and this client share one HTTP stack
(``connections.ConnectionPool``, framed by h11 in ``exchange.py``). Each
``JsonClient`` owns its pool, made in the running event loop on the first
call and kept for that loop::

    client = JsonClient(headers={"Authorization": "Bearer ..."}, max_connections=256)
    reply = await client.post("http://10.0.0.5:8000/run", {"task": "..."}, timeout=600.0)
    reply.status, reply.text, reply.json()     # json(): the value, None if not JSON
    await client.aclose()

Nothing is retried, not even a call on a pooled connection the server had
closed: a data call may have reached the server. What can go wrong, typed
for the caller to map (``connections`` names the first three):

* ``ConnectFailed``: no connection was made (or the client is closed); nothing
  was sent.
* ``ServerDisconnected``: the connection ended before a whole reply came.
* ``BadReply``: the reply is not HTTP/1.x h11 and this client accept, is over
  the size limits, or (from ``json()``) nests deeper than
  ``reply_json.MAX_REPLY_DEPTH``.
* ``TimeoutError``: no whole reply within ``timeout``.

Bodies are encoded as ``client.encode_body`` does (NaN and Infinity refused
with ``ValueError`` before anything is sent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote, urlsplit

from envckpt.coordination.transport import TransportFailure
from envckpt.http.client import encode_body
from envckpt.http.closing import AsyncCloseable
from envckpt.http.connections import (
    BadReply,
    ConnectFailed,
    ConnectionPool,
    Headers,
    LoopBoundPool,
    Origin,
)
from envckpt.http.reply_json import decode_reply

__all__ = ["JsonClient", "JsonReply"]

DEFAULT_CONNECT_TIMEOUT = 10.0
# Below the keep-alive of the servers envckpt starts (5 s), so a call is never
# sent on a connection the server is closing (nothing here is resent).
DEFAULT_KEEPALIVE_SECONDS = 4.0
DEFAULT_MAX_CONNECTIONS = 256


@dataclass(frozen=True, slots=True)
class JsonReply:
    """A whole reply: status, headers (names lower-cased) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def ok(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        """The body as text (bytes that are not UTF-8 replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body's JSON value; ``None`` if it is not JSON; ``BadReply`` if nested too deep."""
        try:
            return decode_reply(self.body)
        except TransportFailure as error:
            raise BadReply(str(error)) from error


@lru_cache(maxsize=1024)
def _route(url: str) -> tuple[Origin, bytes, bytes]:
    """Where ``url`` goes: origin, request target (path and query), Host header."""
    origin = Origin.from_url(url)
    parts = urlsplit(url)
    # A path is sent as given when it is plain ASCII, percent-encoded otherwise.
    target = quote(parts.path or "/", safe="/%:@!$&'()*+,;=~")
    if parts.query:
        target += "?" + quote(parts.query, safe="/%:@!$&'()*+,;=~?")
    return origin, target.encode("ascii"), origin.host_header.encode("ascii")


class JsonClient(AsyncCloseable):
    """JSON requests to http(s) URLs over one keep-alive pool (see module docstring)."""

    def __init__(
        self,
        *,
        headers: Mapping[str, str] | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        keepalive_seconds: float = DEFAULT_KEEPALIVE_SECONDS,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if connect_timeout <= 0 or keepalive_seconds <= 0:
            raise ValueError("connect_timeout and keepalive_seconds must be positive")
        fixed = {"accept": "application/json", **{k.lower(): v for k, v in (headers or {}).items()}}
        self._headers: Headers = [
            (k.encode("ascii"), v.encode("latin-1")) for k, v in fixed.items()
        ]
        self._max_connections = max_connections
        self._pool = LoopBoundPool(
            "a JsonClient",
            max_connections=max_connections,
            keepalive_seconds=keepalive_seconds,
            connect_timeout=connect_timeout,
        )
        self._closed = False

    def __repr__(self) -> str:  # the headers (a token) stay out of reprs and logs
        return f"JsonClient(max_connections={self._max_connections})"

    @property
    def is_closed(self) -> bool:
        """``aclose`` was called: every later call raises ``ConnectFailed``."""
        return self._closed

    async def post(self, url: str, body: Mapping[str, Any], *, timeout: float) -> JsonReply:
        """``POST url`` with ``body`` as JSON; the whole reply, by ``timeout`` seconds."""
        return await self.request(b"POST", url, encode_body(body), timeout=timeout)

    async def get(self, url: str, *, timeout: float) -> JsonReply:
        """``GET url``; the whole reply, by ``timeout`` seconds."""
        return await self.request(b"GET", url, None, timeout=timeout)

    async def request(
        self, method: bytes, url: str, content: bytes | None, *, timeout: float
    ) -> JsonReply:
        """One request with an already encoded JSON body (or none)."""
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        origin, target, host = _route(url)
        headers = [(b"host", host), *self._headers]
        if content is not None:
            headers.append((b"content-type", b"application/json"))
        pool = self._client()
        deadline = asyncio.get_running_loop().time() + timeout
        response = await pool.request(origin, method, target, headers, content, deadline=deadline)
        return JsonReply(response.status, response.headers, response.body)

    def _client(self) -> ConnectionPool:
        """The pool of the running loop, made on first use."""
        if self._closed:
            raise ConnectFailed("the JsonClient is closed")
        return self._pool.get()

    async def aclose(self) -> None:
        self._closed = True
        await self._pool.aclose()
