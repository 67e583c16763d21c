"""Tests for envckpt.http.workers.siblings: the private socket's routes and the calls to them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request

from envckpt.http.serve import serve_unix
from envckpt.http.workers.merge import LOST
from envckpt.http.workers.siblings import FAILED, INTERNAL_SCOPE_KEY, Siblings, internal_app
from envckpt.http.workers.slots import Registration

TOKEN = "sibling-token-0123456789"


def private(calls: list[tuple[Any, ...]]) -> Any:
    app = FastAPI()

    @app.post("/data")
    async def data(request: Request) -> dict[str, Any]:
        return {"internal": bool(request.scope.get(INTERNAL_SCOPE_KEY))}

    async def local(
        method: str, route: str, body: Any, received_at: float | None
    ) -> tuple[int, dict[str, Any]]:
        calls.append((method, route, body, received_at))
        return 200, {"phase": "idle"}

    return internal_app(
        app,
        token=TOKEN,
        local=local,
        worker=lambda: {"slot": 1, "pid": 4321, "joined_open": ["c9"]},
        join_state=lambda: {"finished": ["a"], "marks": {}, "open": None},
    )


async def test_a_sibling_answers_with_its_own_reply_and_who_it_is(short_dir: Path) -> None:
    """A control call runs on that worker only; the share carries its pid and restarts."""
    calls: list[tuple[Any, ...]] = []
    socket = str(short_dir / "w1.sock")
    siblings = Siblings(TOKEN)
    async with serve_unix(private(calls), socket):
        registration = Registration(1, 4321, "b" * 32, socket)
        share = await siblings.control(
            registration, "POST", "renew", {"x": 1}, timeout=5, received_at=12.5
        )
        join = await siblings.join_state(registration, timeout=5)
    await siblings.aclose()
    assert (share.slot, share.status, dict(share.body or {})) == (1, 200, {"phase": "idle"})
    assert (share.pid, share.joined_open) == (4321, ("c9",))
    assert calls == [("POST", "renew", {"x": 1}, 12.5)]
    assert join == {"finished": ["a"], "marks": {}, "open": None}


async def test_the_private_routes_refuse_a_wrong_token_and_mark_data_requests(
    short_dir: Path,
) -> None:
    """Internal routes need the token; everything else is the app, marked internal."""
    calls: list[tuple[Any, ...]] = []
    socket = str(short_dir / "w1.sock")
    async with serve_unix(private(calls), socket):
        transport = httpx.AsyncHTTPTransport(uds=socket)
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            refused = await client.get(
                "/envckpt-worker/v1/control/status", headers={"authorization": "Bearer nope"}
            )
            join = await client.get("/envckpt-worker/v1/join")
            data = await client.post("/data")
    assert (refused.status_code, join.status_code, calls) == (401, 401, [])
    assert data.json() == {"internal": True}


async def test_a_socket_nobody_serves_is_a_lost_worker_and_garbage_is_a_failed_one(
    short_dir: Path,
) -> None:
    """No process behind the socket: lost. An answer that is not a worker's: failed."""
    siblings = Siblings(TOKEN)
    gone = Registration(2, 77, "c" * 32, str(short_dir / "nobody.sock"))
    share = await siblings.control(gone, "GET", "status", None, timeout=5)
    assert (share.problem, share.pid) == (LOST, 77)
    assert await siblings.join_state(gone, timeout=1) is None

    async def garbage(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"[1, 2]"})

    socket = str(short_dir / "g.sock")
    async with serve_unix(garbage, socket):
        share = await siblings.control(
            Registration(3, 78, "d" * 32, socket), "GET", "status", None, timeout=5
        )
    await siblings.aclose()
    assert share.problem == FAILED
    assert "sibling-token" not in repr(siblings)
