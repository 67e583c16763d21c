"""The facade's time budgets: seconds, turned into absolute deadlines at each step."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CheckpointTimeouts:
    """Budgets, in seconds, turned into absolute deadlines at each step."""

    prepare_seconds: float = 120.0
    commit_seconds: float = 600.0
    control_seconds: float = 60.0
    restore_seconds: float = 600.0
    renew_interval_seconds: float = 60.0
    resume_attempts: int = 3
