"""``take``'s early resume: the environment resumes while the trainer's state is written.

``RolloutSnapshotter.take`` has nothing to do while the environment is
paused, so it leaves the environment's snapshot context (which resumes every
instance) as soon as the capture is checked against the data-plane cut,
instead of after publish. The cut alone keeps the trainer's state consistent:
every data-plane and ledger change of a resumed rollout waits for the cut to
close. The resume is started, not awaited, so a remote call never holds the
cut up::

    early = EarlyResume(env.snapshot(tmp), clock)
    env_snapshot = await early.enter()          # paused, committed
    ...check_against_cut...; early.start()      # resuming, beside the writing
    ...write, publish...                        # on failure: await early.fail(error)
    resumed_at = await early.resumed_at()       # the resume's error, if it failed

Failure rules: before ``start`` a failure leaves the context with the error
(the environment aborts its checkpoint, as any failed snapshot does); after
it the failure waits for the resume, logs the resume's own error, and lets
the snapshotter discard its temporary directory. A cancellation always waits
for the resume to end, so no resume is left running unowned.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager

from envckpt import logs
from envckpt.clock import Clock
from envckpt.interfaces import EnvironmentSnapshot

_log = logs.get_logger("envckpt.snapshotter")


class EarlyResume:
    """The environment's snapshot context, left as soon as its capture is checked."""

    def __init__(
        self, context: AbstractAsyncContextManager[EnvironmentSnapshot | None], clock: Clock
    ) -> None:
        self._context = context
        self._clock = clock
        self._leaving: asyncio.Future[float] | None = None
        # When the resume began (the record's resume phase runs from here).
        self.started_at: float | None = None

    async def enter(self) -> EnvironmentSnapshot | None:
        """Pause and commit the environment (phase 2)."""
        return await self._context.__aenter__()

    def start(self) -> None:
        """Begin resuming the environment; ``resumed_at`` says when it ended."""
        self.started_at = self._clock.now()
        self._leaving = asyncio.ensure_future(self._leave())

    async def _leave(self) -> float:
        await self._context.__aexit__(None, None, None)
        return self._clock.now()

    async def fail(self, error: BaseException) -> None:
        """The snapshot failed: abort the checkpoint, or wait for the resume under way."""
        if self._leaving is None:
            await self._context.__aexit__(type(error), error, error.__traceback__)
            return
        await _outcome(self._leaving)
        if not self._leaving.cancelled() and self._leaving.exception() is not None:
            _log.warning(
                "resuming the environment failed; participants resume at lease expiry",
                error=f"{type(self._leaving.exception()).__name__}: {self._leaving.exception()}",
            )

    async def resumed_at(self) -> float:
        """When the resume ended; its error if it failed (reported after publish)."""
        if self._leaving is None:
            raise RuntimeError("the early resume was never started")
        await _outcome(self._leaving)
        return self._leaving.result()


async def _outcome(leaving: asyncio.Future[float]) -> None:
    """Wait for ``leaving`` through cancellations, then let a cancellation go on."""
    cancelled = False
    while not leaving.done():
        try:
            await asyncio.wait({leaving})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not leaving.cancelled():
            leaving.exception()  # retrieved: the cancellation goes on
        raise asyncio.CancelledError
