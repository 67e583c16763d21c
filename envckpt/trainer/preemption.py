"""Preemption and "snapshot now": what a job does on SIGTERM and SIGUSR1.

    signals = JobSignals(grace_seconds=30.0)
    signals.install()                      # inside the job's event loop
    job = RolloutJob(..., signals=signals, on_final_snapshot=stop_environment)
    report = await job.run(snapshot_every=2.0)
    sys.exit(report.exit_code)             # JobExit.FINISHED, PREEMPTED or PREEMPTED_UNSAVED

Schedulers (SLURM, Kubernetes) send SIGTERM and, a grace period later,
SIGKILL. A snapshot takes well under a second, so the first SIGTERM asks for
a final one: the job stops dispatching, takes it before ``grace_seconds``
have passed (an absolute deadline from the signal), stops its rollouts while
the environment is still paused, and ends with ``JobExit.PREEMPTED``. The
job's ``on_final_snapshot`` hook runs at that moment too: a deployment that
stops its Gym servers there lets no turn run past the snapshot (a
preempted node loses that work anyway).

A second SIGTERM, or the deadline, aborts the final snapshot: cancelled
before its rename it leaves nothing (the previous snapshot stands, exit
``PREEMPTED_UNSAVED``); from the rename on it completes whole. Never half
published. SIGUSR1 asks for a snapshot now and the job runs on. Both sets of
signals are configurable.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from envckpt import logs
from envckpt.clock import Clock, SystemClock, remaining
from envckpt.trainer.snapshotter import RolloutSnapshotter, SnapshotResult

_log = logs.get_logger("envckpt.preemption")


class JobSignals:
    """The job's preemption state and its signal handlers."""

    def __init__(
        self,
        *,
        grace_seconds: float = 30.0,
        clock: Clock | None = None,
        preempt_signals: Sequence[int] = (signal.SIGTERM,),
        snapshot_signals: Sequence[int] = (signal.SIGUSR1,),
    ) -> None:
        if grace_seconds <= 0:
            raise ValueError("grace_seconds must be positive")
        self.grace_seconds = grace_seconds
        self.clock = clock or SystemClock()
        self.preempt_signals = tuple(preempt_signals)
        self.snapshot_signals = tuple(snapshot_signals)
        self.preempted = asyncio.Event()
        self.aborted = asyncio.Event()
        self.deadline_ts: float | None = None
        self._snapshot_listeners: list[Callable[[], None]] = []
        self._installed: list[tuple[asyncio.AbstractEventLoop, int]] = []

    def preempt(self) -> None:
        """First call: take a final snapshot before the grace deadline. Second: abort it."""
        if not self.preempted.is_set():
            self.deadline_ts = self.clock.now() + self.grace_seconds
            self.preempted.set()
            _log.warning(
                "preempted: taking a final snapshot, then exiting",
                grace_seconds=self.grace_seconds,
            )
        elif not self.aborted.is_set():
            self.aborted.set()
            _log.warning("preempted again: aborting the final snapshot")

    def snapshot_now(self) -> None:
        """Ask every listener (the job's snapshot loop) for a snapshot now."""
        for listener in list(self._snapshot_listeners):
            listener()

    def on_snapshot_request(self, listener: Callable[[], None]) -> None:
        self._snapshot_listeners.append(listener)

    def install(self) -> None:
        """Route the signals to ``preempt`` and ``snapshot_now`` in the running loop.

        Installing again replaces the handlers (say, after a library that
        installed its own); the preemption state is kept.
        """
        self.uninstall()
        loop = asyncio.get_running_loop()
        for signum in self.preempt_signals:
            loop.add_signal_handler(signum, self.preempt)
            self._installed.append((loop, signum))
        for signum in self.snapshot_signals:
            loop.add_signal_handler(signum, self.snapshot_now)
            self._installed.append((loop, signum))

    def uninstall(self) -> None:
        for loop, signum in self._installed:
            with contextlib.suppress(RuntimeError, ValueError):
                loop.remove_signal_handler(signum)
        self._installed.clear()


@dataclass(frozen=True, slots=True)
class FinalSnapshot:
    """The final snapshot (None: not taken) and, if it was cut short, why."""

    result: SnapshotResult | None
    aborted: str = ""


async def take_final_snapshot(
    snapshotter: RolloutSnapshotter,
    signals: JobSignals,
    *,
    inside: Callable[[SnapshotResult], Awaitable[None]],
    retry_seconds: float = 0.2,
) -> FinalSnapshot:
    """Publish one snapshot before ``signals.deadline_ts`` and run ``inside`` while paused.

    Failed attempts are retried until the deadline; the second signal or the
    deadline cancels the attempt in progress (whole or nothing, see above).
    """
    published_before = len(snapshotter.history)
    deadline = signals.deadline_ts
    if deadline is None:
        deadline = snapshotter.clock.now() + signals.grace_seconds
    attempts = asyncio.ensure_future(_attempts(snapshotter, inside, retry_seconds))
    abort = asyncio.ensure_future(signals.aborted.wait())
    try:
        done, _ = await asyncio.wait(
            {attempts, abort},
            timeout=remaining(deadline, snapshotter.clock),
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        abort.cancel()
    if attempts in done:
        return FinalSnapshot(attempts.result())
    why = "a second preemption signal" if signals.aborted.is_set() else "the grace deadline"
    attempts.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await attempts
    published = snapshotter.history[published_before:]
    result = published[-1] if published else None
    _log.warning(
        "final snapshot cut short",
        by=why,
        published=None if result is None else result.checkpoint_id,
    )
    return FinalSnapshot(result, aborted=why)


async def _attempts(
    snapshotter: RolloutSnapshotter,
    inside: Callable[[SnapshotResult], Awaitable[None]],
    retry_seconds: float,
) -> SnapshotResult:
    while True:
        result: SnapshotResult | None = None
        try:
            async with snapshotter.snapshot(reason="final") as result:
                await inside(result)
            return result
        except Exception:
            if result is not None:
                return result  # published; only leaving it (resume, the hook) failed
        await snapshotter.clock.sleep(retry_seconds)
