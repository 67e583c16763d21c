"""Fixtures of the integration tests that drive ``helpers.dict_deployment`` over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from helpers.dict_deployment import LoopbackHttp


@pytest.fixture
async def close_loopback_servers() -> AsyncIterator[None]:
    """After the test, close every loopback server and client session it left open."""
    yield
    await LoopbackHttp.close_all()
