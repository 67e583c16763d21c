"""The data-plane barrier: mutation sections, checkpoint sections and their cuts.

Every change to the trainer's data (staging rows written or cleared, ledger
transitions) runs inside a **mutation section**; any number of them may run at
once. A **checkpoint section** waits until the active mutations have finished,
keeps new ones out while it is open, and yields a **cut**: the proof that no
mutation is running. A cut is a capability, valid only while its section is
open; ``require_live()`` raises ``CutExpired`` afterwards, so a cut that leaks
out of its section cannot be used to mutate anything.

    barrier = DataPlaneBarrier()

    async with barrier.mutation() as cut:        # normal running
        ledger.dispatch(cut, rollout_id)
        data_plane.put(cut, key, capture_key, payload)

    async with barrier.checkpoint() as cut:      # a rollout snapshot
        await snapshot.check_against_cut(cut)
        await data_plane.snapshot_to(cut, path)
        ledger.save(ledger_path)
    cut.require_live()                           # raises CutExpired

Rules:

* A checkpoint request takes priority: once one is waiting, new mutations wait
  behind it, so a steady stream of mutations cannot starve a snapshot.
* Sections do not nest within one task: entering a section while the same
  task holds one of the same barrier raises ``NestedSection`` at once instead
  of deadlocking. A task started inside a section is another task and simply
  waits its turn, so do not await, inside a checkpoint section, a task that
  enters a section of the same barrier.
* Never make a remote call to the environment while holding the checkpoint
  section: one slow participant would stall every data write.

The barrier is an asyncio object: use it from one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from envckpt import logs
from envckpt.clock import Clock, SystemClock, remaining
from envckpt.errors import DeadlineExceeded, EnvckptError


class SectionKind(StrEnum):
    """Which kind of section issued a cut."""

    MUTATION = "mutation"
    CHECKPOINT = "checkpoint"


class CutExpired(EnvckptError, RuntimeError):
    """A cut was used after the section that issued it ended (a caller bug)."""

    _fields = ("message", "kind")

    def __init__(self, message: str, *, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class NestedSection(EnvckptError, RuntimeError):
    """A task asked for a barrier section while already holding one (it would deadlock)."""

    _fields = ("message", "held", "requested")

    def __init__(self, message: str, *, held: str = "", requested: str = "") -> None:
        super().__init__(message)
        self.held = held
        self.requested = requested


class Cut:
    """A capability issued by one barrier section; live only while the section is open.

    Satisfies ``envckpt.interfaces.MutationCut``. Both section kinds issue one:
    ``kind`` says which.
    """

    __slots__ = ("_kind", "_live")

    def __init__(self, kind: SectionKind) -> None:
        self._kind = kind
        self._live = True

    @property
    def kind(self) -> SectionKind:
        return self._kind

    @property
    def live(self) -> bool:
        return self._live

    def require_live(self) -> None:
        """Raise ``CutExpired`` if the section that issued this cut has ended."""
        if not self._live:
            raise CutExpired(
                f"the {self._kind} cut was used after its section ended",
                kind=str(self._kind),
            )

    def _expire(self) -> None:
        self._live = False

    def __repr__(self) -> str:
        return f"Cut({self._kind.value}, live={self._live})"


@dataclass(slots=True)
class BarrierStats:
    """Counters for metrics; wait times are seconds on the barrier's clock.

    The barrier counts into its own; ``DataPlaneBarrier.stats`` hands out copies.
    """

    checkpoint_sections: int = 0
    checkpoint_wait_seconds: float = 0.0
    mutation_sections: int = 0
    mutation_waits: int = 0
    mutation_wait_seconds: float = 0.0


class DataPlaneBarrier:
    """Mutation sections run together; a checkpoint section runs alone and wins ties."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or SystemClock()
        self._active_mutations = 0
        self._checkpoint_active = False
        self._checkpoints_waiting = 0
        self._waiters: set[asyncio.Future[None]] = set()
        # The section each task holds. Keyed by task, not a context variable: a
        # task started inside a section inherits the context but is free to
        # wait for the barrier like any other task.
        self._holders: dict[asyncio.Task[Any], Cut] = {}
        self._counts = BarrierStats()

    @property
    def stats(self) -> BarrierStats:
        """A copy of the counters as they are now."""
        return replace(self._counts)

    @property
    def active_mutations(self) -> int:
        return self._active_mutations

    @property
    def checkpoints_waiting(self) -> int:
        return self._checkpoints_waiting

    @property
    def checkpoint_active(self) -> bool:
        return self._checkpoint_active

    @contextlib.asynccontextmanager
    async def mutation(self, *, deadline_ts: float | None = None) -> AsyncIterator[Cut]:
        """Run a mutation section; waits while a checkpoint section is open or waiting.

        ``deadline_ts`` (absolute, barrier clock) bounds the wait; past it the
        section is not entered and ``DeadlineExceeded`` is raised.
        """
        self._refuse_nesting(SectionKind.MUTATION)
        if not self._mutation_may_enter():
            started = self._clock.now()
            await self._wait_until(self._mutation_may_enter, SectionKind.MUTATION, deadline_ts)
            self._counts.mutation_waits += 1
            self._counts.mutation_wait_seconds += self._clock.now() - started
        # No await between the wait and this increment: the admission is atomic.
        self._active_mutations += 1
        self._counts.mutation_sections += 1
        cut = Cut(SectionKind.MUTATION)
        owner = self._hold(cut)
        try:
            yield cut
        finally:
            cut._expire()
            self._release(owner, cut)
            self._active_mutations -= 1
            self._wake()

    @contextlib.asynccontextmanager
    async def checkpoint(self, *, deadline_ts: float | None = None) -> AsyncIterator[Cut]:
        """Run a checkpoint section: wait for active mutations, block new ones, yield a cut.

        ``deadline_ts`` (absolute, barrier clock) bounds the wait for mutations
        to drain; past it ``DeadlineExceeded`` is raised and mutations go on.
        """
        self._refuse_nesting(SectionKind.CHECKPOINT)
        started = self._clock.now()
        # Counted before waiting so new mutations queue behind this request.
        self._checkpoints_waiting += 1
        try:
            await self._wait_until(self._checkpoint_may_enter, SectionKind.CHECKPOINT, deadline_ts)
        except BaseException:
            self._checkpoints_waiting -= 1
            self._wake()  # mutations held back by this request may go now
            raise
        self._checkpoints_waiting -= 1
        self._checkpoint_active = True
        entered = self._clock.now()
        self._counts.checkpoint_sections += 1
        self._counts.checkpoint_wait_seconds += entered - started
        cut = Cut(SectionKind.CHECKPOINT)
        owner = self._hold(cut)
        try:
            yield cut
        finally:
            cut._expire()
            self._release(owner, cut)
            self._checkpoint_active = False
            self._wake()
            logs.get_logger("envckpt.barrier").debug(
                "barrier.checkpoint_section",
                waited_seconds=entered - started,
                held_seconds=self._clock.now() - entered,
            )

    def _mutation_may_enter(self) -> bool:
        return not self._checkpoint_active and self._checkpoints_waiting == 0

    def _checkpoint_may_enter(self) -> bool:
        return not self._checkpoint_active and self._active_mutations == 0

    def _refuse_nesting(self, requested: SectionKind) -> None:
        task = asyncio.current_task()
        cut = self._holders.get(task) if task is not None else None
        if cut is not None and cut.live:
            raise NestedSection(
                f"cannot enter a {requested} section while holding a {cut.kind} section "
                "of the same barrier in this task; it would wait on itself",
                held=str(cut.kind),
                requested=str(requested),
            )

    def _hold(self, cut: Cut) -> asyncio.Task[Any] | None:
        task = asyncio.current_task()
        if task is not None:
            self._holders[task] = cut
        return task

    def _release(self, owner: asyncio.Task[Any] | None, cut: Cut) -> None:
        # Compare the cut too: if the section's generator is finalised late,
        # the task may already hold a newer section that must stay recorded.
        if owner is not None and self._holders.get(owner) is cut:
            del self._holders[owner]

    async def _wait_until(
        self,
        ready: Callable[[], bool],
        kind: SectionKind,
        deadline_ts: float | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        delay = None if deadline_ts is None else remaining(deadline_ts, self._clock)
        try:
            async with asyncio.timeout(delay):
                while not ready():
                    waiter: asyncio.Future[None] = loop.create_future()
                    self._waiters.add(waiter)
                    try:
                        await waiter
                    finally:
                        self._waiters.discard(waiter)
        except TimeoutError as exc:
            raise DeadlineExceeded(
                f"the {kind} section was not entered before its deadline",
                deadline_ts=deadline_ts if deadline_ts is not None else 0.0,
            ) from exc

    def _wake(self) -> None:
        # Wake everyone and let each re-check its own condition: a waiter that
        # is cancelled after being woken cannot swallow the wake-up of another.
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
