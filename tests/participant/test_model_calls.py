"""Tests of the model-call policy at prepare: wait, refuse, or wait then refuse."""

from __future__ import annotations

import asyncio

import pytest

from envckpt.clock import FakeClock
from envckpt.errors import ParticipantError
from envckpt.participant.model_calls import (
    DEFAULT_MODEL_CALLS,
    ModelCallPolicy,
    ModelCalls,
    deliver,
    is_refused_call,
    parse_model_calls,
    refused,
    wait_for_boundary,
)

from helpers.participant_doubles import ep


def test_each_policy_refuses_at_its_time() -> None:
    """wait: never; refuse: at once; wait_then_refuse (the default): half the time left."""
    assert DEFAULT_MODEL_CALLS is ModelCallPolicy.WAIT_THEN_REFUSE
    assert ModelCalls(ModelCallPolicy.WAIT).refuse_at(100.0, 110.0) is None
    assert ModelCalls(ModelCallPolicy.REFUSE).refuse_at(100.0, 110.0) == 100.0
    assert ModelCalls().refuse_at(100.0, 110.0) == 105.0
    assert ModelCalls(wait_share=0.8).refuse_at(100.0, 110.0) == 108.0
    assert ModelCalls().refuse_at(100.0, 90.0) == 100.0  # a deadline already past
    with pytest.raises(ValueError):
        ModelCalls(wait_share=1.5)


def test_the_policy_parses_from_its_name() -> None:
    """None is the default; an unknown name lists the three."""
    assert parse_model_calls(None) is ModelCallPolicy.WAIT_THEN_REFUSE
    assert parse_model_calls("refuse") is ModelCallPolicy.REFUSE
    with pytest.raises(ValueError, match="wait, refuse, wait_then_refuse"):
        parse_model_calls("abort")


async def test_a_generating_call_is_refused_as_admission_closed() -> None:
    """Refused mid-generation: its work is cancelled, its caller gets the refusal."""
    calls = ModelCalls()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def generation() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "tokens"

    call = asyncio.create_task(calls.generate(ep("r", 1), generation()))
    await started.wait()
    assert list(calls.generating()) == [ep("r", 1)]
    assert calls.refuse_generating("c1") == 1
    with pytest.raises(ParticipantError) as caught:
        await call
    assert caught.value.code == "admission_closed" and is_refused_call(caught.value)
    assert "c1" in caught.value.detail and "r-a1" in caught.value.detail
    assert cancelled.is_set() and calls.refused == 1 and list(calls.generating()) == []
    status = calls.status()
    assert status == {"policy": "wait_then_refuse", "wait_share": 0.5, "in_flight": 0, "refused": 1}


async def test_a_delivering_call_is_never_refused() -> None:
    """Once its row or reply is on its way, a call finishes whatever a prepare says."""
    calls = ModelCalls()
    delivering, release = asyncio.Event(), asyncio.Event()

    async def generation() -> str:
        deliver()
        delivering.set()
        await release.wait()
        return "tokens"

    call = asyncio.create_task(calls.generate(ep("r"), generation()))
    await delivering.wait()
    assert calls.refuse_generating("c1") == 0
    release.set()
    assert await call == "tokens" and calls.refused == 0


async def test_a_call_refused_before_it_noticed_cannot_deliver() -> None:
    """deliver() after the refusal raises it: nothing of a refused call is recorded."""
    calls = ModelCalls()
    seen: list[bool] = []
    started = asyncio.Event()

    async def generation() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(refused())
            deliver()  # e.g. a capture path that still tries to record its row

    call = asyncio.create_task(calls.generate(ep("r"), generation()))
    await started.wait()
    calls.refuse_generating("c1")
    with pytest.raises(ParticipantError, match="model call refused"):
        await call
    assert seen == [True]


async def test_cancelling_the_caller_stops_the_call_and_is_no_refusal() -> None:
    """A caller that goes away (retire, shutdown) cancels its generation; nothing is refused."""
    calls = ModelCalls()
    cancelled = asyncio.Event()

    async def generation() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    call = asyncio.create_task(calls.generate(ep("r"), generation()))
    await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert cancelled.is_set() and calls.refused == 0


@pytest.mark.parametrize(
    ("policy", "refused_at"),
    [("wait", None), ("refuse", 0.0), ("wait_then_refuse", 5.0)],
)
async def test_the_prepare_wait_refuses_at_the_policys_time(
    policy: str, refused_at: float | None
) -> None:
    """A generation outlasting the budget: waited for to the deadline, or refused (at once,
    or after half the budget) so the wait ends ready."""
    clock = FakeClock()
    start = clock.now()
    calls = ModelCalls(parse_model_calls(policy))
    changed = asyncio.Event()
    refusals: list[float] = []

    async def generation() -> None:
        await asyncio.sleep(3600)

    async def one_call() -> None:
        try:
            await calls.generate(ep("r"), generation())
        except ParticipantError:
            refusals.append(clock.now() - start)
        finally:
            changed.set()

    call = asyncio.create_task(one_call())
    while not list(calls.generating()):
        await asyncio.sleep(0)
    await wait_for_boundary(
        "c1",
        start + 10.0,
        clock=clock,
        changed=changed,
        preparing=lambda: True,
        ready=lambda: not list(calls.generating()),
        calls=calls,
    )
    if refused_at is None:
        assert refusals == [] and clock.now() == start + 10.0  # waited out the deadline
        call.cancel()
    else:
        await call
        assert refusals == [refused_at]
