"""The record of one restore, built by the restorer from monotonic stamps of its steps.

    clock = RestoreClock()                 # started now
    ...check candidates...;  clock.checked()
    async with env.restored(path) as restored:
        clock.environment_restored()
        ...ledger...;        clock.ledger_done()
    clock.resumed()
    record = clock.restored_record(snapshot=..., plan=plan, restored=restored, ...)

Stamps are ``time.monotonic`` (durations) anchored to one wall-clock
reading (``time.time``) for the record's start and end.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from envckpt.interfaces import RestoredEnvironmentRollouts
from envckpt.telemetry.failures import failures_by_code
from envckpt.telemetry.latency import LatencySummary
from envckpt.telemetry.restore_record import (
    KEPT_ROLLOUTS,
    ContinuedRollout,
    RestoreOutcome,
    RestorePhases,
    RestoreTelemetry,
)
from envckpt.trainer.ledger_entry import LedgerEntry

T = TypeVar("T")


@dataclass(slots=True)
class RestoreClock:
    """Monotonic stamps of one restore's steps (None: the step was not reached)."""

    wall_start: float = field(default_factory=time.time)
    start: float = field(default_factory=time.monotonic)
    checked_at: float | None = None
    environment_at: float | None = None
    ledger_at: float | None = None
    resumed_at: float | None = None

    def checked(self) -> None:
        self.checked_at = time.monotonic()

    def environment_restored(self) -> None:
        self.environment_at = time.monotonic()

    def ledger_done(self) -> None:
        self.ledger_at = time.monotonic()

    def resumed(self) -> None:
        self.resumed_at = time.monotonic()

    def phases(self) -> RestorePhases:
        marks = [self.start, self.checked_at, self.environment_at, self.ledger_at, self.resumed_at]
        spans = [
            0.0 if begin is None or end is None else max(0.0, end - begin)
            for begin, end in itertools.pairwise(marks)
        ]
        return RestorePhases(*spans)

    def wall(self) -> tuple[float, float]:
        """(started, ended) in Unix seconds."""
        return self.wall_start, self.wall_start + (time.monotonic() - self.start)

    def _record(
        self, outcome: RestoreOutcome, *, snapshot: str | None, considered: int, refused: int
    ) -> RestoreTelemetry:
        """What every outcome records: when, each step's seconds, the snapshots looked at."""
        started, ended = self.wall()
        return RestoreTelemetry(
            outcome=outcome,
            started_at=started,
            ended_at=ended,
            snapshot=snapshot,
            phases=self.phases(),
            considered=considered,
            refused=refused,
        )

    def restored_record(
        self,
        *,
        snapshot: str,
        considered: int,
        refused: int,
        continued: Sequence[LedgerEntry],
        abandoned: Sequence[LedgerEntry],
        cleared_rows: int,
        restored: RestoredEnvironmentRollouts | None,
    ) -> RestoreTelemetry:
        latencies = dict(restored.instance_seconds) if restored is not None else {}
        return replace(
            self._record(
                RestoreOutcome.RESTORED, snapshot=snapshot, considered=considered, refused=refused
            ),
            continued=len(continued),
            restarted=len(abandoned),
            cleared_rows=cleared_rows,
            instance_count=len(latencies),
            instance_latency=LatencySummary.of(latencies),
            continued_rollouts=_kept(
                ContinuedRollout(e.rollout_id, e.attempt, e.instance_id) for e in continued
            ),
            restarted_rollouts=_kept(e.rollout_id for e in abandoned),
        )

    def fresh_record(self, *, considered: int, refused: int) -> RestoreTelemetry:
        return self._record(
            RestoreOutcome.FRESH, snapshot=None, considered=considered, refused=refused
        )

    def failed_record(
        self, *, snapshot: str | None, considered: int, refused: int, error: BaseException
    ) -> RestoreTelemetry:
        return replace(
            self._record(
                RestoreOutcome.FAILED, snapshot=snapshot, considered=considered, refused=refused
            ),
            failure=f"{type(error).__name__}: {error}"[:2000],
            failures_by_code=failures_by_code(error),
        )


def _kept(items: Iterable[T]) -> tuple[T, ...]:
    kept: list[T] = []
    for item in items:
        if len(kept) == KEPT_ROLLOUTS:
            break
        kept.append(item)
    return tuple(kept)
