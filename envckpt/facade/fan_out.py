"""Calling every Gym instance at once, and the task helpers the facade's flows share.

    fan_out = FanOut(instances)
    results, errors = await fan_out.collect(lambda i: i.state())     # errors kept apart
    replies = await fan_out.require("commit", lambda i: i.commit(...))  # one error if any failed

An error from several instances becomes one: the most severe kind wins (a
protocol violation or a corrupt checkpoint is not a reason to retry), and only
when every instance was merely unavailable is the result
``GymCheckpointUnavailable`` naming each instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from envckpt.errors import GymCheckpointUnavailable
from envckpt.facade.instances import InstanceClient

T = TypeVar("T")


def aggregate(operation: str, errors: Mapping[str, BaseException]) -> BaseException:
    """One error for a fan-out: the most severe kind wins, unavailability last."""
    for error in errors.values():
        if not isinstance(error, GymCheckpointUnavailable):
            return error
    failures = {iid: str(error) for iid, error in sorted(errors.items())}
    return GymCheckpointUnavailable(
        f"{operation} failed on {len(errors)} instance(s): {failures}",
        operation=operation,
        failures=failures,
    )


# Calls in flight at once. Each is mostly waiting on its deployment, so a few
# hundred keep the network busy; starting one task per instance at 100k
# instances costs more in task objects and garbage collection than it gains.
DEFAULT_CONCURRENCY = 256


class FanOut:
    """Concurrent calls to Gym instances, results and errors keyed by instance id."""

    def __init__(
        self, instances: Mapping[str, InstanceClient], *, concurrency: int = DEFAULT_CONCURRENCY
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.instances = dict(instances)
        self.concurrency = concurrency

    async def collect(
        self,
        call: Callable[[InstanceClient], Awaitable[T]],
        instances: Iterable[InstanceClient] | None = None,
        *,
        seconds: dict[str, float] | None = None,
    ) -> tuple[dict[str, T], dict[str, BaseException]]:
        """Call every instance (or ``instances``); return the results and the errors.

        At most ``concurrency`` calls run at once; every instance is called
        whatever the others do, and an error is kept with its instance.
        ``seconds``, if given, receives how long each instance's call took
        (monotonic clock, failed calls included).
        """
        # Each id read once: at 100k instances every read of instance_id counts.
        chosen = list(
            self.instances.items()
            if instances is None
            else ((instance.instance_id, instance) for instance in instances)
        )
        pending = iter(chosen)
        done: dict[str, T] = {}
        failed: dict[str, BaseException] = {}

        async def worker() -> None:
            for instance_id, instance in pending:
                try:
                    done[instance_id] = await call(instance)
                except Exception as error:
                    failed[instance_id] = error

        async def timed_worker(timings: dict[str, float]) -> None:
            # Two monotonic stamps per instance: which one held the pause.
            stamp = time.perf_counter
            for instance_id, instance in pending:
                started = stamp()
                try:
                    done[instance_id] = await call(instance)
                except Exception as error:
                    failed[instance_id] = error
                finally:
                    timings[instance_id] = stamp() - started

        workers = [
            asyncio.ensure_future(worker() if seconds is None else timed_worker(seconds))
            for _ in range(min(self.concurrency, len(chosen)))
        ]
        try:
            ended = await asyncio.gather(*workers, return_exceptions=True)
        finally:
            for task in workers:
                task.cancel()
        # A BaseException (a cancellation, an exit) stopped one worker; the
        # others went on with every remaining instance. It goes on now.
        for outcome in ended:
            if isinstance(outcome, BaseException):
                raise outcome
        # In the order the instances were given, whatever order they finished in.
        results = {iid: done[iid] for iid, _ in chosen if iid in done}
        errors = {iid: failed[iid] for iid, _ in chosen if iid in failed} if failed else {}
        return results, errors

    async def require(
        self,
        operation: str,
        call: Callable[[InstanceClient], Awaitable[T]],
        *,
        seconds: dict[str, float] | None = None,
    ) -> dict[str, T]:
        """Call every instance; every call must succeed, else one aggregated error.

        ``seconds``: as for ``collect``."""
        results, errors = await self.collect(call, seconds=seconds)
        if errors:
            raise aggregate(operation, errors)
        return results


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task (the lease renewer) and wait until it has ended.

    The task's own cancellation and errors end here; a cancellation of the
    caller that arrives while waiting goes on (a cancellation that arrived
    before ``stop`` was called is the caller's business, not counted again).
    """
    if task is None or task.done():
        return
    task.cancel()
    current = asyncio.current_task()
    before = 0 if current is None else current.cancelling()
    try:
        await task
    except asyncio.CancelledError:
        if current is not None and current.cancelling() > before:
            raise
    except Exception:
        return


async def uncancellable(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even if the caller is cancelled meanwhile.

    Resuming must not stop half-way: instances left committed would refuse
    every later snapshot while the trainer already dispatches again. On
    cancellation the work still finishes first, then the cancellation goes on;
    further cancellations meanwhile do not stop it either.
    """
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        # asyncio.wait never cancels the task it waits on.
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # retrieved: the caller gets the cancellation
        raise
