"""``HttpTransport``: the coordinator's ``ControlTransport`` over HTTP.

It owns an ``httpx.AsyncClient`` used for nothing but control calls, so a
saturated data-plane pool can never delay a prepare or a resume::

    async with HttpTransport({"policy": "http://10.0.0.5:8000"}, token=token) as transport:
        coordinator = Coordinator(transport)
        participants = await coordinator.discover()

    # or from the config nemo-gym resolved (the global config dict, or a ServerClient)
    transport = HttpTransport.from_nemo_gym_config(global_config_dict, token=token)

Retries: only a failure to *connect* (``ConnectError``, ``ConnectTimeout``)
is retried, up to ``connect_tries`` attempts; anything that may have reached
the server (a read timeout, a dropped connection, a malformed reply) is
reported at once as ``TransportFailure``, because control calls are not
blindly repeatable by the transport. The whole call, retries included, is
bounded by ``timeout``. Replies are never interpreted here: the status, the
parsed JSON body (or ``None``) and the raw text go back to the coordinator.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from envckpt.coordination.transport import ControlReply, TransportFailure
from envckpt.http.closing import AsyncCloseable
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX, ROUTES

DEFAULT_MAX_CONNECTIONS = 64
# A connection attempt never waits longer than this, so connect retries fit
# inside a long per-call budget (discovery allows 60 s for the reply).
DEFAULT_CONNECT_TIMEOUT = 10.0
# Pause before connect retry n (n >= 1): RETRY_BACKOFF * 2 ** (n - 1), capped.
RETRY_BACKOFF = 0.05
MAX_RETRY_BACKOFF = 1.0

# Where nemo-gym keeps a server instance: a top-level entry holding exactly one
# of these keys, itself holding one server type config with host and port.
NEMO_GYM_SERVER_TYPES: tuple[str, ...] = (
    "environment_servers",
    "responses_api_models",
    "responses_api_agents",
    "resources_servers",
)

_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)


def _base_url(server: str, url: str) -> str:
    if not isinstance(url, str):
        raise ValueError(f"server {server!r}: base URL must be a string, got {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"server {server!r}: {url!r} is not an http(s) base URL")
    if parts.query or parts.fragment:
        raise ValueError(f"server {server!r}: base URL {url!r} has a query or fragment")
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
    """``ControlTransport`` to servers named by base URL, with its own connection pool."""

    def __init__(
        self,
        servers: Mapping[str, str],
        *,
        token: str,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        trust_env: bool = False,
    ) -> None:
        if not isinstance(token, str) or not token:
            raise ValueError("HttpTransport needs a non-empty bearer token")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if connect_timeout <= 0:
            raise ValueError("connect_timeout must be positive")
        self._servers = {str(name): _base_url(name, url) for name, url in servers.items()}
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._connect_timeout = connect_timeout
        # trust_env=False: control calls go straight to the servers, never
        # through a proxy configured for data traffic.
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            trust_env=trust_env,
            follow_redirects=False,
        )
        # Counters for tests and metrics: calls made, and HTTP attempts sent.
        self.requests = 0
        self.attempts = 0

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
        base = self._servers.get(server)
        if base is None:
            raise TransportFailure(f"no server named {server!r} is configured")
        if route not in ROUTES:
            raise ValueError(f"unknown control route {route!r}")
        url = f"{base}{CHECKPOINT_ROUTE_PREFIX}/{route}"
        headers = dict(self._headers)
        content: bytes | None = None
        if body is not None:
            content = json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        tries = max(1, connect_tries)
        where = f"{server} {method} {route}"
        for attempt in range(1, tries + 1):
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TransportFailure(f"{where}: no reply within {timeout:.1f} s")
            per_phase = httpx.Timeout(remaining, connect=min(remaining, self._connect_timeout))
            self.attempts += 1
            try:
                async with asyncio.timeout(remaining):
                    response = await self._client.request(
                        method, url, content=content, headers=headers, timeout=per_phase
                    )
            except _CONNECT_ERRORS as error:
                if attempt == tries:
                    raise TransportFailure(
                        f"{where}: cannot connect to {base} after {tries} "
                        f"{'try' if tries == 1 else 'tries'} ({type(error).__name__}: {error})"
                    ) from error
                pause = min(MAX_RETRY_BACKOFF, RETRY_BACKOFF * 2 ** (attempt - 1))
                await asyncio.sleep(max(0.0, min(pause, deadline - loop.time())))
                continue
            except (httpx.TimeoutException, TimeoutError) as error:
                # The request may have reached the server: never resend it.
                raise TransportFailure(
                    f"{where}: no reply within {timeout:.1f} s ({type(error).__name__})"
                ) from error
            except httpx.HTTPError as error:
                raise TransportFailure(f"{where}: {type(error).__name__}: {error}") from error
            return _reply(response)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        await self._client.aclose()


def _reply(response: httpx.Response) -> ControlReply:
    text = response.text
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = None
    return ControlReply(response.status_code, body, raw=text)
