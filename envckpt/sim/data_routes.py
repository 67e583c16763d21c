"""The kinds' data-plane handlers as FastAPI routes: what the rollout traffic calls.

Each route hands the raw JSON body to the kind's handler and answers its
reply; a refusal comes back in the protocol's error envelope with its status,
so a remote caller (``envckpt.sim.data_clients``) can raise the same
``ParticipantError`` the handler raised::

    app = FastAPI()
    mount_participant(app, model.core, token=token)   # control routes
    app.include_router(model_router(model))           # POST /generate, POST /finish
    app.include_router(tool_router(tool))             # POST /call, POST /finish
    app.include_router(agent_router(agent))           # POST /run

    trainer_app.include_router(rows_router(data_plane.put, token=rows_token))  # POST /rows

Data routes carry no bearer token (as in Gym, rollout traffic is not
authenticated; only the control plane is). ``rows_router`` is the trainer's
end of ``HttpStagingSink`` and does check one (at least 16 characters, its
own, not the control plane's), before it reads the body. Every body is read
through ``envckpt.http.bodies``: over ``max_body_bytes`` (16 MiB by default)
it is refused with 413 while it streams, a body still arriving after 30 s
with 408, and a malformed one with ``422 invalid_request``; an unexpected
failure is ``500 checkpoint_error``. All of them carry the envelope.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from envckpt import logs
from envckpt.errors import ParticipantError
from envckpt.http.bodies import (
    BODY_READ_SECONDS,
    DATA_MAX_BODY_BYTES,
    BodyRefused,
    check_limits,
    parse_json,
    read_body,
)
from envckpt.http.credentials import refuse_credentials
from envckpt.http.tokens import require_strong_token
from envckpt.sim.kinds.agent import AgentServer
from envckpt.sim.kinds.model import PolicyModelServer
from envckpt.sim.kinds.resources import ToolServer
from envckpt.trainer.row_intake import RowReceiver, receive_row

Handler = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
Endpoint = Callable[[Request], Coroutine[Any, Any, JSONResponse]]


def _envelope(error: ParticipantError) -> JSONResponse:
    return JSONResponse(status_code=error.status, content=error.to_wire())


async def _json_body(request: Request, max_bytes: int) -> Any:
    return parse_json(await read_body(request, max_bytes=max_bytes, within=BODY_READ_SECONDS))


def _endpoint(server: str, route: str, handler: Handler, max_bytes: int) -> Endpoint:
    async def endpoint(request: Request) -> JSONResponse:
        try:
            body = await _json_body(request, max_bytes)
        except BodyRefused as refusal:
            return refusal.response()
        try:
            return JSONResponse(await handler(body))
        except ParticipantError as error:
            return _envelope(error)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this request itself is being cancelled
            # The handler's own work was stopped (a retire, or the server shutting down).
            return _envelope(ParticipantError("checkpoint_error", f"{route} was stopped"))
        except Exception as error:  # the envelope, never a bare 500 page
            logs.get_logger("envckpt.http").exception(
                "data call failed", server=server, route=route
            )
            return _envelope(
                ParticipantError("checkpoint_error", f"{type(error).__name__}: {error}")
            )

    endpoint.__name__ = f"data_{route}"
    return endpoint


def data_router(
    server: str, handlers: Mapping[str, Handler], *, max_body_bytes: int = DATA_MAX_BODY_BYTES
) -> APIRouter:
    """``POST /<route>`` for each ``route -> handler``; ``server`` names it in logs."""
    check_limits(max_body_bytes, BODY_READ_SECONDS)
    router = APIRouter(tags=[f"envckpt {server} data plane"])
    for route, handler in handlers.items():
        router.add_api_route(
            f"/{route}",
            _endpoint(server, route, handler, max_body_bytes),
            methods=["POST"],
            response_class=JSONResponse,
        )
    return router


def agent_router(agent: AgentServer, *, max_body_bytes: int = DATA_MAX_BODY_BYTES) -> APIRouter:
    """The agent's ``POST /run``."""
    return data_router(agent.core.server_name, {"run": agent.run}, max_body_bytes=max_body_bytes)


def model_router(
    model: PolicyModelServer, *, max_body_bytes: int = DATA_MAX_BODY_BYTES
) -> APIRouter:
    """The policy model's ``POST /generate`` and ``POST /finish``."""
    handlers = {"generate": model.generate, "finish": model.finish}
    return data_router(model.core.server_name, handlers, max_body_bytes=max_body_bytes)


def tool_router(tool: ToolServer, *, max_body_bytes: int = DATA_MAX_BODY_BYTES) -> APIRouter:
    """The tool server's ``POST /call`` and ``POST /finish``."""
    handlers = {"call": tool.call, "finish": tool.finish}
    return data_router(tool.core.server_name, handlers, max_body_bytes=max_body_bytes)


def rows_router(
    receive: RowReceiver,
    *,
    token: str,
    path: str = "/rows",
    max_body_bytes: int = DATA_MAX_BODY_BYTES,
) -> APIRouter:
    """The trainer's ``POST <path>`` taking ``{capture_key, staging_key, payload}`` rows.

    ``receive(capture_key, staging_key, payload)`` may be a plain function or a
    coroutine function; it answers ``{"staged": staging_key}``. Requires
    ``Authorization: Bearer <token>``, checked before the body is read (a
    token under 16 characters is refused here).
    """
    token = require_strong_token(token, what="rows token")
    check_limits(max_body_bytes, BODY_READ_SECONDS)

    async def endpoint(request: Request) -> JSONResponse:
        try:
            refusal = refuse_credentials(request, token)
            if refusal is not None:
                refusal.headers["connection"] = "close"  # the body is never read
                return refusal
            body = await _json_body(request, max_body_bytes)
            staged = await receive_row(body, receive)
        except BodyRefused as refusal:
            return refusal.response()
        except ParticipantError as error:
            return _envelope(error)
        except Exception as error:
            logs.get_logger("envckpt.http").exception("staging a row failed", path=path)
            return _envelope(
                ParticipantError("checkpoint_error", f"{type(error).__name__}: {error}")
            )
        return JSONResponse({"staged": staged})

    router = APIRouter(tags=["envckpt trainer rows"])
    router.add_api_route(path, endpoint, methods=["POST"], response_class=JSONResponse)
    return router
