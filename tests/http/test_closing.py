"""Tests for envckpt.http.closing: ``async with`` for anything with ``aclose()``."""

from __future__ import annotations

import pytest

from envckpt.coordination.transport import TransportFailure
from envckpt.http.client import HttpTransport
from envckpt.http.closing import AsyncCloseable
from envckpt.sim.data_clients import HttpAgentClient


class Recorder(AsyncCloseable):
    """Counts its closes; may fail to close."""

    def __init__(self, *, fail: bool = False) -> None:
        self.closed = 0
        self.fail = fail

    async def aclose(self) -> None:
        self.closed += 1
        if self.fail:
            raise OSError("close failed")


async def test_the_context_yields_itself_and_closes_once() -> None:
    """``async with`` gives the object itself and closes it exactly once on exit."""
    recorder = Recorder()
    async with recorder as entered:
        assert entered is recorder
        assert recorder.closed == 0
    assert recorder.closed == 1


async def test_the_bodys_error_propagates_after_closing() -> None:
    """An error in the body closes the object, then propagates unchanged."""
    recorder = Recorder()
    with pytest.raises(KeyError, match="body"):
        async with recorder:
            raise KeyError("body")
    assert recorder.closed == 1


async def test_a_failed_close_is_raised_with_the_body_error_as_context() -> None:
    """A close that fails raises its own error; the body's error stays attached as context."""
    recorder = Recorder(fail=True)
    with pytest.raises(OSError, match="close failed") as info:
        async with recorder:
            raise KeyError("body")
    assert isinstance(info.value.__context__, KeyError)


async def test_a_subclass_must_say_how_to_close() -> None:
    """The base aclose is abstract: using the mixin without one fails loudly."""
    with pytest.raises(NotImplementedError):
        async with AsyncCloseable():
            pass


async def test_the_http_clients_close_their_connection_pools() -> None:
    """HttpTransport and HttpAgentClient close their pools when the context ends."""
    async with HttpTransport({"agent": "http://127.0.0.1:9"}, token="t" * 16) as transport:
        pass
    async with HttpAgentClient("http://127.0.0.1:9") as agent:
        pass
    with pytest.raises(TransportFailure, match="closed"):
        await transport.request("agent", "GET", "status", None, timeout=1.0)
    assert agent._client.is_closed
