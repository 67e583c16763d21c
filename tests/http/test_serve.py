"""Tests for envckpt.http.serve: ASGI apps on real loopback ports, started and stopped cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from envckpt.http.serve import ServerExited, serve, serve_in_thread, serve_many


def named_app(name: str) -> FastAPI:
    app = FastAPI()

    @app.get("/name")
    async def which() -> dict[str, str]:
        return {"name": name}

    return app


def failing_startup_app() -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        raise RuntimeError("the app cannot start")
        yield  # pragma: no cover

    return FastAPI(lifespan=lifespan)


def refuses(url: str) -> bool:
    """Whether nothing listens at ``url`` any more."""
    try:
        httpx.get(f"{url}/name", timeout=5)
    except httpx.ConnectError:
        return True
    return False


async def test_serve_answers_on_an_ephemeral_loopback_port_then_stops() -> None:
    """The yielded URL is 127.0.0.1 with a kernel-chosen port; after exit it refuses."""
    async with serve(named_app("a")) as url, httpx.AsyncClient() as client:
        assert url.startswith("http://127.0.0.1:") and int(url.rsplit(":", 1)[1]) > 0
        reply = await client.get(f"{url}/name")
        assert reply.json() == {"name": "a"}
    assert refuses(url)


async def test_serve_many_gives_each_app_its_own_port_in_order() -> None:
    """Each app gets its own URL, in the order given; all stop together."""
    async with serve_many([named_app("a"), named_app("b"), named_app("c")]) as urls:
        assert len(set(urls)) == 3
        async with httpx.AsyncClient() as client:
            names = [(await client.get(f"{url}/name")).json()["name"] for url in urls]
        assert names == ["a", "b", "c"]
    assert all(refuses(url) for url in urls)


async def test_the_bodys_error_propagates_and_the_servers_stop() -> None:
    """An error inside the context wins; the servers are stopped all the same."""
    seen: list[str] = []
    with pytest.raises(KeyError, match="body"):
        async with serve_many([named_app("a"), named_app("b")]) as urls:
            seen.extend(urls)
            raise KeyError("body")
    assert len(seen) == 2 and all(refuses(url) for url in seen)


async def test_a_failed_startup_is_raised_and_the_others_are_stopped() -> None:
    """An app whose startup fails raises ServerExited; the app that started is stopped."""
    with pytest.raises(ServerExited, match="failed to start: uvicorn exited"):
        async with serve_many([named_app("a"), failing_startup_app()]):
            pytest.fail("the body must not run")
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "envckpt-uvicorn"]


async def test_a_host_that_cannot_be_bound_is_refused() -> None:
    """Binding an address this machine does not have fails with ServerExited, not SystemExit."""
    with pytest.raises(ServerExited, match="failed to start"):
        async with serve(named_app("a"), host="192.0.2.1", log_level="critical"):
            pytest.fail("the body must not run")


async def test_serving_leaves_signals_and_logging_alone() -> None:
    """No signal handler is installed and the root logger keeps its handlers."""
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    handlers = list(logging.getLogger().handlers)
    async with serve(named_app("a")):
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert logging.getLogger().handlers == handlers


def test_serve_in_thread_serves_synchronous_callers() -> None:
    """From code without an event loop, the app answers while the context is open."""
    with serve_in_thread(named_app("threaded")) as url:
        assert httpx.get(f"{url}/name", timeout=10).json() == {"name": "threaded"}
    assert refuses(url)


def test_serve_in_thread_reports_a_failed_startup() -> None:
    """A startup failure in the thread arrives as a RuntimeError naming the cause."""
    with (
        pytest.raises(RuntimeError, match="servers failed to start") as info,
        serve_in_thread(failing_startup_app()),
    ):
        pytest.fail("the body must not run")
    assert isinstance(info.value.__cause__, ServerExited)


def test_server_limits_are_deliberate_and_validated() -> None:
    """30 s to read a request, 30 s keep-alive, 16 KiB of headers; nonsense is refused."""
    from envckpt.http.serve import MAX_HEADER_BYTES, SERVER_KEEP_ALIVE_SECONDS, ServerLimits

    limits = ServerLimits()
    assert (limits.request_read_seconds, limits.keep_alive_seconds, limits.max_header_bytes) == (
        30.0,
        SERVER_KEEP_ALIVE_SECONDS,
        MAX_HEADER_BYTES,
    )
    options = limits.uvicorn_options()
    assert options["timeout_keep_alive"] == 30 and options["h11_max_incomplete_event_size"] == 16384
    assert options["http"].read_seconds == 30.0
    for bad in ({"request_read_seconds": 0}, {"keep_alive_seconds": 0}, {"max_header_bytes": 10}):
        with pytest.raises(ValueError):
            ServerLimits(**bad)  # type: ignore[arg-type]


def test_every_envckpt_client_drops_idle_connections_before_the_server_does() -> None:
    """Client keep-alive below the server's, so no call goes out on a connection being closed."""
    from envckpt.http.client import DEFAULT_KEEPALIVE_SECONDS as CONTROL_CLIENT
    from envckpt.http.serve import SERVER_KEEP_ALIVE_SECONDS
    from envckpt.sim.data_clients import DEFAULT_KEEPALIVE_SECONDS as DATA_CLIENT

    assert CONTROL_CLIENT < SERVER_KEEP_ALIVE_SECONDS and DATA_CLIENT < SERVER_KEEP_ALIVE_SECONDS


async def test_servers_use_the_guarded_protocol_and_bind_loopback() -> None:
    """serve() binds 127.0.0.1 and closes a connection that sends nothing, with a 408."""
    from envckpt.http.serve import ServerLimits

    async with serve(named_app("a"), limits=ServerLimits(request_read_seconds=0.3)) as url:
        assert url.startswith("http://127.0.0.1:")
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        reply = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
    assert reply.startswith(b"HTTP/1.1 408")


async def test_serve_unix_serves_on_a_socket_without_the_lifespan_and_removes_it() -> None:
    """A worker's private socket: the app answers there, its lifespan never runs, and the
    socket file is gone once the server stops."""
    import tempfile
    from pathlib import Path

    from envckpt.http.serve import serve_unix

    started: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        started.append("lifespan")
        yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/name")
    async def which() -> dict[str, str]:
        return {"name": "private"}

    directory = Path(tempfile.mkdtemp(dir="/tmp"))
    path = str(directory / "w.sock")
    try:
        async with serve_unix(app, path) as served:
            transport = httpx.AsyncHTTPTransport(uds=served)
            async with httpx.AsyncClient(transport=transport) as client:
                reply = await client.get("http://worker/name")
            assert reply.json() == {"name": "private"}
        assert not Path(path).exists() and started == []
    finally:
        directory.rmdir()
