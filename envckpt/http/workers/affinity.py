"""Every data request of a rollout served by the worker that holds the rollout.

A worker's state is the state of its slot's rollouts (``slots.owner_slot``),
but the kernel hands a connection to any worker. This ASGI middleware reads
a data request's body, finds its ``episode.rollout_id`` and, when another
worker owns that rollout, forwards the request unchanged to the owner's
private socket (envckpt's h11 client over a Unix socket) and sends its reply
back once whole; a request without a rollout id,
or one the owner itself must refuse, is served here. A request for a rollout
whose worker is gone gets ``503 checkpoint_error`` naming the worker (its
state died with it), never a silent run against empty state::

    app.add_middleware(EpisodeAffinity, group=group)   # outermost

Control routes (``/ng-control/...``) are never forwarded: the group fans
those out itself.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envckpt.errors import ParticipantError
from envckpt.http.bodies import DATA_MAX_BODY_BYTES
from envckpt.http.connections import BadReply, ConnectFailed, ServerDisconnected
from envckpt.http.workers.group import WorkerGroup
from envckpt.http.workers.siblings import INTERNAL_SCOPE_KEY
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX, ErrorCode

# Each hop frames its own connection and body.
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length"})
# Replies that carry no body and so no length (RFC 9110 8.6).
_NO_BODY = frozenset({204, 304})


class EpisodeAffinity:
    """ASGI middleware: forward a data request to the worker that owns its rollout."""

    def __init__(
        self, app: ASGIApp, *, group: WorkerGroup, max_body_bytes: int = DATA_MAX_BODY_BYTES
    ) -> None:
        self.app = app
        self.group = group
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get(INTERNAL_SCOPE_KEY)
            or scope["method"] != "POST"
            or scope["path"].startswith(CHECKPOINT_ROUTE_PREFIX)
            or self.group.slot is None
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more and size <= self.max_body_bytes:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        owner = None if more else self._owner(body)
        if owner is None or owner == self.group.slot:
            await self.app(scope, _replay(body, more, receive), send)
            return
        await self._forward(owner, scope, body, send)

    def _owner(self, body: bytes) -> int | None:
        try:
            episode = orjson.loads(body).get("episode")
            rollout_id = episode.get("rollout_id")
        except (ValueError, AttributeError):
            return None
        return self.group.owner(rollout_id) if isinstance(rollout_id, str) else None

    async def _forward(self, owner: int, scope: Scope, body: bytes, send: Send) -> None:
        sibling = self.group.sibling(owner)
        if sibling is None:
            await _unavailable(send, owner, "is not running")
            return
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        try:
            response = await self.group.siblings.forward(
                sibling.socket, scope["method"].encode("ascii"), target, headers, body
            )
        except (ConnectFailed, ServerDisconnected, BadReply) as error:
            await _unavailable(send, owner, f"did not take the request ({type(error).__name__})")
            return
        # The sibling's reply is read whole (a rollout's result), then sent on with its length.
        fields = [(k, v) for k, v in response.fields if k not in _HOP_BY_HOP]
        if response.status not in _NO_BODY:
            fields.append((b"content-length", b"%d" % len(response.body)))
        await send({"type": "http.response.start", "status": response.status, "headers": fields})
        await send({"type": "http.response.body", "body": response.body, "more_body": False})


def _replay(body: bytes, more: bool, receive: Receive) -> Receive:
    """A receive that yields the body read so far, then whatever is still arriving."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replayed


async def _unavailable(send: Send, slot: int, reason: str) -> None:
    error = ParticipantError(
        ErrorCode.CHECKPOINT_ERROR,
        f"worker-{slot}, which holds this rollout, {reason}: its state is lost",
    )
    payload: Any = orjson.dumps(error.to_wire())
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload, "more_body": False})
