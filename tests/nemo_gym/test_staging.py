"""Tests of shipping token rows from the model server to the trainer."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from envckpt.errors import ParticipantError
from envckpt.http.serve import serve
from envckpt.nemo_gym.staging import HttpRowStager, staging_router

TOKEN = "rows-token-123-4567"


def rows_app(received: dict[str, tuple[str, str]], *, refuse: str | None = None) -> FastAPI:
    async def receive(capture_key: str, staging_key: str, payload: str) -> None:
        if refuse:
            raise ParticipantError(refuse, "refused")
        received[staging_key] = (capture_key, payload)

    app = FastAPI()
    app.include_router(staging_router(receive, token=TOKEN))
    return app


async def test_rows_arrive_with_the_token() -> None:
    """A staged row reaches the receiver; a wrong token or a malformed row is refused."""
    received: dict[str, tuple[str, str]] = {}
    async with serve(rows_app(received)) as url:
        stager = HttpRowStager(f"{url}/rows", token=TOKEN)
        await stager.stage("r1", "r1/a", '{"x": 1}')
        await stager.aclose()
        async with httpx.AsyncClient() as client:
            bad_token = await client.post(
                f"{url}/rows", json={}, headers={"Authorization": "Bearer no"}
            )
            malformed = await client.post(
                f"{url}/rows", json={"capture_key": 1}, headers={"Authorization": f"Bearer {TOKEN}"}
            )
    assert received == {"r1/a": ("r1", '{"x": 1}')}
    assert bad_token.status_code == 401
    assert malformed.json()["error"]["code"] == "invalid_request"
    assert "rows-token" not in repr(HttpRowStager("http://x/rows", token=TOKEN))


async def test_a_refusal_comes_back_as_the_same_error() -> None:
    """The trainer's stale_attempt reaches the model as is; no server at all is checkpoint_error."""
    async with serve(rows_app({}, refuse="stale_attempt")) as url:
        stager = HttpRowStager(f"{url}/rows", token=TOKEN)
        with pytest.raises(ParticipantError) as caught:
            await stager.stage("r1", "r1/a", "{}")
        await stager.aclose()
    assert caught.value.code == "stale_attempt"
    gone = HttpRowStager("http://127.0.0.1:9/rows", token=TOKEN)
    with pytest.raises(ParticipantError) as unreachable:
        await gone.stage("r1", "r1/a", "{}")
    await gone.aclose()
    assert unreachable.value.code == "checkpoint_error"
