"""Model calls in flight when a checkpoint prepares: wait for them, refuse them, or both.

A real policy model takes 10-60 s per generation. A prepare that waits for
every generation in flight holds the whole environment paused that long, and
with a short prepare budget no snapshot is ever taken. So the policy model's
participant may **refuse** the calls still generating: each is cancelled and
answered ``admission_closed`` (the same answer a call arriving after the
model closed gets). Its caller, the agent, parks at the turn boundary it last
committed and, after resume (or a restore as the next attempt), issues the
same call again from the same turn. A refused call leaves nothing behind: no
token row, no recorded failure. This is the rule of Gym's own checkpoint
design: an agent whose policy call was refused as parked parks at its latest
boundary and re-issues the call after resume or restore.

    calls = ModelCalls(ModelCallPolicy.WAIT_THEN_REFUSE)
    core = ParticipantCore(server_name="policy", kind="model", hooks=..., model_calls=calls)
    async with core.admit(episode):
        reply = await calls.generate(episode, decode())  # admission_closed if refused
        ...                                               # deliver(): past here, never refused

The core's prepare asks ``refuse_at(now, deadline_ts)`` when it starts to
wait, and calls ``refuse_generating(checkpoint_id)`` once that time passes:

* ``wait``: never refuse; prepare waits for every call, up to its deadline;
* ``refuse``: refuse every call still generating at once;
* ``wait_then_refuse`` (the default): wait ``WAIT_SHARE`` of the time left
  before the deadline, then refuse what still generates. The rest of the
  budget is for the stages after the model (agents, resources), which
  prepare with the same deadline.

A call that is already delivering (its row being recorded, its reply being
sent) is never refused: it finishes, and prepare waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from envckpt import logs
from envckpt.clock import Clock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.protocol import ErrorCode

T = TypeVar("T")

# The share of the time left before the prepare deadline spent waiting for
# generations under ``wait_then_refuse``; the rest is the later stages'.
WAIT_SHARE = 0.5
STATUS_KEY = "model_calls"
# How a refusal's detail starts: the caller tells it from admission merely closed.
REFUSED_CALL = "model call refused"


class ModelCallPolicy(StrEnum):
    """What a prepare does with model calls still generating."""

    WAIT = "wait"
    REFUSE = "refuse"
    WAIT_THEN_REFUSE = "wait_then_refuse"


DEFAULT_MODEL_CALLS = ModelCallPolicy.WAIT_THEN_REFUSE


def parse_model_calls(value: object) -> ModelCallPolicy:
    """A policy from its name (None: the default); ValueError names the choices."""
    if value is None:
        return DEFAULT_MODEL_CALLS
    try:
        return ModelCallPolicy(str(value))
    except ValueError:
        choices = ", ".join(policy.value for policy in ModelCallPolicy)
        raise ValueError(f"model_calls must be one of {choices}, got {value!r}") from None


@dataclass(eq=False, slots=True)
class _Generation:
    """One admitted model call: refusable until it starts delivering."""

    episode: EnvironmentEpisode
    task: asyncio.Task[Any]
    delivering: bool = False
    refused_for: str | None = None


_CURRENT: ContextVar[_Generation | None] = ContextVar("envckpt_model_generation", default=None)


def _refusal(episode: EnvironmentEpisode, checkpoint_id: str) -> ParticipantError:
    return ParticipantError(
        ErrorCode.ADMISSION_CLOSED,
        f"{REFUSED_CALL} for checkpoint {checkpoint_id}: {episode.capture_key} issues it "
        "again from the same turn after resume",
    )


def is_refused_call(error: ParticipantError) -> bool:
    """Whether ``error`` refused a model call already running (not one arriving closed)."""
    return error.code == ErrorCode.ADMISSION_CLOSED and error.detail.startswith(REFUSED_CALL)


def deliver() -> None:
    """The current call starts delivering (a row recorded, a reply sent): never refuse it now.

    Raises the refusal if the call was refused just before (its cancellation
    has not reached an ``await`` yet). Outside a generation it does nothing.
    """
    generation = _CURRENT.get()
    if generation is None:
        return
    if generation.refused_for is not None:
        raise _refusal(generation.episode, generation.refused_for)
    generation.delivering = True


def refused() -> bool:
    """Whether the current call was refused (its capture must record nothing)."""
    generation = _CURRENT.get()
    return generation is not None and generation.refused_for is not None


class ModelCalls:
    """The model calls generating on one participant, and how a prepare treats them."""

    def __init__(
        self, policy: ModelCallPolicy = DEFAULT_MODEL_CALLS, *, wait_share: float = WAIT_SHARE
    ) -> None:
        if not 0.0 <= wait_share <= 1.0:
            raise ValueError(f"wait_share must be within [0, 1], got {wait_share}")
        self.policy = policy
        self.wait_share = wait_share
        self.refused = 0  # calls refused so far (status, metrics)
        self._generating: set[_Generation] = set()

    def refuse_at(self, now: float, deadline_ts: float) -> float | None:
        """When a prepare starting ``now`` refuses what still generates (None: never)."""
        if self.policy is ModelCallPolicy.WAIT:
            return None
        if self.policy is ModelCallPolicy.REFUSE:
            return now
        return now + max(0.0, deadline_ts - now) * self.wait_share

    async def generate(self, episode: EnvironmentEpisode, work: Awaitable[T]) -> T:
        """Run one model call's ``work``; ``admission_closed`` if a prepare refuses it."""
        generation_box: list[_Generation] = []

        async def run() -> T:
            _CURRENT.set(generation_box[0])  # this task's own context: the call's code sees it
            return await work

        task = asyncio.ensure_future(run())
        generation = _Generation(episode, task)
        generation_box.append(generation)
        self._generating.add(generation)
        try:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                if generation.refused_for is not None and task.cancelled():
                    caller = asyncio.current_task()
                    if caller is None or caller.cancelling() == 0:
                        raise _refusal(episode, generation.refused_for) from None
                task.cancel()  # the caller itself was cancelled: stop the call too
                with contextlib.suppress(BaseException):
                    await task
                raise
        finally:
            self._generating.discard(generation)
            if inspect.iscoroutine(work):
                work.close()  # refused before it ever ran: no "never awaited" warning

    def refuse_generating(self, checkpoint_id: str) -> int:
        """Refuse (cancel) every call not yet delivering; how many were refused."""
        count = 0
        for generation in list(self._generating):
            if generation.delivering or generation.task.done() or generation.refused_for:
                continue
            generation.refused_for = checkpoint_id
            generation.task.cancel()
            count += 1
        self.refused += count
        return count

    def generating(self) -> Iterator[EnvironmentEpisode]:
        """The episodes with a call still refusable (inspection)."""
        return (g.episode for g in self._generating if not g.delivering)

    def status(self) -> dict[str, Any]:
        """What ``GET status`` shows under ``model_calls``."""
        return {
            "policy": self.policy.value,
            "wait_share": self.wait_share,
            "in_flight": len(self._generating),
            "refused": self.refused,
        }


async def wait_for_boundary(
    checkpoint_id: str,
    deadline_ts: float,
    *,
    clock: Clock,
    changed: asyncio.Event,
    preparing: Callable[[], bool],
    ready: Callable[[], bool],
    calls: ModelCalls | None,
) -> None:
    """A prepare's wait (outside the core's lock): until ``ready()``, the deadline, or a resume.

    ``changed`` is set whenever a call leaves or the phase changes. With
    ``calls``, what still generates at ``calls.refuse_at`` is refused, and the
    wait goes on for the refused calls to leave.
    """
    refuse_at = None if calls is None else calls.refuse_at(clock.now(), deadline_ts)
    while True:
        changed.clear()
        if not preparing() or ready():
            return
        if calls is not None and refuse_at is not None and clock.now() >= refuse_at:
            refuse_at = None
            refused = calls.refuse_generating(checkpoint_id)
            if refused:
                logs.get_logger("envckpt.participant").info(
                    "model calls refused", checkpoint_id=checkpoint_id, refused=refused
                )
            continue  # the refused calls leave their admit and set ``changed``
        until = deadline_ts if refuse_at is None else min(refuse_at, deadline_ts)
        if not await clock.wait_for_event(changed, until) and until >= deadline_ts:
            return
