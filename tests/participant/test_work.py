"""Tests for envckpt.participant.work: closing admission and stopping retired work."""

from __future__ import annotations

import asyncio

import pytest

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant import work
from envckpt.participant.fence import AttemptFence
from envckpt.protocol import ErrorCode

from helpers.participant_doubles import START, JsonStateHooks, ep


class ReopenFails(JsonStateHooks):
    """Closing fails, and so does reopening."""

    async def open_admission(self) -> None:
        self.calls.append("open")
        raise RuntimeError("cannot reopen either")


async def test_close_admission_closes_through_the_hooks() -> None:
    """A working close is just the hook's close."""
    hooks = JsonStateHooks()
    await work.close_admission(hooks)
    assert hooks.calls == ["close"] and not hooks.admission_open


async def test_a_failed_close_reopens_and_raises_checkpoint_error() -> None:
    """A close that fails half-way is undone by a reopen, then raised as checkpoint_error."""
    hooks = JsonStateHooks()
    hooks.fail_close = True
    with pytest.raises(ParticipantError) as caught:
        await work.close_admission(hooks)
    assert caught.value.code == ErrorCode.CHECKPOINT_ERROR
    assert "cannot cut generations" in caught.value.detail
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert hooks.calls == ["close", "open"] and hooks.admission_open


async def test_a_failing_reopen_does_not_hide_the_close_failure() -> None:
    """If the reopen fails too, the caller still sees the close's checkpoint_error."""
    hooks = ReopenFails()
    hooks.fail_close = True
    with pytest.raises(ParticipantError, match="cannot cut generations"):
        await work.close_admission(hooks)
    assert hooks.calls == ["close", "open"]


async def stop(
    hooks: JsonStateHooks,
    fence: AttemptFence,
    clock: FakeClock,
    episodes: tuple[EnvironmentEpisode, ...],
    changed: asyncio.Event | None = None,
) -> None:
    await work.stop_retired(
        hooks, fence, clock, changed or asyncio.Event(), episodes, clock.now() + 30
    )


async def test_stop_retired_frees_the_attempts_and_returns_when_nothing_runs() -> None:
    """No call in flight: the hooks free the attempts (and earlier ones), no time passes."""
    clock, hooks, fence = FakeClock(START), JsonStateHooks(), AttemptFence()
    hooks.put(ep("r", 0))
    hooks.put(ep("r", 2))
    await stop(hooks, fence, clock, (ep("r", 1),))
    assert hooks.retired == [(ep("r", 1),)]
    assert hooks.live_episodes() == {ep("r", 2)}
    assert clock.now() == START


async def test_stop_retired_waits_for_calls_at_or_below_the_retired_attempts() -> None:
    """A running call of an earlier attempt is waited for until it leaves."""
    clock, hooks, fence = FakeClock(START), JsonStateHooks(), AttemptFence()
    changed = asyncio.Event()
    fence.admitted(ep("r", 0))

    def leave_when_retired(episodes: tuple[EnvironmentEpisode, ...]) -> None:
        # The hook asks the call to stop; it reaches its boundary a moment later.
        async def leave() -> None:
            await asyncio.sleep(0)
            fence.left(ep("r", 0))
            changed.set()

        asyncio.get_running_loop().create_task(leave())

    hooks.on_retire.append(leave_when_retired)
    await stop(hooks, fence, clock, (ep("r", 1),), changed)
    assert fence.in_flight() == frozenset()
    assert clock.now() == START


async def test_stop_retired_does_not_wait_for_later_attempts_or_other_rollouts() -> None:
    """Calls of a newer attempt, or of another rollout, never block the stop."""
    clock, hooks, fence = FakeClock(START), JsonStateHooks(), AttemptFence()
    fence.admitted(ep("r", 2))
    fence.admitted(ep("other", 0))
    await stop(hooks, fence, clock, (ep("r", 1),))
    assert clock.now() == START


async def test_stop_retired_gives_up_at_the_deadline_and_keeps_the_work_tracked() -> None:
    """A call that never leaves: deadline_exceeded at the deadline; the fence still holds it."""
    clock, hooks, fence = FakeClock(START), JsonStateHooks(), AttemptFence()
    fence.admitted(ep("r", 1))
    with pytest.raises(ParticipantError) as caught:
        await stop(hooks, fence, clock, (ep("r", 1),))
    assert caught.value.code == ErrorCode.DEADLINE_EXCEEDED
    assert clock.now() == START + 30
    assert fence.in_flight() == {ep("r", 1)}


async def test_a_failing_retire_hook_is_checkpoint_error() -> None:
    """The hooks failing to stop the work: checkpoint_error, with the hook's reason."""
    clock, hooks, fence = FakeClock(START), JsonStateHooks(), AttemptFence()
    hooks.fail_retire = True
    with pytest.raises(ParticipantError) as caught:
        await stop(hooks, fence, clock, (ep("r", 0),))
    assert caught.value.code == ErrorCode.CHECKPOINT_ERROR
    assert "the turn would not stop" in caught.value.detail
