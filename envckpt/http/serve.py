"""Run ASGI apps under uvicorn on 127.0.0.1 with ephemeral ports, for tests, demos and benches.

Ports are always chosen by the kernel (port 0) and read back from the bound
socket, so concurrent runs never collide::

    async with serve(app) as base_url:              # a task in the running loop
        ...
    async with serve_unix(app, "/tmp/d/w0.sock"):   # a worker's private socket
        ...
    async with serve_many([app_a, app_b]) as urls:  # started and stopped together
        ...
    with serve_in_thread(app) as base_url:          # its own loop in a background thread
        ...

The helpers leave the process alone: no signal handlers are installed and
logging is not reconfigured (uvicorn's loggers only get ``log_level``).

Every server gets deliberate connection limits (``ServerLimits``): a request
must arrive whole within ``request_read_seconds`` (``read_guard``: slow
headers and slow bodies alike), an idle keep-alive connection is closed after
``keep_alive_seconds`` (30 s, as nemo-gym runs its servers), longer than any
envckpt client keeps one idle (``http.client.DEFAULT_KEEPALIVE_SECONDS``,
25 s, and the data clients' 4 s), so a client never sends on a connection
the server is closing, except in the race its stale-connection retry covers; headers are capped at
``max_header_bytes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn

from envckpt.http.read_guard import REQUEST_READ_SECONDS, guarded_h11

DEFAULT_HOST = "127.0.0.1"
STARTUP_TIMEOUT_SECONDS = 30.0
# In-flight requests get this long at shutdown before they are cancelled.
GRACEFUL_SHUTDOWN_SECONDS = 2
# Above every envckpt client's idle keep-alive (the control client's 25 s): the
# client closes first. nemo-gym 0.7.0 runs its servers with the same 30 s.
SERVER_KEEP_ALIVE_SECONDS = 30
MAX_HEADER_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Connection limits of a server envckpt starts (see the module docstring)."""

    request_read_seconds: float = REQUEST_READ_SECONDS
    keep_alive_seconds: int = SERVER_KEEP_ALIVE_SECONDS
    max_header_bytes: int = MAX_HEADER_BYTES

    def __post_init__(self) -> None:
        if not self.request_read_seconds > 0 or self.keep_alive_seconds < 1:
            raise ValueError("request_read_seconds and keep_alive_seconds must be positive")
        if self.max_header_bytes < 1024:
            raise ValueError("max_header_bytes must be at least 1024")

    def uvicorn_options(self) -> dict[str, Any]:
        """The ``uvicorn.Config`` keywords that apply these limits."""
        return {
            "http": guarded_h11(read_seconds=self.request_read_seconds),
            "timeout_keep_alive": self.keep_alive_seconds,
            "h11_max_incomplete_event_size": self.max_header_bytes,
        }


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that does not take over the host process's signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ServerExited(RuntimeError):
    """uvicorn gave up (it calls ``sys.exit`` on a failed startup or bind)."""


async def _run(server: _EmbeddedServer) -> None:
    try:
        await server.serve()
    except SystemExit as error:
        # A SystemExit escaping a task would stop the whole event loop.
        raise ServerExited(f"uvicorn exited with code {error.code}") from None


class _Running:
    def __init__(self, server: _EmbeddedServer, task: asyncio.Task[None], base_url: str) -> None:
        self.server = server
        self.task = task
        self.base_url = base_url

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


async def _start(
    app: Any,
    *,
    host: str,
    log_level: str | None,
    startup_timeout: float,
    limits: ServerLimits,
    uds: str | None = None,
) -> _Running:
    # On a Unix socket (a worker's private one) the app's lifespan already ran
    # under its main server: it must not run twice.
    where: dict[str, Any] = {"host": host, "port": 0} if uds is None else {"uds": uds}
    config = uvicorn.Config(
        app,
        **where,
        log_config=None,
        log_level=log_level,
        access_log=False,
        lifespan="auto" if uds is None else "off",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        **limits.uvicorn_options(),
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(_run(server), name="envckpt-uvicorn")
    loop = asyncio.get_running_loop()
    give_up = loop.time() + startup_timeout
    while not server.started:
        if task.done():
            try:
                task.result()
            except ServerExited as error:
                raise ServerExited(f"uvicorn failed to start: {error}") from None
            raise ServerExited("uvicorn exited before it started")
        if loop.time() > give_up:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await task
            raise RuntimeError(f"uvicorn did not start within {startup_timeout:.0f} s")
        await asyncio.sleep(0.005)
    if uds is not None:
        return _Running(server, task, uds)
    port = server.servers[0].sockets[0].getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    return _Running(server, task, f"http://{url_host}:{port}")


@contextlib.asynccontextmanager
async def serve_many(
    apps: Sequence[Any],
    *,
    host: str = DEFAULT_HOST,
    log_level: str | None = "warning",
    startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    limits: ServerLimits = ServerLimits(),
) -> AsyncIterator[list[str]]:
    """Serve each app on its own ephemeral port; yield their base URLs in order."""
    started = await asyncio.gather(
        *(
            _start(
                app,
                host=host,
                log_level=log_level,
                startup_timeout=startup_timeout,
                limits=limits,
            )
            for app in apps
        ),
        return_exceptions=True,
    )
    running = [item for item in started if isinstance(item, _Running)]
    failure = next((item for item in started if isinstance(item, BaseException)), None)
    if failure is not None:
        await _stop_all(running)
        raise failure
    try:
        yield [item.base_url for item in running]
    except BaseException:
        await _stop_all(running)  # the body's error wins over a failed shutdown
        raise
    problems = await _stop_all(running)
    if problems:
        raise problems[0]


async def _stop_all(running: Sequence[_Running]) -> list[BaseException]:
    outcomes = await asyncio.gather(*(item.stop() for item in running), return_exceptions=True)
    return [outcome for outcome in outcomes if isinstance(outcome, BaseException)]


@contextlib.asynccontextmanager
async def serve(
    app: Any,
    *,
    host: str = DEFAULT_HOST,
    log_level: str | None = "warning",
    startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    limits: ServerLimits = ServerLimits(),
) -> AsyncIterator[str]:
    """Serve ``app`` as a task of the running loop; yield its base URL, stop on exit."""
    async with serve_many(
        [app], host=host, log_level=log_level, startup_timeout=startup_timeout, limits=limits
    ) as urls:
        yield urls[0]


@contextlib.asynccontextmanager
async def serve_unix(
    app: Any,
    path: str,
    *,
    log_level: str | None = "warning",
    startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    limits: ServerLimits = ServerLimits(),
) -> AsyncIterator[str]:
    """Serve ``app`` on the Unix socket ``path`` (lifespan off); yield the path, stop on exit.

    For a worker's private socket: the app's lifespan runs under its TCP
    server only. The socket is removed when the server stops.
    """
    running = await _start(
        app,
        host=DEFAULT_HOST,
        log_level=log_level,
        startup_timeout=startup_timeout,
        limits=limits,
        uds=path,
    )
    try:
        yield path
    finally:
        await running.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@contextlib.contextmanager
def serve_many_in_thread(
    apps: Sequence[Any],
    *,
    host: str = DEFAULT_HOST,
    log_level: str | None = "warning",
    startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    limits: ServerLimits = ServerLimits(),
) -> Iterator[list[str]]:
    """``serve_many`` on a new event loop in a daemon thread; yield the base URLs."""
    handoff: queue.Queue[tuple[list[str], asyncio.AbstractEventLoop, asyncio.Event] | BaseException]
    handoff = queue.Queue()
    outcome: list[BaseException] = []

    async def main() -> None:
        stop = asyncio.Event()
        async with serve_many(
            apps, host=host, log_level=log_level, startup_timeout=startup_timeout, limits=limits
        ) as urls:
            handoff.put((urls, asyncio.get_running_loop(), stop))
            await stop.wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as error:  # handed to the caller, not printed by threading
            outcome.append(error)
            handoff.put(error)

    thread = threading.Thread(target=run, name="envckpt-uvicorn-thread", daemon=True)
    thread.start()
    try:
        item = handoff.get(timeout=startup_timeout + 5.0)
    except queue.Empty:
        raise RuntimeError(f"servers did not start within {startup_timeout:.0f} s") from None
    if isinstance(item, BaseException):
        thread.join()
        raise RuntimeError(f"servers failed to start: {item}") from item
    urls, loop, stop = item
    try:
        yield urls
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
        if outcome:
            raise RuntimeError(f"servers failed while stopping: {outcome[0]}") from outcome[0]


@contextlib.contextmanager
def serve_in_thread(
    app: Any,
    *,
    host: str = DEFAULT_HOST,
    log_level: str | None = "warning",
    startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    limits: ServerLimits = ServerLimits(),
) -> Iterator[str]:
    """``serve`` on a new event loop in a daemon thread; yield the base URL."""
    with serve_many_in_thread(
        [app], host=host, log_level=log_level, startup_timeout=startup_timeout, limits=limits
    ) as urls:
        yield urls[0]
