"""What one participant did since it started: the ``counters`` of its status reply.

A trainer's telemetry sees each call from its side; a participant's own
counters say what it did, whoever called: checkpoints opened, commits
written (records, seconds), restores, resumes, lease expiries, retired
attempts, and episode work admitted or refused by code::

    counters = ParticipantCounters()
    counters.committed(records=12, seconds=0.03)
    status["counters"] = counters.to_json()

Plain integer and float updates, no lock and no log line: they run on the
participant's event loop inside calls it already makes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envckpt.errors import ParticipantError
from envckpt.protocol import ErrorCode

EXPIRE = "expire"


@dataclass(slots=True)
class AdmissionCounters:
    """Calls of episode work admitted, and refused per code (status and metrics)."""

    admitted: int = 0
    refused: dict[str, int] = field(default_factory=dict)

    def refused_with(self, code: ErrorCode, detail: str) -> ParticipantError:
        """Count one refusal and return the error to raise."""
        # Keyed by the plain string: a StrEnum key is refused by orjson (the
        # workers' private status replies), so a status after any refusal failed.
        self.refused[code.value] = self.refused.get(code.value, 0) + 1
        return ParticipantError(code, detail)


@dataclass(slots=True)
class ParticipantCounters(AdmissionCounters):
    """Admission counts (``AdmissionCounters``) and the control calls' own."""

    checkpoints_opened: int = 0
    commits: int = 0
    commit_failures: int = 0
    records_written: int = 0
    commit_seconds_total: float = 0.0
    last_commit_seconds: float = 0.0
    restores: int = 0
    resumes: int = 0
    lease_expiries: int = 0
    retired_attempts: int = 0

    def committed(self, *, records: int, seconds: float) -> None:
        """One commit write published ``records`` records in ``seconds``."""
        self.commits += 1
        self.records_written += records
        self.commit_seconds_total += seconds
        self.last_commit_seconds = seconds

    def ended(self, trigger: str) -> None:
        """An open checkpoint ended: by resume (which also aborts) or by lease expiry."""
        if trigger == EXPIRE:
            self.lease_expiries += 1
        else:
            self.resumes += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "admitted": self.admitted,
            "refused": dict(sorted(self.refused.items())),
            "checkpoints_opened": self.checkpoints_opened,
            "commits": self.commits,
            "commit_failures": self.commit_failures,
            "records_written": self.records_written,
            "commit_seconds_total": self.commit_seconds_total,
            "last_commit_seconds": self.last_commit_seconds,
            "restores": self.restores,
            "resumes": self.resumes,
            "lease_expiries": self.lease_expiries,
            "retired_attempts": self.retired_attempts,
        }
