"""Reading one request body: bounded in size and time, one JSON value, refusals as envelopes.

Control routes and data routes read their bodies through here, so both refuse
the same way, while reading, before a large or slow body is buffered::

    try:
        body = parse_json(await read_body(request, max_bytes=limit, within=30.0))
    except BodyRefused as refusal:
        return refusal.response()      # 413, 408 or 422, the protocol's envelope

* not declared JSON (``Content-Type`` missing, or not ``application/json`` or
  ``application/*+json``): ``415``, unread. A browser may send a cross-origin
  "simple" request (``text/plain``, form data, no type) to a server on
  loopback without asking first; a JSON type makes it ask, and the servers
  never say yes (no CORS), so a web page cannot drive these routes;
* larger than ``max_bytes`` (declared in ``Content-Length`` or counted while
  streaming): ``413``, and the connection is closed, so the rest is never read;
* not complete ``within`` seconds of the first read: ``408``, connection closed;
* not exactly one JSON value (NaN, Infinity, a number out of float range,
  invalid UTF-8, a duplicate key, nesting past the parser): ``422``.

Every refusal carries ``{"error": {"code": "invalid_request", "detail"}}``.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any, NoReturn

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from envckpt.protocol import ErrorCode, error_envelope

# Control bodies: a commit or restore may name up to a million episodes.
CONTROL_MAX_BODY_BYTES = 64 * 1024 * 1024
# Data-plane bodies (rollout calls, token rows): far smaller in practice.
DATA_MAX_BODY_BYTES = 16 * 1024 * 1024
# A body still arriving this long after the handler started reading is refused.
BODY_READ_SECONDS = 30.0


class BodyRefused(Exception):
    """The request body was refused; ``response()`` is the reply."""

    def __init__(self, status: int, detail: str, *, close: bool = False) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.close = close

    def response(self) -> JSONResponse:
        """The refusal in the protocol's envelope (closing the connection if unread)."""
        headers = {"connection": "close"} if self.close else None
        return JSONResponse(
            status_code=self.status,
            content=error_envelope(ErrorCode.INVALID_REQUEST, self.detail),
            headers=headers,
        )


def _too_large(detail: str) -> BodyRefused:
    return BodyRefused(413, detail, close=True)


def check_limits(max_bytes: int, within: float) -> None:
    """Refuse a non-positive body limit or read time at configuration."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_body_bytes must be a positive integer, got {max_bytes!r}")
    if not within > 0:
        raise ValueError(f"the body read time must be positive, got {within!r}")


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


async def read_body(request: Request, *, max_bytes: int, within: float) -> bytes:
    """The whole body, or ``BodyRefused`` (type, size while streaming, time, disconnect)."""
    if not _is_json(request.headers.get("content-type")):
        raise BodyRefused(415, "send the body as Content-Type: application/json", close=True)
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BodyRefused(400, "malformed Content-Length", close=True)
        if int(declared) > max_bytes:
            raise _too_large(f"body of {declared} bytes exceeds the limit of {max_bytes} bytes")
    chunks: list[bytes] = []
    received = 0
    try:
        async with asyncio.timeout(within):
            async for chunk in request.stream():
                received += len(chunk)
                if received > max_bytes:
                    raise _too_large(f"body exceeds the limit of {max_bytes} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyRefused(408, f"the body did not arrive within {within:g} s", close=True) from None
    except ClientDisconnect:
        raise BodyRefused(400, "the client disconnected while sending the body") from None
    return b"".join(chunks)


def _reject_constant(name: str) -> NoReturn:
    # Python's json accepts NaN and Infinity; JSON does not.
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    # 1e5000 parses to infinity without passing parse_constant.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Two parsers may keep different copies of a repeated key: refuse it.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the key {key!r} appears twice")
        result[key] = value
    return result


_NOT_CANONICAL = object()


def _canonical(raw: bytes) -> Any:
    """orjson's reading of ``raw`` if orjson writes it back byte for byte, else a marker.

    A body in orjson's own compact form (what envckpt's client sends) is read
    in a quarter of the standard library's time. Writing the value back to
    the very same bytes proves it is what the standard library path below
    reads: a repeated key, a number out of float range (written back as
    ``null``), any number or string not in its shortest form, whitespace or
    an escape would all come back different, and everything orjson refuses
    goes to that path too, which then accepts or refuses it as before. Deep
    nesting as well: orjson writes at most 254 levels, far below the depth
    at which the standard library gives up (its recursion limit).
    """
    try:
        value = orjson.loads(raw)
        same = orjson.dumps(value) == raw
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return _NOT_CANONICAL
    return value if same else _NOT_CANONICAL


def parse_json(raw: bytes) -> Any:
    """``raw`` as one JSON value, or ``BodyRefused`` (422)."""
    if not raw.strip():
        raise BodyRefused(422, "the body is empty; send a JSON object")
    fast = _canonical(raw)
    if fast is not _NOT_CANONICAL:
        return fast
    try:
        return json.loads(
            raw.decode("utf-8"),
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise BodyRefused(422, f"the body is not valid JSON: {error}") from None
