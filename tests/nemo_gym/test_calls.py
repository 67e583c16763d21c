"""Tests of how an agent's calls turn error replies into errors."""

from __future__ import annotations

import json
from http.cookies import SimpleCookie
from typing import Any

import pytest

pytest.importorskip("nemo_gym.server_utils")

from envckpt.errors import ParticipantError
from envckpt.nemo_gym.calls import checked, response_cookies


class Reply:
    """The parts of an aiohttp ClientResponse the helpers read."""

    def __init__(self, status: int, body: Any, cookies: str = "") -> None:
        self.status = status
        self.ok = status < 400
        self._body = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.cookies: SimpleCookie = SimpleCookie(cookies)
        self.request_info = None
        self.history = ()
        self.headers: dict[str, str] = {}
        self.reason = "x"
        self.url = "http://x"

    async def read(self) -> bytes:
        return self._body

    def raise_for_status(self) -> None:
        raise RuntimeError(f"HTTP {self.status}")


async def test_an_envelope_reply_raises_its_participant_error() -> None:
    """A gate's 409 becomes admission_closed, so the run parks instead of failing."""
    with pytest.raises(ParticipantError) as caught:
        await checked(Reply(409, {"error": {"code": "admission_closed", "detail": "open"}}))
    assert caught.value.code == "admission_closed"
    await checked(Reply(200, {}))


async def test_other_error_replies_raise_as_upstream_does() -> None:
    """Any other error reply goes through nemo-gym's raise_for_status (not a ParticipantError)."""
    with pytest.raises(Exception) as caught:
        await checked(Reply(500, b"boom"))
    assert not isinstance(caught.value, ParticipantError)


def test_cookies_by_name() -> None:
    """Set-Cookie values by name, as upstream forwards them."""
    assert response_cookies(Reply(200, {}, "a=1; Path=/, b=2")) == {"a": "1", "b": "2"}
