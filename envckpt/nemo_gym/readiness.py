"""Tell a launcher that a server process is listening: write a ready file.

uvicorn runs the app's lifespan startup *before* it binds its socket, so a
file written at startup could be read while connections are still refused.
Instead a background task started by the lifespan connects to the server's
own address until that succeeds, then writes the file atomically. A
connection is only proof where this process holds the listening socket: on
Linux the task also looks the listener up in ``/proc``, so a port another
process took (and serves) is never announced; this server's own bind then
fails, it exits, and the launcher sees why::

    announce_when_listening(app, host="127.0.0.1", port=8000, ready_file=path, name="policy")
    announce_if_asked(app, server)     # a nemo-gym server, when its launcher set the file
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


def listening_here(port: int) -> bool | None:
    """Whether this process holds a TCP socket listening on ``port``; None where
    ``/proc`` cannot say (not Linux)."""
    try:
        listeners = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(FileNotFoundError), open(table) as rows:
                next(rows, None)  # the header
                for row in rows:
                    # sl local_address rem_address st ... inode: 0A is LISTEN.
                    fields = row.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        listeners.add(f"socket:[{fields[9]}]")
        if not listeners:
            return False
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}") in listeners:
                    return True
        return False
    except OSError:
        return None


async def wait_until_listening(host: str, port: int, *, timeout: float = 60.0) -> None:
    """Return once this process's server accepts connections on ``host:port``."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            pass
        else:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            # Someone listens there; unless /proc says it is another process, it is us.
            if listening_here(port) is not False:
                return
        if loop.time() > give_up:
            raise TimeoutError(f"this server does not listen on {host}:{port} after {timeout} s")
        await asyncio.sleep(POLL_SECONDS)


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


def announce_if_asked(app: Any, server: Any) -> None:
    """Announce a nemo-gym ``server`` (its config's host, port and name) once ``app``
    listens, when the launcher asked for it (``READY_FILE_ENV`` names the file)."""
    from envckpt.nemo_gym.settings import READY_FILE_ENV

    ready_file = os.environ.get(READY_FILE_ENV)
    if ready_file:
        announce_when_listening(
            app,
            host=server.config.host,
            port=int(server.config.port),
            ready_file=ready_file,
            name=server.config.name,
        )
