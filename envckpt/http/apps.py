"""The FastAPI apps envckpt builds: nothing served by accident, every refusal an envelope.

    app = new_app()                    # no /docs, /redoc, /openapi.json
    app = new_app(expose_docs=True)    # FastAPI's interactive docs, on request
    hide_docs(host_app)                # the same for an app someone else built

On an app from ``new_app`` every HTTP error FastAPI or Starlette raises
(404 for an unknown path, 405 for a wrong method, a request FastAPI could not
validate) is answered with the protocol's error envelope
``{"error": {"code": "invalid_request", "detail"}}`` and its own status, so a
client never has to parse a second error shape. A host's own app keeps its
handlers: ``mount_participant`` covers its own prefix itself.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from envckpt.protocol import ErrorCode, error_envelope

DOC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})


def envelope_response(
    status: int, detail: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """``invalid_request`` in the protocol's envelope, with ``status``."""
    return JSONResponse(
        status_code=status,
        content=error_envelope(ErrorCode.INVALID_REQUEST, detail),
        headers=headers,
    )


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    del request
    detail = error.detail if isinstance(error.detail, str) else "request refused"
    return envelope_response(error.status_code, detail, dict(error.headers or {}))


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    del request
    detail = str(error)[:500] if error.args else "invalid request"
    return envelope_response(422, detail)


def new_app(*, expose_docs: bool = False, **fastapi_options: Any) -> FastAPI:
    """A FastAPI app without the docs routes (unless asked) and with envelope errors."""
    if not expose_docs:
        fastapi_options.update(docs_url=None, redoc_url=None, openapi_url=None)
    app = FastAPI(**fastapi_options)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    return app


def hide_docs(app: FastAPI) -> FastAPI:
    """Remove FastAPI's docs routes from an app built elsewhere (a nemo-gym server's)."""
    app.router.routes[:] = [
        route for route in app.router.routes if getattr(route, "path", None) not in DOC_PATHS
    ]
    app.openapi_url = app.docs_url = app.redoc_url = None
    return app
