"""The open checkpoint of one participant, and the ids it has finished.

``OpenCheckpoint`` holds everything that exists only while one checkpoint is
open on the participant (its id, its lease, the recorded prepare and restore
replies, the commit's write): the core keeps one or None, so ending a
checkpoint is one assignment and nothing of it outlives it. ``FinishedIds``
remembers the last ids that ended, so a stale coordinator's late call is
refused (``stale_checkpoint``) instead of acting on a newer checkpoint.

    open_ = OpenCheckpoint("c1")
    open_.arm_lease(deadline_ts, grace=600.0)   # never moves the lease earlier
    finished.add("c1"); finished.refuse("c1")     # ParticipantError(stale_checkpoint)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant.commit_write import CommitWrite
from envckpt.participant.scope_table import ScopeTable
from envckpt.protocol import ErrorCode, Phase

FINISHED_IDS_KEPT = 64

# A restore's arguments (directory, scope): a replay must match them.
RestoreArgs = tuple[str, ScopeTable]


@dataclass(slots=True)
class OpenCheckpoint:
    """What exists only while one checkpoint is open here."""

    checkpoint_id: str
    lease_expires_at: float | None = None
    # prepared and later: the ready reply, replayed verbatim, and its restarts.
    prepare_reply: dict[str, Any] | None = None
    prepared_restarts: frozenset[EnvironmentEpisode] = frozenset()
    commit: CommitWrite | None = None
    # restored: the arguments a replay must match, and its reply made again
    # (not kept: it lists every restored episode, one new string each).
    restore: tuple[RestoreArgs, Callable[[], dict[str, Any]]] | None = None

    def arm_lease(self, deadline_ts: float, *, grace: float) -> None:
        """lease := max(lease, deadline_ts + grace) (protocol.md 3)."""
        candidate = deadline_ts + grace
        previous = self.lease_expires_at
        self.lease_expires_at = candidate if previous is None else max(previous, candidate)


class FinishedIds:
    """The last ``FINISHED_IDS_KEPT`` checkpoint ids that ended here, oldest first."""

    def __init__(self) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, checkpoint_id: object) -> bool:
        return checkpoint_id in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def add(self, checkpoint_id: str) -> None:
        self._ids[checkpoint_id] = None
        while len(self._ids) > FINISHED_IDS_KEPT:
            self._ids.popitem(last=False)

    def refuse(self, checkpoint_id: str) -> None:
        """Raise ``stale_checkpoint`` if ``checkpoint_id`` has ended here."""
        if checkpoint_id in self._ids:
            raise ParticipantError(
                ErrorCode.STALE_CHECKPOINT, f"checkpoint {checkpoint_id} has finished"
            )


def restore_reply(
    checkpoint_id: str, source_id: str, scope: ScopeTable, installed: bytes | bytearray
) -> Callable[[], dict[str, Any]]:
    """The restore's reply, made anew at each call: the first answer and every replay."""

    def reply() -> dict[str, Any]:
        return {
            "phase": Phase.RESTORED,
            "checkpoint_id": checkpoint_id,
            "source_checkpoint_id": source_id,
            "restored": scope.next_keys(installed),
        }

    return reply
