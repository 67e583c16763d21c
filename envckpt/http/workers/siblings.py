"""Calls between the workers of one server, over their private Unix sockets.

Each worker serves, on its own socket (``slots.Registration.socket``), the
internal routes below and its own app for forwarded data requests (marked
internal, so they are served here and never forwarded again). Nothing here
is reachable over TCP; the socket's directory is owner-only and every
internal control call still carries the bearer token::

    GET  /envckpt-worker/v1/control/status        -> {"status", "body", "worker"}
    POST /envckpt-worker/v1/control/<route>        this worker's own answer
    GET  /envckpt-worker/v1/join                   finished ids, retire marks, open id

``Siblings`` is the client side: one pool of envckpt's h11 client per sibling
socket (``connections.ConnectionPool`` over a Unix socket), and each call's
failure told apart (refused or dropped: the worker is gone;
no reply in time: it is silent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from envckpt.http.apps import new_app
from envckpt.http.bodies import CONTROL_MAX_BODY_BYTES, BodyRefused, parse_json, read_body
from envckpt.http.connections import (
    BadReply,
    ConnectFailed,
    ConnectionPool,
    Headers,
    HttpResponse,
    Origin,
    ServerDisconnected,
)
from envckpt.http.workers.merge import LOST, SILENT, Share
from envckpt.http.workers.slots import Registration
from envckpt.participant import edge

INTERNAL_PREFIX = "/envckpt-worker/v1"
# Set on every request that arrived over a private socket.
INTERNAL_SCOPE_KEY = "envckpt.worker_internal"
FAILED = "failed"

# Idle keep-alive of a sibling connection: well under the server's 5 s.
SIBLING_KEEPALIVE_SECONDS = 1.0
SIBLING_CONNECT_SECONDS = 10.0
MAX_SIBLING_CONNECTIONS = 1024
# The Host header of calls between workers (the socket, not a name, says where).
SIBLING_HOST = "worker"

# Where the answering worker received the request (Unix seconds), for the deadline check.
RECEIVED_AT_HEADER = "x-envckpt-received-at"

# (method, route, parsed body, received at) -> this worker's (status, reply)
LocalCall = Callable[[str, str, Any, float | None], Awaitable[tuple[int, dict[str, Any]]]]


def internal_app(
    app: ASGIApp,
    *,
    token: str,
    local: LocalCall,
    worker: Callable[[], dict[str, Any]],
    join_state: Callable[[], dict[str, Any]],
) -> ASGIApp:
    """What a worker serves on its private socket: the internal routes, else ``app``."""
    routes = _internal_routes(token, local, worker, join_state)

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(INTERNAL_PREFIX + "/"):
            await routes(scope, receive, send)
            return
        if scope["type"] == "http":
            scope = {**scope, INTERNAL_SCOPE_KEY: True}
        await app(scope, receive, send)

    return serve


def _internal_routes(
    token: str,
    local: LocalCall,
    worker: Callable[[], dict[str, Any]],
    join_state: Callable[[], dict[str, Any]],
) -> FastAPI:
    routes = new_app()

    async def control(route: str, request: Request) -> Response:
        if not edge.authorized(request.headers.get("authorization"), token):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        body: Any = None
        if request.method == "POST":
            try:
                raw = await read_body(request, max_bytes=CONTROL_MAX_BODY_BYTES, within=30.0)
                body = parse_json(raw)
            except BodyRefused as refusal:
                return refusal.response()
        try:
            received_at: float | None = float(request.headers[RECEIVED_AT_HEADER])
        except (KeyError, ValueError):
            received_at = None
        status, reply = await local(request.method, route, body, received_at)
        return Response(
            orjson.dumps({"status": status, "body": reply, "worker": worker()}),
            media_type="application/json",
        )

    async def join(request: Request) -> Response:
        if not edge.authorized(request.headers.get("authorization"), token):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return Response(orjson.dumps(join_state()), media_type="application/json")

    routes.add_api_route(f"{INTERNAL_PREFIX}/control/{{route}}", control, methods=["GET", "POST"])
    routes.add_api_route(f"{INTERNAL_PREFIX}/join", join, methods=["GET"])
    return routes


class Siblings:
    """Connection pools to the other workers' private sockets, and the calls over them."""

    def __init__(self, token: str) -> None:
        self._authorization = f"Bearer {token}".encode()
        self._pools: dict[str, ConnectionPool] = {}

    def __repr__(self) -> str:  # the token stays out of reprs and logs
        return f"Siblings({sorted(self._pools)})"

    def _pool(self, socket: str) -> ConnectionPool:
        """The pool of one sibling socket (made on first use, kept until ``aclose``)."""
        pool = self._pools.get(socket)
        if pool is None:
            pool = self._pools[socket] = ConnectionPool(
                # Forwarded /run calls hold a connection for a whole rollout.
                max_connections=MAX_SIBLING_CONNECTIONS,
                # An idle connection is dropped long before the sibling's server
                # closes it (5 s): reusing one the server is closing fails the
                # call as if the worker were lost, and a Unix-socket connect
                # costs microseconds.
                keepalive_seconds=SIBLING_KEEPALIVE_SECONDS,
                connect_timeout=SIBLING_CONNECT_SECONDS,
            )
        return pool

    async def forward(
        self, socket: str, method: bytes, target: bytes, headers: Headers, body: bytes | None
    ) -> HttpResponse:
        """Send a data request as it came (``headers`` hold its Host) and wait for the whole
        reply, however long the sibling takes.

        Raises ``ConnectFailed``, ``ServerDisconnected`` or ``BadReply`` (``connections``).
        """
        origin = Origin("http", SIBLING_HOST, 80, unix_socket=socket)
        return await self._pool(socket).request(
            origin, method, target, headers, body, deadline=None
        )

    async def aclose(self) -> None:
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            await pool.aclose()

    async def _call(
        self,
        socket: str,
        method: bytes,
        target: str,
        headers: Headers,
        body: bytes | None,
        *,
        timeout: float,
    ) -> HttpResponse:
        """One internal call, with the Host and the bearer token, by ``timeout`` seconds."""
        origin = Origin("http", SIBLING_HOST, 80, unix_socket=socket)
        headers = [
            (b"host", SIBLING_HOST.encode()),
            (b"authorization", self._authorization),
            *headers,
        ]
        deadline = asyncio.get_running_loop().time() + max(0.0, timeout)
        return await self._pool(socket).request(
            origin, method, target.encode(), headers, body, deadline=deadline
        )

    async def control(
        self,
        sibling: Registration,
        method: str,
        route: str,
        body: Any,
        *,
        timeout: float,
        received_at: float | None = None,
    ) -> Share:
        """Worker ``sibling``'s own answer to one control request, or why there is none."""
        headers: Headers = []
        if received_at is not None:
            headers.append((RECEIVED_AT_HEADER.encode(), repr(received_at).encode()))
        content = None
        if body is not None:
            content = orjson.dumps(body)
            headers.append((b"content-type", b"application/json"))
        try:
            response = await self._call(
                sibling.socket,
                method.encode("ascii"),
                f"{INTERNAL_PREFIX}/control/{route}",
                headers,
                content,
                timeout=timeout,
            )
        except TimeoutError:
            return Share(sibling.slot, problem=SILENT, pid=sibling.pid)
        except (ConnectFailed, ServerDisconnected, BadReply):
            # Refused (no process behind the socket), dropped mid-call or not
            # HTTP at all: gone.
            return Share(sibling.slot, problem=LOST, pid=sibling.pid)
        return _share(sibling, response)

    async def join_state(self, sibling: Registration, *, timeout: float) -> dict[str, Any] | None:
        """What a joining worker adopts from ``sibling``, or None if it does not answer."""
        try:
            response = await self._call(
                sibling.socket, b"GET", f"{INTERNAL_PREFIX}/join", [], None, timeout=timeout
            )
            state = orjson.loads(response.body) if response.status == 200 else None
        except (ConnectFailed, ServerDisconnected, BadReply, TimeoutError, ValueError):
            return None
        return state if isinstance(state, dict) else None


def _share(sibling: Registration, response: HttpResponse) -> Share:
    try:
        reply = orjson.loads(response.body)
        status, body, worker = reply["status"], reply["body"], reply["worker"]
        if not isinstance(status, int) or not isinstance(body, Mapping):
            raise TypeError("malformed")
        joined = tuple(str(cid) for cid in worker.get("joined_open", ()))
        return Share(sibling.slot, status, body, pid=int(worker["pid"]), joined_open=joined)
    except (ValueError, KeyError, TypeError, AttributeError):
        # Not an answer of an envckpt worker (another token, a broken reply).
        return Share(sibling.slot, problem=FAILED, pid=sibling.pid)
