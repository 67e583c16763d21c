"""Tests for envckpt.http.credentials: exactly one Authorization header, with the token."""

from __future__ import annotations

import json

import pytest
from fastapi import Request

from envckpt.http.credentials import refuse_credentials

TOKEN = "a-control-token-of-32-characters"


def request(*headers: tuple[str, str]) -> Request:
    """A request as the ASGI server hands it over, headers in the order sent."""
    raw = [(name.lower().encode(), value.encode()) for name, value in headers]
    return Request({"type": "http", "method": "POST", "path": "/x", "headers": raw})


def test_one_right_header_passes() -> None:
    """Exactly one Authorization: Bearer <token> is no refusal."""
    assert refuse_credentials(request(("Authorization", f"Bearer {TOKEN}")), TOKEN) is None


@pytest.mark.parametrize(
    "values",
    [
        (f"Bearer {TOKEN}", "Bearer wrong"),
        ("Bearer wrong", f"Bearer {TOKEN}"),
        (f"Bearer {TOKEN}", f"Bearer {TOKEN}"),
        (f"Bearer {TOKEN}", f"Bearer {TOKEN}", f"Bearer {TOKEN}"),
    ],
)
def test_more_than_one_header_is_400_whatever_they_hold(values: tuple[str, ...]) -> None:
    """Two or more headers: 400 invalid_request naming the count, before any comparison."""
    refusal = refuse_credentials(request(*(("Authorization", v) for v in values)), TOKEN)
    assert refusal is not None and refusal.status_code == 400
    error = json.loads(bytes(refusal.body))["error"]
    assert error == {
        "code": "invalid_request",
        "detail": f"{len(values)} Authorization headers: send exactly one bearer token",
    }


@pytest.mark.parametrize("headers", [(), (("Authorization", "Bearer wrong"),)])
def test_a_missing_or_wrong_token_is_401(headers: tuple[tuple[str, str], ...]) -> None:
    """No header, or one with another token: 401 unauthorized."""
    refusal = refuse_credentials(request(*headers), TOKEN)
    assert refusal is not None and refusal.status_code == 401
    assert json.loads(bytes(refusal.body))["error"]["code"] == "unauthorized"


def test_a_refusal_with_a_body_pending_closes_the_connection() -> None:
    """With Content-Length sent, the unread body ends the connection; without, it stays."""
    duplicated = [("Authorization", f"Bearer {TOKEN}")] * 2
    with_body = refuse_credentials(request(*duplicated, ("Content-Length", "10")), TOKEN)
    assert with_body is not None and with_body.headers["connection"] == "close"
    without = refuse_credentials(request(*duplicated), TOKEN)
    assert without is not None and "connection" not in without.headers
