"""Tests for envckpt.trainer.dispatch_gate: the switch a snapshot uses to stop new dispatch."""

from __future__ import annotations

import asyncio

import pytest

from envckpt.trainer.dispatch_gate import DispatchGate


async def test_the_gate_starts_open() -> None:
    """A new gate lets a dispatcher through at once."""
    gate = DispatchGate()
    assert gate.is_open
    await asyncio.wait_for(gate.wait_open(), 0.1)


async def test_closed_holds_dispatchers_until_the_block_ends() -> None:
    """A dispatcher waiting on a closed gate proceeds only once it reopens."""
    gate = DispatchGate()
    with gate.closed():
        assert not gate.is_open
        waiter = asyncio.create_task(gate.wait_open())
        await asyncio.sleep(0.01)
        assert not waiter.done()
    assert gate.is_open
    await asyncio.wait_for(waiter, 0.1)


async def test_nested_closes_reopen_only_when_the_last_one_ends() -> None:
    """Two overlapping closers keep the gate shut until both have left."""
    gate = DispatchGate()
    outer = gate.closed()
    outer.__enter__()
    with gate.closed():
        assert not gate.is_open
    assert not gate.is_open
    waiter = asyncio.create_task(gate.wait_open())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    outer.__exit__(None, None, None)
    await asyncio.wait_for(waiter, 0.1)


async def test_the_gate_reopens_when_the_block_raises() -> None:
    """An exception inside closed() still reopens the gate."""
    gate = DispatchGate()
    with pytest.raises(RuntimeError), gate.closed():
        raise RuntimeError("snapshot failed")
    assert gate.is_open
    await asyncio.wait_for(gate.wait_open(), 0.1)
