"""Tests for envckpt.http.apps: no docs by accident, every framework error in the envelope."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from pydantic import BaseModel

from envckpt.http.apps import DOC_PATHS, hide_docs, new_app
from envckpt.http.serve import serve


class Item(BaseModel):
    n: int


def with_routes(app: FastAPI) -> FastAPI:
    @app.post("/item")
    async def item(body: Item) -> dict[str, int]:
        return {"n": body.n}

    return app


async def test_new_apps_serve_no_docs_and_answer_errors_in_the_envelope() -> None:
    """Docs are 404, a wrong method 405, a body FastAPI refuses 422: all in the envelope."""
    async with serve(with_routes(new_app())) as url, httpx.AsyncClient() as client:
        for path in sorted(DOC_PATHS):
            reply = await client.get(f"{url}{path}")
            assert reply.status_code == 404
            assert reply.json() == {"error": {"code": "invalid_request", "detail": "Not Found"}}
        wrong = await client.get(f"{url}/item")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
        assert wrong.json()["error"]["code"] == "invalid_request"
        invalid = await client.post(f"{url}/item", json={"n": "x"})
        assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_request"
        assert (await client.post(f"{url}/item", json={"n": 3})).json() == {"n": 3}


async def test_docs_on_request() -> None:
    """expose_docs=True keeps FastAPI's docs and schema."""
    async with serve(with_routes(new_app(expose_docs=True))) as url, httpx.AsyncClient() as client:
        assert (await client.get(f"{url}/openapi.json")).status_code == 200
        assert (await client.get(f"{url}/docs")).status_code == 200


async def test_hide_docs_strips_an_app_built_elsewhere() -> None:
    """A plain FastAPI app loses its docs routes and keeps its own."""
    app = with_routes(FastAPI())
    async with serve(app) as url, httpx.AsyncClient() as client:
        assert (await client.get(f"{url}/openapi.json")).status_code == 200
    hide_docs(app)
    async with serve(app) as url, httpx.AsyncClient() as client:
        for path in sorted(DOC_PATHS):
            assert (await client.get(f"{url}{path}")).status_code == 404
        assert (await client.post(f"{url}/item", json={"n": 1})).status_code == 200
