"""The participant's control routes on a FastAPI app.

Every route checks the bearer token, then reads its raw body itself instead
of letting FastAPI parse a model, so every failure, a malformed body
included, is answered with the protocol's error envelope; ``edge.handle``
then validates the body and makes the call, exactly as for the in-process
transport::

    core = ParticipantCore(server_name="policy", kind="model", hooks=hooks)
    mount_participant(app, core, token=token)   # any FastAPI app, a nemo-gym server's too
    # GET  /ng-control/v1/checkpoint/status
    # POST /ng-control/v1/checkpoint/{prepare,renew,commit,restore,resume,retire,forget}

The bearer token is checked before the body is read (an unauthenticated
client cannot make the server buffer a large body) and is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, NoReturn

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from envckpt.errors import ParticipantError
from envckpt.participant import edge
from envckpt.participant.core import ParticipantCore
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX, ROUTES

MAX_BODY_BYTES = 64 * 1024 * 1024
# How often a mounted participant checks its lease when no call arrives.
DEFAULT_LEASE_CHECK_SECONDS = 1.0
# The app.state attribute naming the participant mounted on an app.
_MOUNTED = "envckpt_participant"
# What the edge sees in place of the secret once a request is authenticated.
_VERIFIED = "verified-by-envckpt-http-routes"


class _BadBody(Exception):
    """The request body is not one JSON value of acceptable size."""


def _reject_constant(name: str) -> NoReturn:
    # Python's json accepts NaN and Infinity; JSON does not.
    raise _BadBody(f"{name} is not valid JSON")


async def _read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise _BadBody("malformed Content-Length") from None
        if size > max_bytes:
            raise _BadBody(f"body of {size} bytes exceeds the limit of {max_bytes} bytes")
    chunks: list[bytes] = []
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > max_bytes:
                raise _BadBody(f"body exceeds the limit of {max_bytes} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise _BadBody("the client disconnected while sending the body") from None
    return b"".join(chunks)


# orjson reads an integer beyond 64 bits as a float; the standard library reads
# it exactly. A body with a run of 19 digits anywhere goes the standard way.
_DIGITS_AS_ZERO = bytes(ord("0") if 0x30 <= byte <= 0x39 else byte for byte in range(256))
_LONG_NUMBER = b"0" * 19


def _parse_json(raw: bytes) -> Any:
    """One JSON value; orjson when it reads the body as the standard library would.

    Whatever orjson refuses (NaN, other encodings, deep nesting...) the
    standard library decides, with its own message.
    """
    if not raw.strip():
        raise _BadBody("the body is empty; send a JSON object")
    if _LONG_NUMBER not in raw.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except _BadBody:
        raise
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise _BadBody(f"the body is not valid JSON: {error}") from None


def _envelope(error: ParticipantError) -> JSONResponse:
    return JSONResponse(status_code=error.status, content=error.to_wire())


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


def _endpoint(core: ParticipantCore, route: str, token: str, max_body_bytes: int) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        if not edge.authorized(request.headers.get("authorization"), token):
            return _envelope(ParticipantError("unauthorized", "missing or wrong bearer token"))
        body: Any = None
        # status takes no body; a wrong method is refused by the edge with the envelope.
        if request.method == "POST" and route != "status":
            try:
                body = _parse_json(await _read_body(request, max_body_bytes))
            except _BadBody as error:
                return _envelope(ParticipantError("invalid_request", str(error)))
        # Authenticated above. edge.handle logs unexpected failures with a
        # traceback, and a renderer that shows frame locals would print its
        # arguments, so it gets a stand-in credential rather than the secret.
        status, reply = await edge.handle(
            core,
            request.method,
            route,
            body,
            authorization=f"Bearer {_VERIFIED}",
            token=_VERIFIED,
        )
        return _reply(status, reply)

    endpoint.__name__ = f"checkpoint_{route}"
    return endpoint


def control_router(
    core: ParticipantCore, *, token: str, max_body_bytes: int = MAX_BODY_BYTES
) -> APIRouter:
    """The eight control routes of ``core`` under ``CHECKPOINT_ROUTE_PREFIX``.

    Raises ``ValueError`` for an empty token: a participant never serves its
    control routes unauthenticated.
    """
    router = APIRouter(prefix=CHECKPOINT_ROUTE_PREFIX, tags=["envckpt checkpoint control"])
    _add_routes(router, "", core, token=token, max_body_bytes=max_body_bytes)
    return router


def _add_routes(
    target: APIRouter | FastAPI,
    prefix: str,
    core: ParticipantCore,
    *,
    token: str,
    max_body_bytes: int,
) -> None:
    token = edge.check_token(token)
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    for route in ROUTES:
        # Both methods reach the endpoint, so a wrong one gets the envelope
        # (invalid_request) rather than FastAPI's bare 405.
        target.add_api_route(
            f"{prefix}/{route}",
            _endpoint(core, route, token, max_body_bytes),
            methods=["GET", "POST"],
            response_class=JSONResponse,
            include_in_schema=False,
        )


def mount_participant(
    app: FastAPI,
    core: ParticipantCore,
    *,
    token: str,
    max_body_bytes: int = MAX_BODY_BYTES,
    lease_check_seconds: float | None = DEFAULT_LEASE_CHECK_SECONDS,
) -> None:
    """Install ``core``'s control routes on ``app`` (a nemo-gym server's app included).

    With ``lease_check_seconds`` set, the app's lifespan also runs the core's
    lease watchdog, so a participant a coordinator abandoned reopens on its
    own even if no further call arrives. The watchdog sleeps on the core's
    clock: pass ``None`` for a core on a ``FakeClock``, whose sleep returns at
    once (the lease is still checked lazily on every call and admission).
    """
    if getattr(app.state, _MOUNTED, None) is not None:
        raise ValueError("this app already serves checkpoint control routes (one per server)")
    # On the app itself, not through include_router: FastAPI matches an
    # included router's routes through another layer, about 20 us a call.
    _add_routes(app, CHECKPOINT_ROUTE_PREFIX, core, token=token, max_body_bytes=max_body_bytes)
    setattr(app.state, _MOUNTED, core.server_name)
    if lease_check_seconds is not None:
        if lease_check_seconds <= 0:
            raise ValueError("lease_check_seconds must be positive")
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
