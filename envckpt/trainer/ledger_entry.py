"""The recovery ledger's values: one rollout's entry, the restart plan, and the ledger's errors.

``envckpt.trainer.ledger`` keeps one ``LedgerEntry`` per rollout; its status
moves only along the rows of ``ROLLOUT_LEDGER`` (``envckpt.machines.tables``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint, EnvckptError, ProtocolViolation
from envckpt.ids import validate_attempt, validate_rollout_id
from envckpt.machines.tables import LedgerStatus


class LedgerError(EnvckptError, RuntimeError):
    """A ledger call the rollout's status does not allow (a caller bug; nothing changed)."""

    _fields = ("message", "rollout_id", "action", "status")

    def __init__(
        self, message: str, *, rollout_id: str = "", action: str = "", status: str = ""
    ) -> None:
        super().__init__(message)
        self.rollout_id = rollout_id
        self.action = action
        self.status = status


class LedgerCorrupt(CorruptCheckpoint):
    """A saved ledger is truncated, damaged, foreign, or of another schema."""


class RestoreMismatch(ProtocolViolation):
    """The environment restored rollouts the ledger does not hold as restorable."""

    _fields = ("message", "mismatches")

    def __init__(self, message: str, *, mismatches: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.mismatches = tuple(mismatches)


class StagingRowSource(Protocol):
    """The part of a data plane the ledger checks snapshots against."""

    def missing_keys(self, keys: Iterable[str]) -> frozenset[str]:
        """The keys of ``keys`` that have no row."""
        ...


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One rollout's current attempt.

    ``restored`` marks an attempt a restore installed on ``instance_id`` that
    has not been re-sent yet: the instance holds it although it is reserved.
    """

    rollout_id: str
    attempt: int
    instance_id: str
    status: LedgerStatus
    staging_keys: tuple[str, ...] = ()
    restored: bool = False

    def __post_init__(self) -> None:
        validate_rollout_id(self.rollout_id)
        validate_attempt(self.attempt)
        if not isinstance(self.instance_id, str) or not self.instance_id:
            raise ValueError("instance_id must be a non-empty string")
        if not isinstance(self.status, LedgerStatus):
            raise ValueError(f"status must be a LedgerStatus, got {self.status!r}")
        if not isinstance(self.staging_keys, tuple) or not all(
            isinstance(key, str) and key for key in self.staging_keys
        ):
            raise ValueError("staging_keys must be a tuple of non-empty strings")
        if len(set(self.staging_keys)) != len(self.staging_keys):
            raise ValueError("staging_keys must not repeat")
        if not isinstance(self.restored, bool):
            raise ValueError("restored must be a bool")
        if self.restored and self.status is not LedgerStatus.RESERVED:
            raise ValueError("only a reserved attempt can be waiting for redispatch")

    @property
    def episode(self) -> EnvironmentEpisode:
        return EnvironmentEpisode(self.rollout_id, self.attempt)

    @property
    def on_instance(self) -> bool:
        """Whether the instance holds this attempt (it was sent, or a restore installed it)."""
        return self.status is LedgerStatus.DISPATCHED or self.restored

    def to_json(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "attempt": self.attempt,
            "instance_id": self.instance_id,
            "status": self.status.value,
            "staging_keys": list(self.staging_keys),
            "restored": self.restored,
        }

    @classmethod
    def from_json(cls, value: object) -> LedgerEntry:
        """Parse ``to_json`` output; raise ValueError otherwise."""
        if not isinstance(value, dict) or set(value) != _ENTRY_FIELDS:
            raise ValueError(f"ledger entry must have exactly {sorted(_ENTRY_FIELDS)}")
        keys = value["staging_keys"]
        if not isinstance(keys, list):
            raise ValueError("staging_keys must be a list")
        return cls(
            rollout_id=value["rollout_id"],
            attempt=value["attempt"],
            instance_id=value["instance_id"],
            status=LedgerStatus(value["status"]),
            staging_keys=tuple(keys),
            restored=value["restored"],
        )


_ENTRY_FIELDS = frozenset(
    {"rollout_id", "attempt", "instance_id", "status", "staging_keys", "restored"}
)


@dataclass(frozen=True, slots=True)
class RestartPlan:
    """What ``prepare_for_restart`` did, for the trainer to act on.

    ``continued``: the new reserved, restored attempts; redispatch them first,
    each to its ``instance_id``. ``abandoned``: rollouts that restart from their
    task (``restart_from_task``). ``keep_staging_keys``: rows still referenced
    (restored keys, continued and sealed rollouts' keys); pass to
    ``clear_orphans``. ``clear_staging_keys``: ledger-known rows nothing
    references any more (``clear_orphans`` also removes rows the ledger never knew).
    """

    continued: tuple[LedgerEntry, ...]
    abandoned: tuple[LedgerEntry, ...]
    keep_staging_keys: frozenset[str]
    clear_staging_keys: frozenset[str]


def parse_dropped_attempt(raw: object) -> tuple[str, EnvironmentEpisode]:
    """One saved ``{instance_id, rollout_id, attempt}``; ValueError if malformed."""
    if not isinstance(raw, dict) or set(raw) != {"instance_id", "rollout_id", "attempt"}:
        raise ValueError("dropped attempt must be {instance_id, rollout_id, attempt}")
    instance = raw["instance_id"]
    if not isinstance(instance, str) or not instance:
        raise ValueError("dropped instance_id must be a non-empty string")
    return instance, EnvironmentEpisode(raw["rollout_id"], raw["attempt"])


def restore_mismatches(
    entries: Mapping[str, LedgerEntry], continued: Iterable[tuple[str, str, int]]
) -> list[str]:
    """Why restored ``(instance_id, rollout_id, attempt)`` triples do not fit the ledger.

    Each must name its rollout's current attempt, once, on the instance the
    ledger places it on, held by that instance.
    """
    problems: list[str] = []
    seen: set[str] = set()
    for instance_id, rollout_id, attempt in sorted(continued):
        entry = entries.get(rollout_id)
        if rollout_id in seen:
            problems.append(f"{rollout_id}: restored more than once")
        elif entry is None:
            problems.append(f"{rollout_id}: unknown to the ledger")
        elif entry.attempt != attempt:
            problems.append(
                f"{rollout_id}: restored attempt {attempt}, ledger holds {entry.attempt}"
            )
        elif entry.instance_id != instance_id:
            problems.append(
                f"{rollout_id}: restored on {instance_id}, ledger places it on {entry.instance_id}"
            )
        elif not entry.on_instance:
            problems.append(f"{rollout_id}: ledger status {entry.status} is not restorable")
        seen.add(rollout_id)
    return problems


def dropped_to_json(dropped: Mapping[str, Iterable[EnvironmentEpisode]]) -> list[dict[str, Any]]:
    """Attempts to retire, per instance, as ``parse_dropped_attempt`` reads each back (sorted)."""
    return [
        {"instance_id": instance, "rollout_id": episode.rollout_id, "attempt": episode.attempt}
        for instance in sorted(dropped)
        for episode in sorted(dropped[instance])
    ]
