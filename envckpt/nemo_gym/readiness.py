"""Tell a launcher that a server process is listening: write a ready file.

uvicorn runs the app's lifespan startup *before* it binds its socket, so a
file written at startup could be read while connections are still refused.
Instead a background task started by the lifespan connects to the server's
own address until that succeeds, then writes the file atomically::

    announce_when_listening(app, host="127.0.0.1", port=8000, ready_file=path, name="policy")
    # the launcher waits for: {"name": "policy", "url": "http://127.0.0.1:8000", "pid": 1234}
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from envckpt.fsutil import atomic_write_bytes

POLL_SECONDS = 0.02


def server_url(host: str, port: int) -> str:
    return f"http://{host}:{port}"


async def wait_until_listening(host: str, port: int, *, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            if loop.time() > give_up:
                raise TimeoutError(f"nothing listens on {host}:{port} after {timeout} s") from None
            await asyncio.sleep(POLL_SECONDS)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return


def announce_when_listening(
    app: Any, *, host: str, port: int, ready_file: str | os.PathLike[str], name: str = ""
) -> None:
    """Write ``ready_file`` once ``app`` accepts connections on ``host:port``."""
    path = Path(ready_file)
    inner = app.router.lifespan_context

    async def announce() -> None:
        await wait_until_listening(host, port)
        record = {"name": name, "url": server_url(host, port), "pid": os.getpid()}
        await asyncio.to_thread(atomic_write_bytes, path, json.dumps(record).encode())

    @contextlib.asynccontextmanager
    async def lifespan(lifespan_app: Any) -> AsyncIterator[Any]:
        async with inner(lifespan_app) as state:
            task = asyncio.create_task(announce())
            try:
                yield state
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    app.router.lifespan_context = lifespan


def read_ready_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(record, dict) or not isinstance(record.get("url"), str):
        raise ValueError(f"{path} is not a ready file")
    return record
