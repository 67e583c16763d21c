"""A restore's scope as one compact sorted table: rollout ids and attempts, no object per episode.

A restore of 233,000 episodes kept a frozenset of its scope, a set of every
episode it had seen and a list of every episode it installed (each a new
``EnvironmentEpisode`` and rollout id string decoded from the records): about
40 MiB. The table keeps two parallel lists sorted by ``(rollout_id, attempt)``
(each id once per attempt, 16 bytes an episode: small attempts are shared int
objects), and whatever a restore or the fence needs per episode lives in a
``bytearray`` of flags indexed by position.

    table = ScopeTable.of(episodes)               # sorted, each episode once
    at = table.index("task-7", 0)                 # its position, or -1
    at = table.index("task-7", 0, hint=at + 1)    # O(1) when walked in order
    table.positions("task-7")                     # every attempt of the rollout
    table.of_rollouts(["task-7"])                 # their episodes
    table.next_keys(flags)                        # sorted next-attempt keys of flagged ones
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Iterator

from envckpt.episodes import EnvironmentEpisode

_ROLLOUT_ID = operator.attrgetter("rollout_id")
_ATTEMPT = operator.attrgetter("attempt")


class ScopeTable:
    """Episodes sorted by ``(rollout_id, attempt)``, each once, as two parallel lists."""

    __slots__ = ("attempts", "rollout_ids")

    def __init__(self, rollout_ids: list[str], attempts: list[int]) -> None:
        # Sorted and deduplicated by the caller (``of``, ``merged``).
        self.rollout_ids = rollout_ids
        self.attempts = attempts

    @classmethod
    def of(cls, episodes: Iterable[EnvironmentEpisode]) -> ScopeTable:
        """The table of ``episodes`` (any order, repeats allowed)."""
        items = list(episodes)
        rollout_ids = list(map(_ROLLOUT_ID, items))
        if not all(map(operator.lt, rollout_ids, itertools.islice(rollout_ids, 1, None))):
            # Sorted by rollout id alone: a key per episode is the id itself,
            # not a tuple; attempts of one rollout are put in order below.
            items.sort(key=_ROLLOUT_ID)
            rollout_ids = list(map(_ROLLOUT_ID, items))
        attempts = list(map(_ATTEMPT, items))
        del items
        if any(map(operator.eq, rollout_ids, itertools.islice(rollout_ids, 1, None))):
            return cls._with_runs_sorted(rollout_ids, attempts)
        return cls(rollout_ids, attempts)

    @classmethod
    def _with_runs_sorted(cls, rollout_ids: list[str], attempts: list[int]) -> ScopeTable:
        # Several attempts of one rollout (rare): each run sorted by attempt, repeats dropped.
        ids: list[str] = []
        numbers: list[int] = []
        for rollout_id, run in itertools.groupby(
            zip(rollout_ids, attempts, strict=True), key=_first
        ):
            for attempt in sorted({attempt for _, attempt in run}):
                ids.append(rollout_id)
                numbers.append(attempt)
        return cls(ids, numbers)

    def __len__(self) -> int:
        return len(self.rollout_ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScopeTable):
            return NotImplemented
        return self.rollout_ids == other.rollout_ids and self.attempts == other.attempts

    __hash__ = None  # type: ignore[assignment]  # mutable lists inside

    def __repr__(self) -> str:
        return f"ScopeTable({len(self)} episodes)"

    def positions(self, rollout_id: str) -> range:
        """Positions of every attempt of ``rollout_id`` (empty if none)."""
        start = bisect.bisect_left(self.rollout_ids, rollout_id)
        return range(start, bisect.bisect_right(self.rollout_ids, rollout_id, lo=start))

    def index(self, rollout_id: str, attempt: int, *, hint: int = -1) -> int:
        """Position of ``(rollout_id, attempt)``, or -1.

        ``hint`` is checked first: records and scopes usually come in the
        table's order, so a walk that passes the last position + 1 finds each
        in one comparison instead of a bisection.
        """
        ids, attempts = self.rollout_ids, self.attempts
        if 0 <= hint < len(ids) and ids[hint] == rollout_id and attempts[hint] == attempt:
            return hint
        for at in self.positions(rollout_id):
            if attempts[at] == attempt:
                return at
        return -1

    def episode(self, at: int) -> EnvironmentEpisode:
        return EnvironmentEpisode(self.rollout_ids[at], self.attempts[at])

    def episodes(self) -> Iterator[EnvironmentEpisode]:
        """Every episode, in order (made one at a time, none kept)."""
        return map(EnvironmentEpisode, self.rollout_ids, self.attempts)

    def of_rollouts(self, rollout_ids: Iterable[str]) -> list[EnvironmentEpisode]:
        """The episodes of these rollouts, in order: what a check about the few rollouts a
        process holds needs of a large scope, without making every episode."""
        return [self.episode(at) for rid in sorted(set(rollout_ids)) for at in self.positions(rid)]

    def next_attempts(self, flags: bytes | bytearray, bit: int = 1) -> list[EnvironmentEpisode]:
        """Next attempts of the episodes whose flag has ``bit``, in table order."""
        return [
            EnvironmentEpisode(rollout_id, attempt + 1)
            for rollout_id, attempt, flag in zip(
                self.rollout_ids, self.attempts, flags, strict=True
            )
            if flag & bit
        ]

    def next_keys(self, flags: bytes | bytearray, bit: int = 1) -> list[str]:
        """Sorted capture keys of those next attempts, each once (the protocol's order)."""
        keys = [
            f"{rollout_id}-a{attempt + 1}"
            for rollout_id, attempt, flag in zip(
                self.rollout_ids, self.attempts, flags, strict=True
            )
            if flag & bit
        ]
        keys.sort()  # in place: no second list of every key
        return keys


def _first(pair: tuple[str, int]) -> str:
    return pair[0]
