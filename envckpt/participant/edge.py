"""One control request in, one ``(status, body)`` out: the transport-neutral edge.

Both transports call ``handle``: the in-process deployment directly, the
FastAPI router from its route functions. Authentication, body validation,
the participant's bounds (``confinement``: checkpoint directories under its
root, deadlines at most ``max_lease_seconds`` ahead) and the error envelope
therefore behave the same on both.

    status, body = await handle(core, "POST", "prepare", {...}, authorization="Bearer t", token="t")
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from envckpt.errors import ParticipantError
from envckpt.participant.core import ParticipantCore
from envckpt.protocol import (
    REQUEST_MODELS,
    ROUTES,
    CommitRequest,
    ControlRequest,
    ForgetRequest,
    RestoreRequest,
    RetireRequest,
)


def check_token(token: str) -> str:
    """Refuse to serve control routes without a secret."""
    if not isinstance(token, str) or not token:
        raise ValueError("a participant needs a non-empty bearer token to install its routes")
    return token


def authorized(authorization: str | None, token: str) -> bool:
    """Constant-time check of an ``Authorization: Bearer <token>`` header."""
    if not token or not authorization or not authorization.startswith("Bearer "):
        return False  # an empty secret authorises nobody, not everybody
    presented = authorization[len("Bearer ") :].encode()
    return hmac.compare_digest(presented, token.encode())


def describe_validation(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(part) for part in item.get("loc", ()))
        parts.append(f"{where or 'body'}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


async def handle(
    core: ParticipantCore,
    method: str,
    route: str,
    body: Any,
    *,
    authorization: str | None,
    token: str,
) -> tuple[int, dict[str, Any]]:
    """Authenticate, validate and run one control request; never raises."""
    if not authorized(authorization, token):
        return _refusal(ParticipantError("unauthorized", "missing or wrong bearer token"))
    # Authenticated. The secret stays in this frame only: the request runs in
    # a frame that never held it, so a logged traceback (structlog renders
    # frame locals) cannot show the token.
    del authorization, token
    try:
        request = _validated(core, method, route, body)
    except ParticipantError as error:
        return _refusal(error)
    except Exception as error:  # the envelope, never a bare 500 page
        return _unexpected(core, route, error)
    # The validated request is all the call needs: the parsed body (a dict
    # per episode a commit names) is freed now rather than held for the
    # whole call.
    del body
    return await _called(core, route, request)


def _refusal(error: ParticipantError) -> tuple[int, dict[str, Any]]:
    return error.status, error.to_wire()


def validate(core: ParticipantCore, method: str, route: str, body: Any) -> ControlRequest | None:
    """What ``handle`` checks before calling the core: ``ParticipantError`` if refused.

    A multi-worker server checks a request once here before sending it to
    every worker, so a bad request is refused as one process would refuse it.
    """
    return _validated(core, method, route, body)


def _validated(core: ParticipantCore, method: str, route: str, body: Any) -> ControlRequest | None:
    """The request ``body`` makes for ``route`` (None for status, which has none), in
    the participant's bounds; ``ParticipantError`` (``invalid_request``) otherwise."""
    if route not in ROUTES:
        raise ParticipantError("invalid_request", f"unknown route {route!r}")
    if route == "status":
        if method != "GET":
            raise ParticipantError("invalid_request", "status is a GET route")
        return None
    if method != "POST":
        raise ParticipantError("invalid_request", f"{route} is a POST route")
    if not isinstance(body, Mapping):
        raise ParticipantError("invalid_request", "the body must be a JSON object")
    try:
        request = REQUEST_MODELS[route].model_validate(dict(body))
    except ValidationError as error:
        raise ParticipantError("invalid_request", describe_validation(error)) from error
    check_bounds(core, request)
    return request


async def _called(
    core: ParticipantCore, route: str, request: ControlRequest | None
) -> tuple[int, dict[str, Any]]:
    try:
        if request is None:
            return 200, await core.status()
        return 200, await _call(core, route, request)
    except ParticipantError as error:
        return _refusal(error)
    except Exception as error:  # the envelope, never a bare 500 page
        return _unexpected(core, route, error)


def _unexpected(core: ParticipantCore, route: str, error: Exception) -> tuple[int, dict[str, Any]]:
    """An error no rule names: logged with its traceback, answered as ``checkpoint_error``."""
    core.log.exception("control call failed", route=route)
    return _refusal(ParticipantError("checkpoint_error", f"{type(error).__name__}: {error}"))


def check_bounds(core: ParticipantCore, request: ControlRequest) -> None:
    """The request against the participant's bounds, before any state or file is touched."""
    core.bounds.check_deadline(request.deadline_ts, now=core.clock.now())
    if isinstance(request, CommitRequest | RestoreRequest):
        core.bounds.check_checkpoint_dir(
            request.checkpoint_dir, kind=core.kind, instance=core.instance
        )


async def _call(core: ParticipantCore, route: str, request: ControlRequest) -> dict[str, Any]:
    cid, deadline_ts = request.checkpoint_id, request.deadline_ts
    if isinstance(request, CommitRequest):
        return await core.commit(
            cid,
            deadline_ts=deadline_ts,
            checkpoint_dir=request.checkpoint_dir,
            episode_ids=request.episode_ids,
            stop=request.stop,
        )
    if isinstance(request, RestoreRequest):
        return await core.restore(
            cid,
            deadline_ts=deadline_ts,
            checkpoint_dir=request.checkpoint_dir,
            episode_ids=request.episode_ids,
        )
    if isinstance(request, RetireRequest):
        return await core.retire(cid, deadline_ts=deadline_ts, episode_ids=request.episode_ids)
    if isinstance(request, ForgetRequest):
        return await core.forget(cid, deadline_ts=deadline_ts, rollout_ids=request.rollout_ids)
    if route == "prepare":
        return await core.prepare(cid, deadline_ts=deadline_ts)
    if route == "renew":
        return await core.renew(cid, deadline_ts=deadline_ts)
    return await core.resume(cid, deadline_ts=deadline_ts)
