"""The bearer credential of a request to one of envckpt's servers: one header, the token.

    refusal = refuse_credentials(request, token)
    if refusal is not None:
        return refusal        # 400 two Authorization headers; 401 a missing or wrong one

A request with more than one ``Authorization`` header is refused with 400
and the ``invalid_request`` envelope before any token is compared, even when
one of them is right: a proxy, a framework and this check may each read a
different one of them, so which credential the request carries is
ambiguous, and an ambiguous credential authenticates nobody. The token
itself is compared in constant time (``participant.edge.authorized``).

A refusal that leaves a body unread closes the connection: the server would
otherwise keep reading (and discarding) whatever the client sends.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from envckpt.errors import ParticipantError
from envckpt.http.apps import envelope_response
from envckpt.participant import edge

AUTHORIZATION = "authorization"


def refuse_credentials(request: Request, token: str) -> JSONResponse | None:
    """None when ``request`` carries exactly one ``Authorization: Bearer <token>``."""
    presented = request.headers.getlist(AUTHORIZATION)
    if len(presented) > 1:
        refusal = envelope_response(
            400, f"{len(presented)} Authorization headers: send exactly one bearer token"
        )
    elif not edge.authorized(presented[0] if presented else None, token):
        error = ParticipantError("unauthorized", "missing or wrong bearer token")
        refusal = JSONResponse(status_code=error.status, content=error.to_wire())
    else:
        return None
    return closing(request, refusal)


def closing(request: Request, response: JSONResponse) -> JSONResponse:
    """``response``, closing the connection when the request's body is left unread."""
    if "content-length" in request.headers or "transfer-encoding" in request.headers:
        response.headers["connection"] = "close"
    return response
