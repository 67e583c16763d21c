"""The job's snapshot schedule: when to take one, and what a failed one means.

    loop = SnapshotLoop(snapshotter, policy=SnapshotPolicy(every_seconds=2.0))
    await loop.run(stop)              # until ``stop`` is set; raises SnapshotsFailing
    loop.request_now()                # "snapshot now" (SIGUSR1): wakes the timer
    result = await loop.snapshot_once()

Rules (``SnapshotPolicy``):

* **Adaptive interval.** The next timer snapshot comes ``every_seconds``
  after the last one ended, and never sooner than ``min_running_ratio``
  times the longest of the last three pauses: the environment runs at least
  (by default) three times longer than it is paused, however slow the
  machine, and one short pause does not let the next snapshot come early.
* **No silent loss.** Every failure is already one ``snapshot_failed`` log
  event (the snapshotter's); the loop counts it in the job report and in
  ``on_progress("snapshot_failed")``, and retries after a backoff
  (``retry_initial_seconds``, doubling, at most ``retry_max_seconds``).
* **Stop when unprotected.** After ``max_consecutive_failures`` failures in a
  row, ``SnapshotsFailing`` ends the job (non-zero exit): a job that cannot
  save its rollouts must not look healthy. With ``keep_running_unprotected``
  the job goes on and every failure logs a warning that it is unprotected.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from envckpt import logs
from envckpt.trainer.job_errors import SnapshotsFailing
from envckpt.trainer.snapshotter import RolloutSnapshotter, SnapshotResult

_log = logs.get_logger("envckpt.snapshot_loop")


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """How often to snapshot, and how failures are handled."""

    every_seconds: float | None = None
    min_running_ratio: float = 3.0
    max_consecutive_failures: int = 3
    keep_running_unprotected: bool = False
    retry_initial_seconds: float = 0.5
    retry_max_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.every_seconds is not None and self.every_seconds <= 0:
            raise ValueError("every_seconds must be positive (or None: no timer)")
        if self.max_consecutive_failures < 1:
            raise ValueError("max_consecutive_failures must be at least 1")
        if self.min_running_ratio < 0 or self.retry_initial_seconds < 0:
            raise ValueError("ratios and delays must not be negative")

    def next_delay(self, *, last_pause: float | None, consecutive_failures: int) -> float:
        """Seconds to wait before the next timer snapshot (``last_pause``: the one to outrun)."""
        if consecutive_failures > 0:
            backoff = self.retry_initial_seconds * 2.0 ** (consecutive_failures - 1)
            return float(min(backoff, self.retry_max_seconds))
        every = self.every_seconds or 0.0
        if last_pause is None:
            return every
        return max(every, self.min_running_ratio * last_pause)


@dataclass
class SnapshotCounts:
    """What the loop saw: published results and failure reasons, in order."""

    published: list[SnapshotResult] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


class SnapshotLoop:
    """Takes the job's timer and on-demand snapshots under one ``SnapshotPolicy``."""

    def __init__(
        self,
        snapshotter: RolloutSnapshotter,
        *,
        policy: SnapshotPolicy | None = None,
        counts: SnapshotCounts | None = None,
        on_progress: Callable[[str, Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.snapshotter = snapshotter
        self.policy = policy or SnapshotPolicy()
        self.counts = counts or SnapshotCounts()
        self.on_progress = on_progress or (lambda event, fields: None)
        self._now = asyncio.Event()
        self._pauses: collections.deque[float] = collections.deque(maxlen=3)

    def request_now(self) -> None:
        """Take a snapshot as soon as the loop can (it wakes from its wait)."""
        self._now.set()

    async def snapshot_once(self, *, reason: str = "requested") -> SnapshotResult | None:
        """One snapshot; a failure is counted and returns None, or raises ``SnapshotsFailing``."""
        try:
            result = await self.snapshotter.take(reason=reason)
        except Exception as error:
            self._failed(f"{type(error).__name__}: {error}", error)
            return None
        paused = result.metrics.get("snapshot_paused_seconds")
        if paused is not None:
            self._pauses.append(paused)
        self.counts.published.append(result)
        self.on_progress("snapshot", {"result": result, "reason": reason})
        return result

    async def run(self, stop: asyncio.Event, *, every_seconds: float | None = None) -> None:
        """Snapshot on the adaptive timer (and on request) until ``stop`` is set."""
        policy = self.policy
        if every_seconds is not None:
            policy = replace(policy, every_seconds=every_seconds)
        timer = policy.every_seconds is not None
        while not stop.is_set():
            delay = policy.next_delay(
                last_pause=max(self._pauses, default=None),
                consecutive_failures=self.snapshotter.consecutive_failures,
            )
            woken_by = await self._wait(stop, delay if timer else None)
            if woken_by == "stop":
                return
            await self.snapshot_once(reason=woken_by)

    async def _wait(self, stop: asyncio.Event, delay: float | None) -> str:
        waits: dict[asyncio.Future[Any], str] = {
            asyncio.ensure_future(stop.wait()): "stop",
            asyncio.ensure_future(self._now.wait()): "requested",
        }
        if delay is not None:
            waits[asyncio.ensure_future(self.snapshotter.clock.sleep(delay))] = "timer"
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
        woken = {waits[waiter] for waiter in done}
        if "stop" in woken:
            return "stop"
        if "requested" in woken:
            self._now.clear()
            return "requested"
        return "timer"

    def _failed(self, reason: str, error: Exception) -> None:
        consecutive = self.snapshotter.consecutive_failures
        self.counts.failures.append(reason)
        self.on_progress("snapshot_failed", {"reason": reason, "consecutive": consecutive})
        limit = self.policy.max_consecutive_failures
        if self.policy.keep_running_unprotected:
            _log.warning(
                "snapshots are failing and the job runs unprotected: a crash now loses "
                "every turn since the last published snapshot",
                consecutive_failures=consecutive,
                reason=reason,
            )
            return
        if consecutive >= limit:
            raise SnapshotsFailing(
                f"{consecutive} snapshots in a row failed (limit {limit}); stopping rather "
                f"than running unprotected. Last: {reason}",
                consecutive=consecutive,
                last_reason=reason,
            ) from error
