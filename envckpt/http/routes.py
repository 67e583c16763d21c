"""The participant's control routes on a FastAPI app.

Every request under the control prefix is answered here, and always with the
protocol's JSON (a reply or the error envelope): the bearer token is checked
first (``credentials``: two ``Authorization`` headers are 400, a missing or
wrong token 401), then the method (405), then the body is read within its size and time
limits (413, 408) and parsed (422), and ``edge.handle`` validates it, checks
it against the participant's bounds and makes the call, exactly as for the
in-process transport::

    core = ParticipantCore(server_name="policy", kind="model", hooks=hooks)
    mount_participant(app, core, token=token, checkpoint_root="/data/ckpt")
    # GET  /ng-control/v1/checkpoint/status
    # POST /ng-control/v1/checkpoint/{prepare,renew,commit,restore,resume,retire,forget}
    # anything else under the prefix: 401, or 404/405 in the envelope

A participant serves its routes only with a token of at least 16 characters
and only when told where checkpoints may go: ``checkpoint_root`` (commit and
restore directories must resolve under it), or an explicit
``unconfined=True`` for a host that trusts every holder of the token. The
token is checked before the body is read (an unauthenticated client cannot
make the server buffer a large body) and is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from envckpt.http.apps import envelope_response
from envckpt.http.bodies import (
    BODY_READ_SECONDS,
    CONTROL_MAX_BODY_BYTES,
    BodyRefused,
    check_limits,
    parse_json,
    read_body,
)
from envckpt.http.credentials import closing, refuse_credentials
from envckpt.http.tokens import require_strong_token
from envckpt.participant import edge
from envckpt.participant.confinement import RequestBounds
from envckpt.participant.core import ParticipantCore
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX, ROUTES, Route

MAX_BODY_BYTES = CONTROL_MAX_BODY_BYTES
# How often a mounted participant checks its lease when no call arrives.
DEFAULT_LEASE_CHECK_SECONDS = 1.0
# The app.state attribute naming the participant mounted on an app.
_MOUNTED = "envckpt_participant"
# What the edge sees in place of the secret once a request is authenticated.
_VERIFIED = "verified-by-envckpt-http-routes"
# Every method reaches the endpoints, so a wrong one is answered here.
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _reply(status: int, content: dict[str, Any]) -> Response:
    """``content`` as JSONResponse would send it, encoded by orjson when that is the same.

    A commit reply lists every exported episode: orjson takes a tenth of the
    standard library's time. orjson writes NaN as ``null`` and refuses what
    the standard library may write (integers beyond 64 bits): then, and for
    any reply holding ``null``, JSONResponse encodes it (and raises for NaN).
    """
    try:
        body = orjson.dumps(content)
    except TypeError:
        return JSONResponse(status_code=status, content=content)
    if b"null" in body:
        return JSONResponse(status_code=status, content=content)
    return Response(body, status_code=status, media_type="application/json")


Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]
# (method, route, parsed body or None) -> (status, reply) of one authenticated
# control request: the core's own edge, or a multi-worker server's fan-out.
Dispatch = Callable[[str, str, Any], Awaitable[tuple[int, dict[str, Any]]]]


def core_dispatch(core: ParticipantCore) -> Dispatch:
    """Dispatch to ``core`` through ``edge.handle`` (what a one-process server does)."""

    def dispatch(method: str, route: str, body: Any) -> Awaitable[tuple[int, dict[str, Any]]]:
        # Authenticated by the route already. edge.handle logs unexpected
        # failures with a traceback, and a renderer that shows frame locals
        # would print its arguments, so it gets a stand-in credential rather
        # than the secret.
        return edge.handle(
            core, method, route, body, authorization=f"Bearer {_VERIFIED}", token=_VERIFIED
        )

    return dispatch


def _endpoint(route: Route, token: str, limits: tuple[int, float], dispatch: Dispatch) -> Endpoint:
    max_bytes, within = limits

    async def endpoint(request: Request) -> Response:
        refusal = refuse_credentials(request, token)
        if refusal is not None:
            return refusal
        if request.method != route.method:
            detail = f"{route.value} is a {route.method} route"
            return closing(request, envelope_response(405, detail, {"allow": route.method}))
        body: Any = None
        if route.method == "POST":
            try:
                body = parse_json(await read_body(request, max_bytes=max_bytes, within=within))
            except BodyRefused as refused:
                return refused.response()
        call = dispatch(request.method, route.value, body)
        # The call holds the body until it is validated, then lets it go.
        del body
        status, reply = await call
        return _reply(status, reply)

    endpoint.__name__ = f"checkpoint_{route.value}"
    return endpoint


def _unknown_route(token: str) -> Endpoint:
    async def unknown(request: Request) -> JSONResponse:
        refusal = refuse_credentials(request, token)
        if refusal is not None:
            return refusal
        return closing(request, envelope_response(404, "no such control route"))

    return unknown


def control_router(
    core: ParticipantCore,
    *,
    token: str,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_read_seconds: float = BODY_READ_SECONDS,
    unconfined: bool = False,
) -> APIRouter:
    """The control routes of ``core`` under ``CHECKPOINT_ROUTE_PREFIX``, and its 404s.

    Raises ``ValueError`` for a token under 16 characters, and for a core
    without a checkpoint root unless ``unconfined`` says that is intended.
    """
    token = _checked(core, token, (max_body_bytes, body_read_seconds), unconfined=unconfined)
    router = APIRouter(prefix=CHECKPOINT_ROUTE_PREFIX, tags=["envckpt checkpoint control"])
    _add_routes(router, "", token, (max_body_bytes, body_read_seconds), core_dispatch(core))
    return router


def _checked(
    core: ParticipantCore, token: str, limits: tuple[int, float], *, unconfined: bool
) -> str:
    """The token, once it, the limits and the core's confinement are acceptable."""
    token = require_strong_token(token, what="control token")
    check_limits(*limits)
    if not core.bounds.confined and not unconfined:
        raise ValueError(
            f"participant {core.server_name!r} has no checkpoint root: pass checkpoint_root= "
            "(where commit and restore may name directories), or unconfined=True"
        )
    return token


def _add_routes(
    target: APIRouter | FastAPI,
    prefix: str,
    token: str,
    limits: tuple[int, float],
    dispatch: Dispatch,
) -> None:
    for route in ROUTES:
        target.add_api_route(
            f"{prefix}/{route.value}",
            _endpoint(route, token, limits, dispatch),
            methods=_METHODS,
            response_class=JSONResponse,
            include_in_schema=False,
        )
    unknown = _unknown_route(token)
    for path in ("", "/{rest:path}"):
        target.add_api_route(
            f"{prefix}{path}",
            unknown,
            methods=_METHODS,
            response_class=JSONResponse,
            include_in_schema=False,
        )


def confine(
    core: ParticipantCore, checkpoint_root: str | os.PathLike[str] | None, *, unconfined: bool
) -> None:
    """Give ``core`` its checkpoint root (once), or check that running without one is intended."""
    if checkpoint_root is None:
        if core.bounds.confined and unconfined:
            raise ValueError("unconfined=True, but the participant has a checkpoint root")
        return
    if unconfined:
        raise ValueError("pass checkpoint_root or unconfined=True, not both")
    wanted = RequestBounds.under(checkpoint_root, max_lease_seconds=core.bounds.max_lease_seconds)
    current = core.bounds.checkpoint_root
    if current is not None and current != wanted.checkpoint_root:
        raise ValueError(f"the participant is already confined to {current}")
    core.bounds = wanted


def mount_participant(
    app: FastAPI,
    core: ParticipantCore,
    *,
    token: str,
    checkpoint_root: str | os.PathLike[str] | None = None,
    unconfined: bool = False,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_read_seconds: float = BODY_READ_SECONDS,
    lease_check_seconds: float | None = DEFAULT_LEASE_CHECK_SECONDS,
    dispatch: Dispatch | None = None,
) -> None:
    """Install ``core``'s control routes on ``app`` (a nemo-gym server's app included).

    ``checkpoint_root`` confines commit and restore to directories under it
    (the core may already have one from ``ParticipantCore(checkpoint_root=...)``);
    without any, the call is refused unless ``unconfined=True``.

    With ``lease_check_seconds`` set, the app's lifespan also runs the core's
    lease watchdog, so a participant a coordinator abandoned reopens on its
    own even if no further call arrives. The watchdog sleeps on the core's
    clock: pass ``None`` for a core on a ``FakeClock``, whose sleep returns at
    once (the lease is still checked lazily on every call and admission).

    ``dispatch`` replaces the core's own edge as what an authenticated request
    calls: a multi-worker server fans each request out to every worker
    (``envckpt.http.workers``).
    """
    if getattr(app.state, _MOUNTED, None) is not None:
        raise ValueError("this app already serves checkpoint control routes (one per server)")
    require_strong_token(token, what="control token")
    if lease_check_seconds is not None and lease_check_seconds <= 0:
        raise ValueError("lease_check_seconds must be positive")
    confine(core, checkpoint_root, unconfined=unconfined)
    # Added to the app itself, not through include_router: FastAPI matches an
    # included router's routes through another layer (about 20 us a call).
    limits = (max_body_bytes, body_read_seconds)
    token = _checked(core, token, limits, unconfined=unconfined)
    _add_routes(app, CHECKPOINT_ROUTE_PREFIX, token, limits, dispatch or core_dispatch(core))
    setattr(app.state, _MOUNTED, core.server_name)
    if lease_check_seconds is not None:
        _run_during_lifespan(app, lambda: core.run_lease_watchdog(lease_check_seconds))


def _run_during_lifespan(app: FastAPI, background: Callable[[], Coroutine[Any, Any, None]]) -> None:
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(lifespan_app: Any) -> AsyncIterator[Any]:
        task = asyncio.create_task(background())
        try:
            async with inner(lifespan_app) as state:
                yield state
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.router.lifespan_context = lifespan
