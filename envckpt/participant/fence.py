"""Which rollout attempts may still act on one participant: the attempt fence.

Pure and synchronous (no I/O, no awaiting), so the participant core can
consult and update it under its lock without ever yielding half-way. It
keeps, per rollout:

* the **retire mark**: the highest retired attempt; it and every earlier one
  are refused (``stale_attempt``) for good, until ``forget``;
* the **latest attempt** seen; an earlier attempt is superseded;
* attempts a restore installed that no call has touched yet (**unstarted**);
* the number of calls of each attempt **in flight** (prepare waits for zero).

What restores installed is kept apart, compact (``RestoredAttempts``: the
restore's sorted scope table and a flag byte per episode, no object per
episode): a restore of 233,000 episodes would otherwise add as many dict and
set entries, episodes and key strings. A rollout's latest attempt is the
newer of the two records.

    fence.refusal(episode)            # None, or (code, detail) to refuse with
    fence.current(scope)              # the scope's episodes that may still act
    fence.admitted(episode)           # a call starts
    fence.left(episode)               # ... and reaches its boundary
    fence.retire(episodes)            # marks go up before anything stops
    fence.installed(restored, scope)  # a restore's attempts, unstarted
    fence.restored(table, installed)  # the same, from a restore's compact table
    fence.drop_unstarted_outside(scope)   # a commit: unstarted ones it leaves out, unfenced
"""

from __future__ import annotations

from collections.abc import Iterable

from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.restored_attempts import RestoredAttempts
from envckpt.participant.scope_table import ScopeTable
from envckpt.protocol import ErrorCode


class AttemptFence:
    """Retire marks, latest attempts, unstarted attempts and in-flight calls."""

    def __init__(self) -> None:
        self._marks: dict[str, int] = {}
        # Latest attempts admitted here (restores' are in ``_restored``).
        self._latest: dict[str, int] = {}
        self._restored: RestoredAttempts | None = None
        self._in_flight: dict[EnvironmentEpisode, int] = {}

    # ----------------------------------------------------------------- views

    def state(self) -> tuple[object, ...]:
        """Everything the fence decides by, in a canonical order: two fences equal in it
        refuse and admit alike (the model check hashes states by it)."""
        restored = () if self._restored is None else self._restored.entries()
        return (
            tuple(sorted(self._marks.items())),
            tuple(sorted(self._latest.items())),
            restored,
            tuple(sorted(self._in_flight.items())),
        )

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

    def latest(self, rollout_id: str) -> int | None:
        """The rollout's latest attempt (admitted here or installed by a restore), if any."""
        latest = self._latest.get(rollout_id)
        if self._restored is not None:
            restored = self._restored.latest(rollout_id)
            if restored is not None and (latest is None or restored > latest):
                return restored
        return latest

    def is_current(self, episode: EnvironmentEpisode) -> bool:
        """Whether ``episode`` may still act (not retired, not superseded)."""
        mark = self._marks.get(episode.rollout_id)
        latest = self.latest(episode.rollout_id)
        return (mark is None or episode.attempt > mark) and (
            latest is None or episode.attempt >= latest
        )

    def current(self, episodes: Iterable[EnvironmentEpisode]) -> frozenset[EnvironmentEpisode]:
        """The ``episodes`` that may still act: ``is_current`` of each, in one pass.

        A commit asks this of every episode in its scope; spelled out, it
        makes no call per episode. Attempts are never negative, so a missing
        mark (-1) refuses none and a missing latest attempt (0) supersedes none.
        """
        marks, latest = self._marks, self._latest
        if self._restored is not None:
            return self._current_after_restore(episodes)
        return frozenset(
            episode
            for episode in episodes
            if episode.attempt > marks.get(episode.rollout_id, -1)
            and episode.attempt >= latest.get(episode.rollout_id, 0)
        )

    def _current_after_restore(
        self, episodes: Iterable[EnvironmentEpisode]
    ) -> frozenset[EnvironmentEpisode]:
        assert self._restored is not None
        marks, latest = self._marks, self._latest
        items = list(episodes)
        restored = self._restored.latests(episode.rollout_id for episode in items)
        return frozenset(
            episode
            for episode, newest in zip(items, restored, strict=True)
            if episode.attempt > marks.get(episode.rollout_id, -1)
            and episode.attempt >= latest.get(episode.rollout_id, 0)
            and (newest is None or episode.attempt >= newest)
        )

    def refusal(self, episode: EnvironmentEpisode) -> tuple[ErrorCode, str] | None:
        """Why ``episode`` may not act, or None if it may."""
        mark = self._marks.get(episode.rollout_id)
        if mark is not None and episode.attempt <= mark:
            return ErrorCode.STALE_ATTEMPT, f"{episode.capture_key} is retired (mark a{mark})"
        latest = self.latest(episode.rollout_id)
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
        previous = self.latest(episode.rollout_id)
        if previous is None or episode.attempt > previous:
            self._latest[episode.rollout_id] = episode.attempt
        self._in_flight[episode] = self._in_flight.get(episode, 0) + 1
        if self._restored is not None:
            self._restored.started(episode)

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
                if self._restored is not None:
                    self._restored.forget(rollout_id)

    # ---------------------------------------------------------------- restore

    def installed(
        self, restored: Iterable[EnvironmentEpisode], scope: Iterable[EnvironmentEpisode]
    ) -> None:
        """A restore installed ``restored`` (next attempts) for the saved ``scope``.

        The next attempt of every rollout in scope becomes the latest, so the
        saved attempt itself is superseded; the installed ones wait unstarted.
        Raises ValueError for a restored attempt that is no next attempt of
        the scope.
        """
        table = ScopeTable.of(scope)
        installed = bytearray(len(table))
        for episode in restored:
            at = table.index(episode.rollout_id, episode.attempt - 1)
            if at < 0:
                raise ValueError(f"{episode.capture_key} is no next attempt of the scope")
            installed[at] = 1
        self.restored(table, installed)

    def restored(self, table: ScopeTable, installed: bytes | bytearray) -> None:
        """``installed`` from a restore's table: ``installed[i]`` is 1 where the next
        attempt of the table's episode ``i`` was installed, else 0."""
        newer = RestoredAttempts.installed(table, installed)
        older = self._restored
        self._restored = newer if older is None or older.empty else older.merged(newer)

    def held_rollouts(
        self,
        scope: ScopeTable | Iterable[EnvironmentEpisode],
        live: frozenset[EnvironmentEpisode],
    ) -> tuple[EnvironmentEpisode, ...]:
        """The ``scope`` episodes whose rollout holds state or a call here (sorted).

        A restore retires them before it installs their next attempts: that
        attempt and every earlier one of the rollout stop and are freed.
        """
        holding = {episode.rollout_id for episode in live | self.in_flight()}
        if not holding:
            return ()  # a fresh process: the scope is not even read
        if isinstance(scope, ScopeTable):  # a restore's (large) scope: looked up, not walked
            return tuple(sorted(set(scope.of_rollouts(holding))))
        return tuple(sorted({episode for episode in scope if episode.rollout_id in holding}))

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
        if self._restored is None:
            return ()  # nothing restored is waiting: the usual commit
        return self._restored.unstarted_outside(scope)
