"""``HttpTransport``: the coordinator's ``ControlTransport`` over HTTP/1.1.

Each transport is one deployment's reserved control pool: its own keep-alive
connections (``connections.ConnectionPool``, framed by h11), kept between
calls and used for nothing but control calls, so a saturated data-plane pool
can never delay a prepare or a resume::

    async with HttpTransport({"policy": "http://10.0.0.5:8000"}, token=token) as transport:
        coordinator = Coordinator(transport)
        participants = await coordinator.discover()

    # or from the config nemo-gym resolved (the global config dict, or a ServerClient)
    transport = HttpTransport.from_nemo_gym_config(global_config_dict, token=token)

The pool is made on the first request, in the running event loop, and
belongs to that loop. Proxies are never used and redirects never followed.
Bodies are encoded with orjson (the standard library encoder takes over
whenever orjson would write ``null``, so NaN and Infinity are still refused
with ``ValueError``).

Idle connections are kept ``keepalive_seconds`` (25 s by default) from their
last reply, so a checkpoint's calls to one server reuse one connection from
prepare to resume (see ``DEFAULT_KEEPALIVE_SECONDS``).

Retries, all inside the call's ``timeout``:

* a failure to *connect* (refused, connect timeout) is retried up to
  ``connect_tries`` attempts in all, with a short backoff;
* a call sent on a pooled keep-alive connection that the server had already
  closed (the server's keep-alive timeout and our call crossed: the
  connection ended before a byte of the reply came) is sent again on a new
  connection, up to ``STALE_CONNECTION_RETRIES`` times: no reply came, and
  every control call is safe to repeat with the same checkpoint id (a
  participant replays or refuses a repeat, protocol.md section 4);
* anything else (a read timeout, a fresh connection dropped after the server
  read the request, a reply cut short, malformed or over the pool's size
  limits) is reported at once as ``TransportFailure``.

Replies are never interpreted here: the status, the parsed JSON body (or
``None``) and the raw text go back to the coordinator. A body nested deeper
than ``reply_json.MAX_REPLY_DEPTH`` is a ``TransportFailure``, as is every
failure to frame or decode a reply.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

from envckpt.coordination.transport import ControlReply, TransportFailure
from envckpt.http.closing import AsyncCloseable
from envckpt.http.connections import (
    BadReply,
    ConnectFailed,
    ConnectionPool,
    Headers,
    LoopBoundPool,
    Origin,
    ServerDisconnected,
)
from envckpt.http.reply_json import control_reply
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX, ROUTES

DEFAULT_MAX_CONNECTIONS = 64
# A connection attempt never waits longer than this, so connect retries fit
# inside a long per-call budget (discovery allows 60 s for the reply).
DEFAULT_CONNECT_TIMEOUT = 10.0
# An idle pooled connection is dropped after this long, counted from its last
# reply: long enough to last through a snapshot's phases at a thousand
# instances (an instance's prepare, commit and resume may lie seconds apart),
# and below the keep-alive of the servers it calls (nemo-gym runs its servers
# with uvicorn's ``timeout_keep_alive=30``, envckpt's own serve the same). A
# server with a shorter keep-alive (uvicorn's default, 5 s) closes idle
# connections first: the pool sees the close and opens a new one, and a call
# that crossed the close is sent again (``STALE_CONNECTION_RETRIES``). At 4 s,
# a thousand packed instances reconnected in mid-snapshot, all at once.
DEFAULT_KEEPALIVE_SECONDS = 25.0
# Pause before connect retry n (n >= 1): RETRY_BACKOFF * 2 ** (n - 1), capped.
RETRY_BACKOFF = 0.05
MAX_RETRY_BACKOFF = 1.0
# Resends of a call whose pooled connection the server had closed. More than
# one: several idle connections may have been closed at once.
STALE_CONNECTION_RETRIES = 3

# Where nemo-gym keeps a server instance: a top-level entry holding exactly one
# of these keys, itself holding one server type config with host and port.
NEMO_GYM_SERVER_TYPES: tuple[str, ...] = (
    "environment_servers",
    "responses_api_models",
    "responses_api_agents",
    "resources_servers",
)


def checked_base_url(url: object, what: str) -> str:
    """``url`` without its trailing slashes; ValueError (naming ``what``) unless it is an
    http(s) URL with a host and no query or fragment."""
    if not isinstance(url, str):
        raise ValueError(f"{what} must be a string, got {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{what} {url!r} is not an http(s) URL")
    if parts.query or parts.fragment:
        raise ValueError(f"{what} {url!r} has a query or fragment")
    return url.rstrip("/")


def _host_url(host: str, port: int) -> str:
    # An IPv6 literal needs brackets in a URL; nemo-gym writes hosts bare.
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def nemo_gym_server_urls(global_config_dict: Mapping[str, Any]) -> dict[str, str]:
    """Server name -> base URL of every server instance in a nemo-gym global config.

    Follows nemo-gym 0.7.0: a server instance is a top-level mapping holding
    one of ``NEMO_GYM_SERVER_TYPES``, whose single value holds the server type
    config with ``host`` and ``port``; the URL is ``http://host:port``
    (``ServerClient._build_server_base_url``). Other top-level entries (the
    head server, settings, lists) are not servers. Accepts a plain mapping or
    an OmegaConf ``DictConfig``. Raises ``ValueError`` for a server entry
    without a usable host and port (an unresolved config).
    """
    urls: dict[str, str] = {}
    for name in list(global_config_dict.keys()):
        try:
            entry = global_config_dict[name]
        except Exception:
            # A setting OmegaConf cannot resolve (an unset "???", say) is not a
            # server entry; a server entry is a mapping node, read lazily below.
            continue
        if not isinstance(entry, Mapping):
            continue
        types = [key for key in NEMO_GYM_SERVER_TYPES if key in entry]
        if not types:
            continue
        if len(types) > 1:
            raise ValueError(f"server {name!r} declares several server types: {types}")
        by_type = entry[types[0]]
        if not isinstance(by_type, Mapping) or len(by_type) != 1:
            raise ValueError(f"server {name!r}: {types[0]} must hold exactly one server config")
        inner = next(iter(by_type.values()))
        if not isinstance(inner, Mapping):
            raise ValueError(f"server {name!r}: its {types[0]} config is not a mapping")
        host, port = inner.get("host"), inner.get("port")
        if not isinstance(host, str) or not host:
            raise ValueError(f"server {name!r} has no host; pass the resolved global config")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"server {name!r} has no usable port {port!r}; resolve the config")
        urls[str(name)] = _host_url(host, port)
    return urls


class HttpTransport(AsyncCloseable):
    """``ControlTransport`` to servers named by base URL, with its own connection pool.

    ``trust_env`` must stay false: control calls go straight to the servers,
    never through a proxy configured for data traffic. ``ssl_context`` verifies
    ``https`` servers (default: the system's trusted certificates).
    """

    def __init__(
        self,
        servers: Mapping[str, str],
        *,
        token: str,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        keepalive_seconds: float = DEFAULT_KEEPALIVE_SECONDS,
        trust_env: bool = False,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if not isinstance(token, str) or not token:
            raise ValueError("HttpTransport needs a non-empty bearer token")
        if not token.isprintable():
            raise ValueError("the bearer token must be printable (no line breaks)")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if connect_timeout <= 0:
            raise ValueError("connect_timeout must be positive")
        if keepalive_seconds <= 0:
            raise ValueError("keepalive_seconds must be positive")
        if trust_env:
            raise ValueError(
                "trust_env=True is not supported: control calls go straight to the "
                "servers, never through a proxy"
            )
        self._servers = {
            str(name): checked_base_url(url, f"server {name!r}: base URL")
            for name, url in servers.items()
        }
        # Per server: where to connect, the path before the route, the headers
        # (made once: a call adds only its Content-Length).
        authorization = b"Bearer " + token.encode()
        self._targets = {
            name: _Target.of(url, authorization) for name, url in self._servers.items()
        }
        self._pool = LoopBoundPool(
            "an HttpTransport",
            max_connections=max_connections,
            keepalive_seconds=keepalive_seconds,
            connect_timeout=connect_timeout,
            ssl_context=ssl_context,
        )
        self._closed = False
        # Counters for tests and metrics: calls made, HTTP attempts sent, and
        # resends after a pooled connection turned out closed.
        self.requests = 0
        self.attempts = 0
        self.stale_retries = 0

    def __repr__(self) -> str:  # the token stays out of reprs and logs
        return f"HttpTransport(servers={self._servers!r})"

    @classmethod
    def from_nemo_gym_config(
        cls, global_config_dict: Mapping[str, Any], *, token: str, **options: Any
    ) -> HttpTransport:
        """A transport to every server instance of a resolved nemo-gym global config."""
        return cls(nemo_gym_server_urls(global_config_dict), token=token, **options)

    @classmethod
    def from_server_client(cls, server_client: Any, *, token: str, **options: Any) -> HttpTransport:
        """A transport to every server a nemo-gym ``ServerClient`` knows (its global config)."""
        return cls.from_nemo_gym_config(server_client.global_config_dict, token=token, **options)

    def server_names(self) -> tuple[str, ...]:
        return tuple(sorted(self._servers))

    def base_url(self, server: str) -> str:
        return self._servers[server]

    def _client(self) -> ConnectionPool:
        """The pool of the running loop, made on first use."""
        if self._closed:
            raise TransportFailure("the transport is closed")
        return self._pool.get()

    async def request(
        self,
        server: str,
        method: str,
        route: str,
        body: Mapping[str, Any] | None,
        *,
        timeout: float,
        connect_tries: int = 1,
    ) -> ControlReply:
        self.requests += 1
        target = self._targets.get(server)
        if target is None:
            raise TransportFailure(f"no server named {server!r} is configured")
        if route not in ROUTES:
            raise ValueError(f"unknown control route {route!r}")
        content = None if body is None else encode_body(body)
        verb = method.encode("ascii")
        path = target.path + route.encode("ascii")
        headers = target.headers if content is None else target.body_headers
        pool = self._client()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        tries = max(1, connect_tries)
        where = f"{server} {method} {route}"
        connect_failures = stale = 0
        while True:
            if self._closed:
                raise TransportFailure(f"{where}: the transport was closed")
            if deadline - loop.time() <= 0:
                raise TransportFailure(f"{where}: no reply within {timeout:.1f} s")
            self.attempts += 1
            try:
                response = await pool.request(
                    target.origin, verb, path, headers, content, deadline=deadline
                )
            except ConnectFailed as error:
                connect_failures += 1
                if connect_failures >= tries:
                    raise TransportFailure(
                        f"{where}: cannot connect to {self._servers[server]} after {tries} "
                        f"{'try' if tries == 1 else 'tries'} ({error})"
                    ) from error
                pause = min(MAX_RETRY_BACKOFF, RETRY_BACKOFF * 2 ** (connect_failures - 1))
                await asyncio.sleep(max(0.0, min(pause, deadline - loop.time())))
            except TimeoutError as error:
                # The request may have reached the server and still be running:
                # resending it now would only race the first copy.
                raise TransportFailure(
                    f"{where}: no reply within {timeout:.1f} s ({type(error).__name__})"
                ) from error
            except ServerDisconnected as error:
                if not error.stale or stale >= STALE_CONNECTION_RETRIES:
                    raise TransportFailure(f"{where}: ServerDisconnected: {error}") from error
                # A kept-alive connection the server had closed: no reply came.
                stale += 1
                self.stale_retries += 1
            except BadReply as error:
                raise TransportFailure(f"{where}: BadReply: {error}") from error
            else:
                try:
                    return control_reply(response.status, response.body)
                except TransportFailure as error:
                    raise TransportFailure(f"{where}: {error}") from error

    async def aclose(self) -> None:
        self._closed = True
        await self._pool.aclose()


@dataclass(frozen=True, slots=True)
class _Target:
    """Where one server's control calls go: origin, path up to the route, headers."""

    origin: Origin
    path: bytes
    headers: Headers
    body_headers: Headers

    @classmethod
    def of(cls, base_url: str, authorization: bytes) -> _Target:
        origin = Origin.from_url(base_url)
        # A path is sent as given when it is plain ASCII, percent-encoded otherwise.
        prefix = quote(urlsplit(base_url).path.rstrip("/"), safe="/%:@!$&'()*+,;=~")
        headers = [
            (b"Host", origin.host_header.encode("ascii")),
            (b"Authorization", authorization),
            (b"Accept", b"application/json"),
        ]
        return cls(
            origin,
            f"{prefix}{CHECKPOINT_ROUTE_PREFIX}/".encode("ascii"),
            headers,
            [*headers, (b"Content-Type", b"application/json")],
        )


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as compact JSON; ``ValueError`` for NaN or Infinity, as JSON has none.

    orjson writes non-finite floats as ``null``, and refuses a few things the
    standard library accepts (non-string keys, huge ints): whenever its output
    holds ``null`` anywhere or it refuses, the standard library encodes
    instead, so what a server decodes never depends on which encoder ran.
    """
    try:
        data = orjson.dumps(body)
    except TypeError:
        data = b"null"
    if b"null" not in data:
        return data
    return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
