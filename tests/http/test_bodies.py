"""Tests for envckpt.http.bodies: bodies bounded in size and time, one JSON value, envelopes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envckpt.http import bodies
from envckpt.http.bodies import (
    BODY_READ_SECONDS,
    CONTROL_MAX_BODY_BYTES,
    DATA_MAX_BODY_BYTES,
    BodyRefused,
    check_limits,
    parse_json,
    read_body,
)
from envckpt.http.serve import ServerLimits, serve

from security.hostile_cases import CASES, Ctx, Declared, Streamed, resolve_body

LIMIT = 1000
JSON = {"Content-Type": "application/json"}


def echo_app(*, within: float = 5.0) -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> JSONResponse:
        try:
            value = parse_json(await read_body(request, max_bytes=LIMIT, within=within))
        except BodyRefused as refusal:
            return refusal.response()
        return JSONResponse({"got": value})

    return app


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with serve(echo_app()) as base:
        yield f"{base}/echo"


def test_the_defaults_are_the_documented_ones() -> None:
    """64 MiB for control bodies, 16 MiB for data bodies, 30 s to arrive."""
    assert CONTROL_MAX_BODY_BYTES == 64 * 1024 * 1024
    assert DATA_MAX_BODY_BYTES == 16 * 1024 * 1024
    assert BODY_READ_SECONDS == 30.0


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"not json", "not valid JSON"),
        (b'{"a": NaN}', "NaN"),
        (b'{"a": -Infinity}', "Infinity"),
        (b'{"a": 1e5000}', "out of range"),
        (b'{"a": 1, "a": 2}', "twice"),
        (b'{"a": {"b": 1, "b": 1}}', "twice"),
        (b'{"a": "\xff\xfe"}', "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (b'{"a": 1} {"b": 2}', "not valid JSON"),
        (b'{"a": ' + b"9" * 5000 + b"}", "not valid JSON"),
    ],
)
def test_parse_json_refuses_what_is_not_one_json_value(raw: bytes, says: str) -> None:
    """Empty, malformed, NaN, overflow, duplicate keys, bad UTF-8, deep nesting: 422."""
    with pytest.raises(BodyRefused) as caught:
        parse_json(raw)
    assert caught.value.status == 422 and says in caught.value.detail


def test_parse_json_accepts_json() -> None:
    """A JSON object, array or scalar comes back as Python values."""
    assert parse_json(b'{"a": [1, 2.5, "\\u00e9", null, true]}') == {"a": [1, 2.5, "é", None, True]}
    assert parse_json(b" 7 ") == 7


def test_check_limits_refuses_non_positive_limits() -> None:
    """A body limit below one byte, or a read time not above zero, is a configuration error."""
    check_limits(1, 0.1)
    for max_bytes, within in ((0, 1.0), (-5, 1.0), (True, 1.0), (10, 0.0), (10, -1.0)):
        with pytest.raises(ValueError):
            check_limits(max_bytes, within)  # type: ignore[arg-type]


async def test_a_body_within_the_limit_is_read(url: str) -> None:
    """Exactly at the limit is fine."""
    body = json.dumps({"pad": "x" * (LIMIT - 11)}).encode()
    assert len(body) == LIMIT
    async with httpx.AsyncClient() as client:
        reply = await client.post(url, content=body, headers=JSON)
    assert reply.status_code == 200 and len(reply.json()["got"]["pad"]) == LIMIT - 11


async def test_a_declared_oversize_body_is_refused_unread(url: str) -> None:
    """Content-Length over the limit: 413 envelope and the connection is closed."""
    async with httpx.AsyncClient() as client:
        reply = await client.post(url, content=b"x" * (LIMIT + 1), headers=JSON)
    assert reply.status_code == 413
    assert reply.json()["error"] == {
        "code": "invalid_request",
        "detail": f"body of {LIMIT + 1} bytes exceeds the limit of {LIMIT} bytes",
    }
    assert reply.headers["connection"] == "close"


async def raw_exchange(base: str, request: bytes) -> bytes:
    """Send ``request`` bytes on a fresh connection and read until the server closes it."""
    port = int(base.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


async def test_a_streamed_oversize_body_is_refused_while_it_streams() -> None:
    """A chunked body is refused as soon as the count passes the limit, before it ends, and the
    connection is closed so the rest is never read."""
    async with serve(echo_app()) as base:
        chunk = b"z" * (LIMIT + 100)
        request = (
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        )  # never terminated: the server must not wait for the end
        reply = await raw_exchange(base, request)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower()
    assert json.loads(body)["error"] == {
        "code": "invalid_request",
        "detail": f"body exceeds the limit of {LIMIT} bytes",
    }


async def test_a_body_that_stops_arriving_gets_408() -> None:
    """A client that declares a body and sends half of it gets 408 once the read time is up."""
    app_limits = ServerLimits(request_read_seconds=30.0)  # the app-level deadline acts first
    async with serve(echo_app(within=0.3), limits=app_limits) as base:
        half = (
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"a": '
        )
        reply = await raw_exchange(base, half)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    error: dict[str, Any] = json.loads(body)["error"]
    assert error["code"] == "invalid_request" and "0.3 s" in error["detail"]


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
     "multipart/form-data; boundary=x", "application/jsonx", "json", "text/json"],
)  # fmt: skip
async def test_a_body_not_declared_json_is_refused_unread(
    url: str, content_type: str | None
) -> None:
    """What a web page may send without asking first is 415, before the body is read."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    async with httpx.AsyncClient() as client:
        reply = await client.post(url, content=b'{"a": 1}', headers=headers)
    assert reply.status_code == 415 and reply.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "Application/JSON; charset=utf-8", "application/problem+json"],
)
async def test_json_media_types_are_accepted(url: str, content_type: str) -> None:
    """application/json with parameters, in any case, and +json types are JSON."""
    async with httpx.AsyncClient() as client:
        reply = await client.post(url, content=b'{"a": 1}', headers={"Content-Type": content_type})
    assert reply.json() == {"got": {"a": 1}}


def _reference(raw: bytes) -> tuple[str, str]:
    """The standard library path alone (what parse_json did before its orjson fast path)."""
    if not raw.strip():
        return ("refused", "")
    try:
        value = json.loads(
            raw.decode("utf-8"),
            parse_constant=bodies._reject_constant,
            parse_float=bodies._finite_float,
            object_pairs_hook=bodies._unique_keys,
        )
    except (ValueError, RecursionError):
        return ("refused", "")
    return ("ok", repr(value))


def _outcome(raw: bytes) -> tuple[str, str]:
    try:
        return ("ok", repr(parse_json(raw)))
    except BodyRefused as refusal:
        assert refusal.status == 422
        return ("refused", "")


def _encodings(body: Any) -> list[bytes]:
    """``body`` as the corpus sends it, compact, and in orjson's canonical form."""
    if isinstance(body, bytes):
        return [body]
    out = []
    for dump in (
        lambda: json.dumps(body).encode(),
        lambda: json.dumps(body, separators=(",", ":")).encode(),
        lambda: orjson.dumps(body),
    ):
        try:
            out.append(dump())
        except (TypeError, ValueError):
            continue
    return out


EDGE_BODIES = [
    b'{"a":1,"a":1}',
    b'{"a":{"b":[{"c":1,"c":1}]}}',
    b'{"a":1e400}',
    b'{"a":-1e400}',
    b'{"a":18446744073709551615}',
    b'{"a":18446744073709551616}',
    b'{"a":-9223372036854775809}',
    b'{"a":"\\ud800"}',
    b'{"a":-0}',
    b'{"a":-0.0}',
    b'{"a":1e16}',
    b'{"a":10000000000000000.0}',
    b'{"a":0.1}',
    b'{"a":"\xe2\x80\xa8"}',
    b'{"a":"\\u00e9"}',
    b'{"a":"\xc3\xa9"}',
    b'{"a":"\x7f"}',
    b'{"a":"\x01"}',
    b'{"a":NaN}',
    b'{"a":Infinity}',
    b"\xef\xbb\xbf{}",
    b'{"a":"\xff"}',
    b"[]",
    b'"x"',
    b"12",
    b"null",
    *(b"[" * depth + b"]" * depth for depth in (511, 512, 513, 600, 1000, 1020, 1030)),
    b'{"a":' * 700 + b"1" + b"}" * 700,
]


def test_parse_json_reads_every_hostile_and_edge_body_as_the_standard_library_does(
    tmp_path: Any,
) -> None:
    """The orjson fast path accepts and refuses exactly what the standard library path does,
    over the hostile corpus (as sent, compact, and orjson's form) and the parsers' edges."""
    ctx = Ctx(root=tmp_path / "root", outside=tmp_path / "outside", now=1_800_000_000.0)
    raws = [*EDGE_BODIES]
    for case in CASES:
        body = resolve_body(case, ctx)
        if not isinstance(body, Declared | Streamed) and body is not None:
            raws.extend(_encodings(body))
    assert len(raws) > 400
    fast = 0
    for raw in raws:
        assert _outcome(raw) == _reference(raw), raw[:120]
        fast += bodies._canonical(raw) is not bodies._NOT_CANONICAL
    assert fast > 100  # the fast path itself was compared, not only the fallback


class _Echo:
    """A tampered orjson whose writing always gives back the bytes it last read."""

    JSONDecodeError = orjson.JSONDecodeError
    JSONEncodeError = orjson.JSONEncodeError

    def __init__(self) -> None:
        self.raw = b""

    def loads(self, raw: bytes) -> Any:
        self.raw = raw
        return orjson.loads(raw)

    def dumps(self, value: Any) -> bytes:
        return self.raw


def test_the_comparison_catches_a_fast_path_without_its_round_trip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tampered (no write-back check), the fast path keeps one of two repeated keys, which
    the standard library path refuses, and the side-by-side comparison says so."""
    twice = b'{"a":1,"a":2}'
    assert _outcome(twice) == _reference(twice) == ("refused", "")
    monkeypatch.setattr(bodies, "orjson", _Echo())
    assert _outcome(twice) == ("ok", "{'a': 2}") != _reference(twice)
