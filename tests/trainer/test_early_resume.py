"""Tests for envckpt.trainer.early_resume: leaving the environment's context before publish."""

from __future__ import annotations

import asyncio
from types import TracebackType

import pytest
from structlog.testing import capture_logs

from envckpt.clock import FakeClock
from envckpt.trainer.early_resume import EarlyResume


class Context:
    """An environment snapshot context that records how it was left."""

    def __init__(self, clock: FakeClock, *, resume_seconds: float = 0.0, fail: bool = False):
        self.clock = clock
        self.resume_seconds = resume_seconds
        self.fail = fail
        self.entered = False
        self.left_with: list[type[BaseException] | None] = []
        self.resumed = asyncio.Event()

    async def __aenter__(self) -> None:
        self.entered = True

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.left_with.append(kind)
        if kind is None:
            await asyncio.sleep(self.resume_seconds)
            self.clock.advance(1.5)
            if self.fail:
                raise ConnectionError("instance unreachable")
            self.resumed.set()


async def test_the_resume_runs_beside_the_caller_and_says_when_it_ended() -> None:
    """start() does not wait; resumed_at() is the clock when the context was left cleanly."""
    clock = FakeClock(100.0)
    context = Context(clock, resume_seconds=0.05)
    early = EarlyResume(context, clock)
    assert await early.enter() is None and context.entered
    early.start()
    assert not context.resumed.is_set()  # started, not awaited
    assert await early.resumed_at() == 101.5
    assert context.left_with == [None]


async def test_a_failure_before_the_start_aborts_the_checkpoint() -> None:
    """Still paused: the context is left with the error, so the environment aborts."""
    clock = FakeClock(0.0)
    context = Context(clock)
    early = EarlyResume(context, clock)
    await early.enter()
    await early.fail(OSError("disk full"))
    assert context.left_with == [OSError]
    assert not context.resumed.is_set()


async def test_a_failure_after_the_start_waits_for_the_resume_and_logs_its_error() -> None:
    """Resuming already: the failure waits for it, and a failed resume is logged, not raised."""
    clock = FakeClock(0.0)
    context = Context(clock, resume_seconds=0.02, fail=True)
    early = EarlyResume(context, clock)
    await early.enter()
    early.start()
    with capture_logs() as events:
        await early.fail(OSError("disk full"))
    assert context.left_with == [None]  # resumed, never aborted
    [warning] = [e for e in events if e["log_level"] == "warning"]
    assert "resuming the environment failed" in warning["event"]
    assert warning["error"] == "ConnectionError: instance unreachable"


async def test_a_failed_resume_is_raised_by_resumed_at() -> None:
    """After publish the resume's error reaches the caller (phase 7's rule)."""
    clock = FakeClock(0.0)
    early = EarlyResume(Context(clock, fail=True), clock)
    await early.enter()
    early.start()
    with pytest.raises(ConnectionError, match="instance unreachable"):
        await early.resumed_at()


async def test_resumed_at_without_a_start_is_a_programming_error() -> None:
    clock = FakeClock(0.0)
    early = EarlyResume(Context(clock), clock)
    await early.enter()
    with pytest.raises(RuntimeError, match="never started"):
        await early.resumed_at()


async def test_a_cancellation_waits_for_the_resume_then_goes_on() -> None:
    """Cancelled while the resume runs: the resume ends first, then CancelledError."""
    clock = FakeClock(0.0)
    context = Context(clock, resume_seconds=0.2)
    early = EarlyResume(context, clock)
    await early.enter()
    early.start()
    waiting = asyncio.create_task(early.resumed_at())
    await asyncio.sleep(0.02)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert context.resumed.is_set()  # not left running unowned
