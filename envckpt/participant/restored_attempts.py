"""What the attempt fence keeps of the attempts restores installed: one flag byte per episode.

A restore makes the next attempt of every episode in its scope the rollout's
latest (the saved attempt is superseded), and the attempts it installed wait
unstarted until a call starts them. Kept as a ``dict`` of latest attempts and
a ``set`` of unstarted episodes, that was about 25 MiB for 233,000 episodes
(a dict entry, a set entry, an ``EnvironmentEpisode`` and its key string
each). Here it is the restore's ``ScopeTable`` (which the fence shares with
the open checkpoint) and one byte of flags per scope episode:

* ``ACTIVE``: its next attempt counts as the rollout's latest (until ``forget``);
* ``UNSTARTED``: that next attempt was installed and no call has started it.

    restored = RestoredAttempts.installed(table, installed)   # installed[i]: 1 or 0
    restored.latest("task-7")          # next attempt of its newest active episode, or None
    restored.latests(rollout_ids)      # the same of many, in one walk
    restored.started(episode)          # a call of a restored attempt: no longer unstarted
    restored.forget("task-7")          # its episodes stop counting as latest
    restored.unstarted_outside(scope)  # sorted; no longer unstarted
    both = restored.merged(newer)      # a second restore: one table again
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator

from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.scope_table import ScopeTable

ACTIVE = 1
UNSTARTED = 2
# ``installed`` bytes (0 or 1) to flags, in one C-level pass.
_FLAGS_OF_INSTALLED = bytes([ACTIVE, ACTIVE | UNSTARTED]) + bytes(254)
# Flags to 1 where unstarted, for counting them in C.
_IS_UNSTARTED = bytes(1 if flag & UNSTARTED else 0 for flag in range(256))


class RestoredAttempts:
    """The episodes restores installed, with their flags, and how many are unstarted."""

    __slots__ = ("flags", "table", "unstarted")

    def __init__(self, table: ScopeTable, flags: bytearray) -> None:
        self.table = table
        self.flags = flags
        self.unstarted = flags.translate(_IS_UNSTARTED).count(1)

    @classmethod
    def installed(cls, table: ScopeTable, installed: bytes | bytearray) -> RestoredAttempts:
        """Every episode of ``table`` active; those ``installed`` marks (1) unstarted too."""
        if len(installed) != len(table) or installed.strip(b"\0\1"):
            raise ValueError("installed must hold one 0 or 1 per episode of the table")
        return cls(table, bytearray(installed.translate(_FLAGS_OF_INSTALLED)))

    def latest(self, rollout_id: str) -> int | None:
        """The next attempt of the rollout's newest active episode, or None."""
        attempts, flags = self.table.attempts, self.flags
        newest = None
        for at in self.table.positions(rollout_id):
            if flags[at] & ACTIVE:
                newest = attempts[at] + 1  # attempts ascend within a rollout
        return newest

    def latests(self, rollout_ids: Iterable[str]) -> Iterator[int | None]:
        """``latest`` of each rollout id, in one walk: ids in table order (a commit's
        sorted scope) cost a comparison each, not a bisection."""
        ids, attempts, flags = self.table.rollout_ids, self.table.attempts, self.flags
        count = len(ids)
        at = 0  # always the start of a run of one rollout's episodes
        for rollout_id in rollout_ids:
            if not (at < count and ids[at] == rollout_id):
                at = bisect.bisect_left(ids, rollout_id)
            newest = None
            while at < count and ids[at] == rollout_id:
                if flags[at] & ACTIVE:
                    newest = attempts[at] + 1
                at += 1
            yield newest

    def started(self, episode: EnvironmentEpisode) -> None:
        """A call of ``episode`` started: if a restore installed it, it is no longer unstarted."""
        if not self.unstarted or episode.attempt == 0:
            return
        at = self.table.index(episode.rollout_id, episode.attempt - 1)
        if at >= 0 and self.flags[at] & UNSTARTED:
            self.flags[at] &= ~UNSTARTED
            self.unstarted -= 1

    def forget(self, rollout_id: str) -> None:
        """The rollout's restored attempts stop counting as its latest."""
        for at in self.table.positions(rollout_id):
            self.flags[at] &= ~ACTIVE

    def unstarted_outside(
        self, scope: Iterable[EnvironmentEpisode]
    ) -> tuple[EnvironmentEpisode, ...]:
        """Unstarted attempts ``scope`` leaves out, sorted; they are no longer unstarted."""
        if not self.unstarted:
            return ()
        table, flags = self.table, self.flags
        # Positions whose next attempt the scope names: a walk, as ``latests``.
        kept = bytearray(len(table))
        at = -1
        for episode in scope:
            if episode.attempt:
                found = table.index(episode.rollout_id, episode.attempt - 1, hint=at + 1)
                if found >= 0:
                    kept[found] = 1
                    at = found
        dropped = []
        for at, (flag, named) in enumerate(zip(flags, kept, strict=True)):
            if flag & UNSTARTED and not named:
                dropped.append(EnvironmentEpisode(table.rollout_ids[at], table.attempts[at] + 1))
                flags[at] = flag & ~UNSTARTED
        self.unstarted -= len(dropped)
        return tuple(dropped)  # table order is episode order

    @property
    def empty(self) -> bool:
        """Nothing active, nothing unstarted: the fence may drop it."""
        return not self.flags.strip(b"\0")

    def entries(self) -> tuple[tuple[str, int, int], ...]:
        """``(rollout_id, attempt, flags)`` of every episode that still counts, in table
        order: two restores equal in it answer every question alike."""
        return tuple(_entries(self))

    def merged(self, newer: RestoredAttempts) -> RestoredAttempts:
        """Both restores' episodes in one table (flags of an episode in both combined).

        Episodes whose flags are all clear are dropped: a long-lived process
        that restores again keeps one table the size of what still counts.
        """
        ids: list[str] = []
        attempts: list[int] = []
        flags = bytearray()
        for rollout_id, attempt, flag in heapq.merge(_entries(self), _entries(newer)):
            if ids and ids[-1] == rollout_id and attempts[-1] == attempt:
                flags[-1] |= flag
                continue
            ids.append(rollout_id)
            attempts.append(attempt)
            flags.append(flag)
        return RestoredAttempts(ScopeTable(ids, attempts), flags)


def _entries(restored: RestoredAttempts) -> Iterable[tuple[str, int, int]]:
    table = restored.table
    return (
        entry
        for entry in zip(table.rollout_ids, table.attempts, restored.flags, strict=True)
        if entry[2]
    )
