"""Tests of the ready file a server writes once it accepts connections."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI

from envckpt.nemo_gym.launcher import free_port
from envckpt.nemo_gym.readiness import announce_when_listening, read_ready_file


class _Quiet(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield


async def test_ready_file_names_a_listening_server(tmp_path: Path) -> None:
    """The file appears only once the port accepts connections, and names the server."""
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"pong": "yes"}

    port = free_port()
    ready = tmp_path / "server.ready"
    announce_when_listening(app, host="127.0.0.1", port=port, ready_file=ready, name="pinger")
    server = _Quiet(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if ready.exists():
                break
            await asyncio.sleep(0.01)
        record = read_ready_file(ready)
        assert record["name"] == "pinger"
        assert record["url"] == f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{record['url']}/ping")).json() == {"pong": "yes"}
    finally:
        server.should_exit = True
        await task


def test_a_file_without_url_is_not_a_ready_file(tmp_path: Path) -> None:
    """A half-written or foreign file is refused."""
    path = tmp_path / "x.ready"
    path.write_text('{"name": "x"}')
    try:
        read_ready_file(path)
    except ValueError as error:
        assert "not a ready file" in str(error)
    else:
        raise AssertionError("accepted a file without url")
