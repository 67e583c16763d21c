"""Tests of the ready file a server writes once it accepts connections."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from envckpt.nemo_gym.launcher import free_port
from envckpt.nemo_gym.readiness import (
    announce_when_listening,
    listening_here,
    read_ready_file,
    wait_until_listening,
)


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


@contextlib.contextmanager
def _listener_in_another_process() -> Iterator[int]:
    """A port another process listens on (it accepts, and never answers)."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "print(s.getsockname()[1], flush=True); time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield int(child.stdout.readline())
    finally:
        child.kill()
        child.wait()


def test_listening_here_tells_this_process_from_another() -> None:
    """Own listeners (IPv4 and IPv6) are found; a bound socket that does not listen and
    another process's listener are not."""
    with contextlib.ExitStack() as held:
        own = held.enter_context(socket.socket())
        own.bind(("127.0.0.1", 0))
        own.listen()
        own6 = held.enter_context(socket.socket(socket.AF_INET6))
        own6.bind(("::1", 0))
        own6.listen()
        bound = held.enter_context(socket.socket())
        bound.bind(("127.0.0.1", 0))
        assert listening_here(own.getsockname()[1]) is True
        assert listening_here(own6.getsockname()[1]) is True
        assert listening_here(bound.getsockname()[1]) is False
        with _listener_in_another_process() as theirs:
            assert listening_here(theirs) is False


async def test_another_process_listening_on_the_port_is_not_announced() -> None:
    """A connection accepted by another process's listener proves nothing: no announcement,
    however long it listens."""
    with (
        _listener_in_another_process() as theirs,
        pytest.raises(TimeoutError, match="does not listen"),
    ):
        await wait_until_listening("127.0.0.1", theirs, timeout=0.3)
