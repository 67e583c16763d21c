"""Which rollout attempts may still act on one participant: the attempt fence.

Pure and synchronous (no I/O, no awaiting), so the participant core can
consult and update it under its lock without ever yielding half-way. It
keeps, per rollout:

* the **retire mark**: the highest retired attempt; it and every earlier one
  are refused (``stale_attempt``) for good, until ``forget``;
* the **latest attempt** seen; an earlier attempt is superseded;
* attempts a restore installed that no call has touched yet (**unstarted**);
* the number of calls of each attempt **in flight** (prepare waits for zero).

    fence.refusal(episode)            # None, or (code, detail) to refuse with
    fence.current(scope)              # the scope's episodes that may still act
    fence.admitted(episode)           # a call starts
    fence.left(episode)               # ... and reaches its boundary
    fence.retire(episodes)            # marks go up before anything stops
    fence.installed(restored, scope)  # a restore's attempts, unstarted
    fence.drop_unstarted_outside(scope)   # a commit: unstarted ones it leaves out, unfenced
"""

from __future__ import annotations

from collections.abc import Iterable

from envckpt.episodes import EnvironmentEpisode
from envckpt.protocol import ErrorCode


class AttemptFence:
    """Retire marks, latest attempts, unstarted attempts and in-flight calls."""

    def __init__(self) -> None:
        self._marks: dict[str, int] = {}
        self._latest: dict[str, int] = {}
        self._unstarted: set[EnvironmentEpisode] = set()
        self._in_flight: dict[EnvironmentEpisode, int] = {}

    # ----------------------------------------------------------------- views

    def mark(self, rollout_id: str) -> int | None:
        """The rollout's retire mark, if it has one."""
        return self._marks.get(rollout_id)

    def marks(self) -> dict[str, int]:
        """Every retire mark, rollout id -> attempt (a copy: a joining worker adopts them)."""
        return dict(self._marks)

    @property
    def retired_rollouts(self) -> int:
        return len(self._marks)

    def in_flight(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self._in_flight)

    @property
    def has_in_flight(self) -> bool:
        """Whether any call is in flight (``in_flight()`` without the copy)."""
        return bool(self._in_flight)

    def is_current(self, episode: EnvironmentEpisode) -> bool:
        """Whether ``episode`` may still act (not retired, not superseded)."""
        mark = self._marks.get(episode.rollout_id)
        latest = self._latest.get(episode.rollout_id, episode.attempt)
        return (mark is None or episode.attempt > mark) and episode.attempt >= latest

    def current(self, episodes: Iterable[EnvironmentEpisode]) -> frozenset[EnvironmentEpisode]:
        """The ``episodes`` that may still act: ``is_current`` of each, in one pass.

        A commit asks this of every episode in its scope; spelled out, it
        makes no call per episode. Attempts are never negative, so a missing
        mark (-1) refuses none and a missing latest attempt (0) supersedes none.
        """
        marks, latest = self._marks, self._latest
        return frozenset(
            episode
            for episode in episodes
            if episode.attempt > marks.get(episode.rollout_id, -1)
            and episode.attempt >= latest.get(episode.rollout_id, 0)
        )

    def refusal(self, episode: EnvironmentEpisode) -> tuple[ErrorCode, str] | None:
        """Why ``episode`` may not act, or None if it may."""
        mark = self._marks.get(episode.rollout_id)
        if mark is not None and episode.attempt <= mark:
            return ErrorCode.STALE_ATTEMPT, f"{episode.capture_key} is retired (mark a{mark})"
        latest = self._latest.get(episode.rollout_id)
        if latest is not None and episode.attempt < latest:
            detail = f"{episode.capture_key} is superseded by attempt {latest}"
            return ErrorCode.STALE_ATTEMPT, detail
        return None

    def busy_at_or_below(self, episodes: Iterable[EnvironmentEpisode]) -> bool:
        """Whether a call of any of ``episodes`` (or an earlier attempt) is in flight."""
        limits: dict[str, int] = {}
        for episode in episodes:
            limits[episode.rollout_id] = max(episode.attempt, limits.get(episode.rollout_id, -1))
        return any(held.attempt <= limits.get(held.rollout_id, -1) for held in self._in_flight)

    # ------------------------------------------------------------- admission

    def admitted(self, episode: EnvironmentEpisode) -> None:
        """A call of ``episode`` starts: it is the latest attempt, and in flight."""
        previous = self._latest.get(episode.rollout_id, 0)
        self._latest[episode.rollout_id] = max(episode.attempt, previous)
        self._in_flight[episode] = self._in_flight.get(episode, 0) + 1
        self._unstarted.discard(episode)

    def left(self, episode: EnvironmentEpisode) -> None:
        """A call of ``episode`` reached its boundary."""
        remaining = self._in_flight.get(episode, 1) - 1
        if remaining:
            self._in_flight[episode] = remaining
        else:
            self._in_flight.pop(episode, None)

    # --------------------------------------------------------- retire, forget

    def retire(self, episodes: Iterable[EnvironmentEpisode]) -> None:
        """Raise each rollout's mark to the attempt given (marks never go down)."""
        for episode in episodes:
            mark = self._marks.get(episode.rollout_id, -1)
            self._marks[episode.rollout_id] = max(mark, episode.attempt)

    def forget(
        self, rollout_ids: Iterable[str], *, live: frozenset[EnvironmentEpisode] = frozenset()
    ) -> None:
        """Drop the marks of these rollouts, and the latest attempt of those not ``live``.

        A rollout that still holds state (or a call) here keeps its latest
        attempt, so its earlier attempts stay superseded until a retire frees it.
        """
        holding = {episode.rollout_id for episode in live | self.in_flight()}
        for rollout_id in rollout_ids:
            self._marks.pop(rollout_id, None)
            if rollout_id not in holding:
                self._latest.pop(rollout_id, None)

    # ---------------------------------------------------------------- restore

    def installed(
        self, restored: Iterable[EnvironmentEpisode], scope: Iterable[EnvironmentEpisode]
    ) -> None:
        """A restore installed ``restored`` (next attempts) for the saved ``scope``.

        The next attempt of every rollout in scope becomes the latest, so the
        saved attempt itself is superseded; the installed ones wait unstarted.
        """
        self._unstarted.update(restored)
        for episode in scope:
            previous = self._latest.get(episode.rollout_id, 0)
            self._latest[episode.rollout_id] = max(episode.attempt + 1, previous)

    def held_rollouts(
        self, scope: Iterable[EnvironmentEpisode], live: frozenset[EnvironmentEpisode]
    ) -> tuple[EnvironmentEpisode, ...]:
        """The ``scope`` episodes whose rollout holds state or a call here (sorted).

        A restore retires them before it installs their next attempts: that
        attempt and every earlier one of the rollout stop and are freed.
        """
        holding = {episode.rollout_id for episode in live | self.in_flight()}
        return tuple(sorted(episode for episode in set(scope) if episode.rollout_id in holding))

    def drop_unstarted_outside(
        self, scope: Iterable[EnvironmentEpisode]
    ) -> tuple[EnvironmentEpisode, ...]:
        """Forget restored attempts that never ran and that ``scope`` leaves out.

        A commit that does not name them will never continue them, so the
        caller frees their state. They are **not** fenced (Gym's rule for
        restored state out of scope): nothing of them ever ran here, so no
        late request can come from them, and the controller may start the
        rollout over as that same attempt. Returns them, sorted.
        """
        if not self._unstarted:
            return ()  # nothing restored is waiting: the usual commit
        dropped = tuple(sorted(self._unstarted - set(scope)))
        self._unstarted.difference_update(dropped)
        return dropped
