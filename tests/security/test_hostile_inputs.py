"""The hostile-input corpus (hostile_cases.py) against a real ``python -m envckpt.sim.server``.

Each row is sent over real HTTP (or a raw socket, for bodies that must never
be sent whole); the reply must have the row's status and the protocol's
envelope with its code, and afterwards every participant's ``status`` must
be exactly what it was before the corpus started, and the trainer's rows
endpoint must have received nothing.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from security.conftest import Target
from security.hostile_cases import (
    CASES,
    PARTICIPANTS,
    ROWS,
    Case,
    Ctx,
    Declared,
    Streamed,
    resolve_body,
)

BLOCK = 1024 * 1024
# A refusal of a body it never reads closes the connection at once.
CLOSE_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]
    raw: bytes
    seconds: float = 0.0  # until the server closed (raw-socket rows only)


def judge(case: Case, reply: Reply, *, secret: str) -> list[str]:
    """Every way ``reply`` breaks the row (status, envelope, code), or []."""
    problems = []
    if reply.status != case.status:
        problems.append(f"status {reply.status}, expected {case.status}: {reply.raw[:300]!r}")
    if not reply.headers.get("content-type", "").startswith("application/json"):
        problems.append(f"not JSON: {reply.headers}")
    if reply.seconds > CLOSE_SECONDS:
        problems.append(f"the connection stayed open {reply.seconds:.1f} s")
    if case.method == "HEAD":  # a HEAD reply never has a body
        return problems
    try:
        body = json.loads(reply.raw)
    except ValueError:
        return [*problems, f"no JSON body: {reply.raw[:300]!r}"]
    error = body.get("error") if isinstance(body, dict) else None
    if set(body) != {"error"} or not isinstance(error, dict) or set(error) != {"code", "detail"}:
        return [*problems, f"not the envelope: {body}"]
    if error["code"] != case.code:
        problems.append(f"code {error['code']!r}, expected {case.code!r}")
    if not isinstance(error["detail"], str) or len(error["detail"]) > 2000:
        problems.append("the detail is not a short text")
    elif secret in error["detail"]:
        problems.append("the detail shows the token")
    return problems


def statuses(target: Target, http: httpx.Client) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {target.control_token}"}
    replies = {
        server: http.get(f"{target.urls[server]}/ng-control/v1/checkpoint/status", headers=headers)
        for server in PARTICIPANTS
    }
    assert all(reply.status_code == 200 for reply in replies.values()), replies
    return {server: reply.json() for server, reply in replies.items()}


@pytest.fixture(scope="module")
def baseline(target: Target, http: httpx.Client) -> dict[str, Any]:
    before = statuses(target, http)
    assert {s["phase"] for s in before.values()} == {"idle"}
    return before


def authorizations(case: Case, target: Target) -> list[str]:
    """The Authorization header values the row sends, in order."""
    if case.auth.startswith("twice:"):
        first = Case(case.server, case.method, case.path, None, 0, "", auth=case.auth[6:])
        return [*authorizations(first, target), "Bearer wrong-token-0123456789"]
    token = authorization(case, target)
    return [] if token is None else [token]


def authorization(case: Case, target: Target) -> str | None:
    if case.auth == "none":
        return None
    if case.auth == "control":
        return f"Bearer {target.control_token}"
    if case.auth == "rows":
        return f"Bearer {target.rows_token}"
    template = case.auth.removeprefix("header:")
    return template.format(control=target.control_token, control_prefix=target.control_token[:15])


def url_of(case: Case, target: Target) -> str:
    base = (
        target.rows_url.removesuffix("/rows") if case.server == ROWS else target.urls[case.server]
    )
    return f"{base}{case.path}"


async def _raw(url: str, head: dict[str, str], body: Declared | Streamed) -> Reply:
    """Send headers and (for Streamed) an unterminated chunked body; read until closed."""
    host_port, _, path = url.removeprefix("http://").partition("/")
    host, _, port = host_port.partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    lines = [f"POST /{path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in head.items()]
    if isinstance(body, Declared):
        lines.append(f"Content-Length: {body.size}")
    else:
        lines.append("Transfer-Encoding: chunked")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    try:
        sent = 0
        while isinstance(body, Streamed) and sent < body.size:
            piece = min(BLOCK, body.size - sent)
            writer.write(f"{piece:x}\r\n".encode() + b" " * piece + b"\r\n")
            await writer.drain()
            sent += piece
        started = time.monotonic()
        reply = await asyncio.wait_for(reader.read(), timeout=60)
        seconds = time.monotonic() - started
    finally:
        writer.close()
    head_bytes, _, rest = reply.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return Reply(int(lines[0].split(" ", 2)[1]), headers, rest, seconds)


def send(case: Case, target: Target, http: httpx.Client) -> Reply:
    """The reply to one row."""
    ctx = Ctx(target.root, target.outside, time.time())
    body = resolve_body(case, ctx)
    headers = [("Authorization", token) for token in authorizations(case, target)]
    if case.content_type is not None and body is not None:
        headers.append(("Content-Type", case.content_type))
    if isinstance(body, Declared | Streamed):
        return asyncio.run(_raw(url_of(case, target), dict(headers), body))
    content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    reply = http.request(case.method, url_of(case, target), content=content, headers=headers)
    return Reply(reply.status_code, dict(reply.headers), reply.content)


def test_the_corpus_is_large_and_covers_every_server() -> None:
    """At least 200 rows, touching every participant, the judge and the rows endpoint."""
    assert len(CASES) >= 200
    assert {case.server for case in CASES} >= {*PARTICIPANTS, "judge_model", ROWS}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input_is_refused_with_the_envelope_and_changes_nothing(
    case: Case, target: Target, http: httpx.Client, baseline: dict[str, Any]
) -> None:
    """The row's status, the envelope with its code, and every status unchanged afterwards."""
    reply = send(case, target, http)
    assert judge(case, reply, secret=target.control_token) == []
    assert statuses(target, http) == baseline
    assert target.rows == []
    assert target.process is not None and target.process.poll() is None


def test_the_verdict_fails_tampered_replies() -> None:
    """judge accepts the right refusal and reports each way a reply can be wrong."""
    case = next(c for c in CASES if c.note == "unknown field" and c.path.endswith("/prepare"))
    json_type = {"content-type": "application/json"}
    right = Reply(422, json_type, b'{"error": {"code": "invalid_request", "detail": "x"}}')
    assert judge(case, right, secret="s" * 20) == []
    tampered = [
        Reply(200, json_type, right.raw),
        Reply(422, {"content-type": "text/plain"}, right.raw),
        Reply(422, json_type, b'{"detail": "Field required"}'),
        Reply(422, json_type, b"Internal Server Error"),
        Reply(422, json_type, b'{"error": {"code": "checkpoint_error", "detail": "x"}}'),
        Reply(422, json_type, b'{"error": {"code": "invalid_request", "detail": "x"}, "a": 1}'),
        Reply(422, json_type, b'{"error": {"code": "invalid_request", "detail": "' + b"s" * 20
              + b'"}}'),
        Reply(422, json_type, right.raw, seconds=CLOSE_SECONDS + 1),
    ]  # fmt: skip
    for reply in tampered:
        assert judge(case, reply, secret="s" * 20), reply
