"""Tests for envckpt.participant.fence: which rollout attempts may still act.

The unit tests pin each view and update; ``FenceMachine`` drives random
sequences of admissions, departures, retires, forgets and restores against
the fence's contract: a retired attempt and every earlier one is refused
until its rollout is forgotten, an earlier attempt than the latest seen is
superseded, marks never go down, and ``busy_at_or_below`` agrees with a
brute-force look at the calls in flight.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.fence import AttemptFence
from envckpt.participant.scope_table import ScopeTable
from envckpt.protocol import ErrorCode

from helpers.examples import examples
from helpers.participant_doubles import ep

ROLLOUTS = ("r0", "r1", "r2")
ATTEMPTS = range(4)


# ---------------------------------------------------------------- unit tests


def test_a_fresh_fence_admits_every_attempt_and_holds_nothing() -> None:
    """With no history, every attempt may act and nothing is marked or in flight."""
    fence = AttemptFence()
    assert fence.refusal(ep("r", 3)) is None and fence.is_current(ep("r", 3))
    assert fence.mark("r") is None and fence.retired_rollouts == 0
    assert fence.in_flight() == frozenset()
    assert not fence.busy_at_or_below([ep("r", 9)])


def test_retire_refuses_the_attempt_and_every_earlier_one_but_not_later_ones() -> None:
    """A retire of attempt 1 refuses attempts 0 and 1 (naming the mark) and leaves 2 free."""
    fence = AttemptFence()
    fence.retire([ep("r", 1)])
    for attempt in (0, 1):
        code, detail = fence.refusal(ep("r", attempt)) or ("", "")
        assert code == ErrorCode.STALE_ATTEMPT and "retired (mark a1)" in detail
    assert fence.refusal(ep("r", 2)) is None
    assert fence.refusal(ep("other", 0)) is None
    assert fence.mark("r") == 1 and fence.retired_rollouts == 1


def test_marks_are_a_copy_of_every_retire_mark() -> None:
    """``marks`` lists each rollout's mark, and changing it changes nothing in the fence."""
    fence = AttemptFence()
    fence.retire([EnvironmentEpisode("a", 2), EnvironmentEpisode("b", 0)])
    marks = fence.marks()
    assert marks == {"a": 2, "b": 0}
    marks["a"] = -1
    assert fence.mark("a") == 2


def test_a_lower_retire_never_lowers_the_mark() -> None:
    """Retiring attempt 0 after attempt 2 keeps the mark at 2."""
    fence = AttemptFence()
    fence.retire([ep("r", 2), ep("r", 0)])
    fence.retire([ep("r", 1)])
    assert fence.mark("r") == 2


def test_an_admitted_attempt_supersedes_earlier_ones_without_a_retire() -> None:
    """Once attempt 2 ran, attempt 1 is refused as superseded; 2 and 3 may act."""
    fence = AttemptFence()
    fence.admitted(ep("r", 2))
    code, detail = fence.refusal(ep("r", 1)) or ("", "")
    assert code == ErrorCode.STALE_ATTEMPT and "superseded by attempt 2" in detail
    assert fence.refusal(ep("r", 2)) is None and fence.refusal(ep("r", 3)) is None
    assert not fence.is_current(ep("r", 1))


def test_in_flight_counts_each_call_until_it_leaves() -> None:
    """Two calls of one attempt keep it in flight until both have left."""
    fence = AttemptFence()
    fence.admitted(ep("r"))
    fence.admitted(ep("r"))
    fence.left(ep("r"))
    assert fence.in_flight() == {ep("r")}
    assert fence.has_in_flight
    fence.left(ep("r"))
    assert fence.in_flight() == frozenset()
    assert not fence.has_in_flight


def test_leaving_without_being_admitted_changes_nothing() -> None:
    """A stray ``left`` neither goes negative nor hides a later admission."""
    fence = AttemptFence()
    fence.left(ep("r"))
    fence.admitted(ep("r"))
    assert fence.in_flight() == {ep("r")}


def test_busy_at_or_below_looks_only_at_the_named_rollouts_up_to_their_attempt() -> None:
    """A call of attempt 1 blocks a stop of attempt 1 or 2, not of attempt 0 or another rollout."""
    fence = AttemptFence()
    fence.admitted(ep("r", 1))
    assert fence.busy_at_or_below([ep("r", 1)])
    assert fence.busy_at_or_below([ep("r", 0), ep("r", 2)])
    assert not fence.busy_at_or_below([ep("r", 0)])
    assert not fence.busy_at_or_below([ep("other", 5)])
    assert not fence.busy_at_or_below([])


def test_forget_drops_the_mark_and_frees_the_rollout() -> None:
    """After forget, a retired rollout that holds nothing may start again at attempt 0."""
    fence = AttemptFence()
    fence.admitted(ep("r", 2))
    fence.left(ep("r", 2))
    fence.retire([ep("r", 2)])
    fence.forget(["r"])
    assert fence.mark("r") is None and fence.retired_rollouts == 0
    assert fence.refusal(ep("r", 0)) is None


def test_forget_of_a_rollout_still_holding_state_keeps_its_attempt_current() -> None:
    """A rollout live here keeps its latest attempt: earlier attempts stay superseded."""
    fence = AttemptFence()
    fence.admitted(ep("r", 2))
    fence.left(ep("r", 2))
    fence.retire([ep("r", 1)])
    fence.forget(["r"], live=frozenset({ep("r", 2)}))
    assert fence.mark("r") is None
    assert fence.refusal(ep("r", 1)) is not None
    assert fence.refusal(ep("r", 2)) is None


def test_forget_of_a_rollout_with_a_call_in_flight_keeps_its_attempt_current() -> None:
    """A call still running counts as holding the rollout, like live state."""
    fence = AttemptFence()
    fence.admitted(ep("r", 1))
    fence.forget(["r"])
    assert fence.refusal(ep("r", 0)) is not None


def test_installed_supersedes_the_saved_attempt_and_waits_unstarted() -> None:
    """A restore makes the next attempt current; the saved one is refused as superseded."""
    fence = AttemptFence()
    fence.installed([ep("r", 1)], [ep("r", 0)])
    assert fence.refusal(ep("r", 0)) is not None
    assert fence.refusal(ep("r", 1)) is None
    assert fence.in_flight() == frozenset()


def test_restored_attempts_the_commit_scope_leaves_out_are_dropped_unfenced() -> None:
    """Unstarted restored attempts outside the scope are returned, sorted, and stay admissible."""
    fence = AttemptFence()
    fence.installed([ep("b", 1), ep("a", 1), ep("c", 1)], [ep("b", 0), ep("a", 0), ep("c", 0)])
    dropped = fence.drop_unstarted_outside([ep("c", 1)])
    assert dropped == (ep("a", 1), ep("b", 1))
    assert fence.mark("a") is None and fence.mark("b") is None and fence.mark("c") is None
    # Gym's rule: the controller may start the rollout over as that same attempt.
    assert fence.refusal(ep("a", 1)) is None and fence.refusal(ep("b", 1)) is None
    assert fence.refusal(ep("a", 0)) is not None  # the saved attempt stays superseded
    # Each is dropped once: a second commit finds nothing more to drop.
    assert fence.drop_unstarted_outside([]) == (ep("c", 1),)
    assert fence.drop_unstarted_outside([]) == ()


def test_a_restored_attempt_that_ran_is_never_fenced_as_unstarted() -> None:
    """An admitted call starts a restored attempt, so a later scope cannot drop it."""
    fence = AttemptFence()
    fence.installed([ep("r", 1)], [ep("r", 0)])
    fence.admitted(ep("r", 1))
    assert fence.drop_unstarted_outside([]) == ()
    assert fence.mark("r") is None


def test_a_compact_restore_of_many_episodes_refuses_a_stale_attempt_of_every_one() -> None:
    """Restored through a table (no object per episode), restored again over it (one merged
    table): every saved attempt and every earlier one stays refused, every next one admitted,
    and a forgotten rollout stops counting its restored attempt."""
    scope = [ep(f"task-{index:04d}", index % 4) for index in range(2000)]
    fence = AttemptFence()
    fence.restored(ScopeTable.of(scope), bytearray([1]) * len(scope))
    again = [e.next_attempt() for e in scope[::2]]  # the even ones, restored once more
    fence.restored(ScopeTable.of(again), bytearray([1]) * len(again))
    for index, episode in enumerate(scope):
        newest = episode.attempt + (2 if index % 2 == 0 else 1)
        for attempt in range(newest):
            refusal = fence.refusal(ep(episode.rollout_id, attempt))
            assert refusal is not None and refusal[0] == ErrorCode.STALE_ATTEMPT
        assert fence.refusal(ep(episode.rollout_id, newest)) is None
    assert fence.current(e.next_attempt() for e in scope) == frozenset(
        e.next_attempt() for e in scope[1::2]
    )
    fence.forget([scope[1].rollout_id])
    assert fence.refusal(scope[1]) is None


def test_held_rollouts_are_the_scope_episodes_whose_rollout_holds_anything() -> None:
    """Scope episodes are held when their rollout has live state or a call here (sorted)."""
    fence = AttemptFence()
    fence.admitted(ep("b", 0))
    held = fence.held_rollouts(
        [ep("c", 1), ep("b", 2), ep("a", 3), ep("b", 2)], frozenset({ep("a", 0)})
    )
    assert held == (ep("a", 3), ep("b", 2))
    table = ScopeTable.of([ep("c", 1), ep("b", 2), ep("a", 3)])  # looked up, not walked
    assert fence.held_rollouts(table, frozenset({ep("a", 0)})) == held


# ------------------------------------------------------------ property tests

episodes = st.builds(ep, st.sampled_from(ROLLOUTS), st.sampled_from(ATTEMPTS))
episode_lists = st.lists(episodes, max_size=4)


class FenceMachine(RuleBasedStateMachine):
    """Random fence calls checked against the fence's contract after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.fence = AttemptFence()
        # What the contract promises, kept from the calls alone.
        self.retired_floor: dict[str, int] = {}  # highest attempt retired since forget
        self.latest_floor: dict[str, int] = {}  # newest attempt started or installed
        self.calls: Counter[EnvironmentEpisode] = Counter()
        self.unstarted: set[EnvironmentEpisode] = set()
        self.marks_before: dict[str, int] = {}

    def _raise_latest(self, rollout_id: str, attempt: int) -> None:
        self.latest_floor[rollout_id] = max(attempt, self.latest_floor.get(rollout_id, 0))

    @rule(episode=episodes)
    def admit(self, episode: EnvironmentEpisode) -> None:
        # The core admits only what the fence does not refuse.
        if self.fence.refusal(episode) is None:
            self.fence.admitted(episode)
            self.calls[episode] += 1
            self.unstarted.discard(episode)
            self._raise_latest(episode.rollout_id, episode.attempt)

    @precondition(lambda self: bool(self.calls))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        episode = data.draw(st.sampled_from(sorted(self.calls)))
        self.fence.left(episode)
        self.calls[episode] -= 1
        if not self.calls[episode]:
            del self.calls[episode]

    def _note_retired(self, retired: list[EnvironmentEpisode]) -> None:
        for episode in retired:
            floor = self.retired_floor.get(episode.rollout_id, -1)
            self.retired_floor[episode.rollout_id] = max(floor, episode.attempt)

    @rule(retired=episode_lists)
    def retire(self, retired: list[EnvironmentEpisode]) -> None:
        self.fence.retire(retired)
        self._note_retired(retired)

    @rule(rollouts=st.sets(st.sampled_from(ROLLOUTS)), live=st.frozensets(episodes, max_size=3))
    def forget(self, rollouts: set[str], live: frozenset[EnvironmentEpisode]) -> None:
        self.fence.forget(rollouts, live=live)
        holding = {e.rollout_id for e in live} | {e.rollout_id for e in self.calls}
        for rollout_id in rollouts:
            self.retired_floor.pop(rollout_id, None)
            self.marks_before.pop(rollout_id, None)
            if rollout_id not in holding:
                self.latest_floor.pop(rollout_id, None)

    @rule(scope=st.lists(episodes, max_size=3, unique_by=lambda e: e.rollout_id))
    def install(self, scope: list[EnvironmentEpisode]) -> None:
        restored = [e.next_attempt() for e in scope]
        self.fence.installed(restored, scope)
        self.unstarted.update(restored)
        for episode in scope:
            self._raise_latest(episode.rollout_id, episode.attempt + 1)

    @rule(scope=st.lists(episodes, max_size=4), data=st.data())
    def restore_part(self, scope: list[EnvironmentEpisode], data: st.DataObject) -> None:
        # The core's path: a table (attempts of one rollout may repeat) and
        # only the episodes whose records were in the file installed.
        table = ScopeTable.of(scope)
        size = len(table)
        installed = bytearray(data.draw(st.lists(st.integers(0, 1), min_size=size, max_size=size)))
        self.fence.restored(table, installed)
        self.unstarted.update(table.next_attempts(installed))
        for episode in scope:
            self._raise_latest(episode.rollout_id, episode.attempt + 1)

    @rule(scope=episode_lists)
    def drop_unstarted(self, scope: list[EnvironmentEpisode]) -> None:
        before = {e: self.fence.refusal(e) for e in self.unstarted}
        dropped = self.fence.drop_unstarted_outside(scope)
        assert dropped == tuple(sorted(self.unstarted - set(scope)))
        self.unstarted -= set(dropped)
        # Gym's rule: dropping fences nothing, so no refusal changes.
        assert {e: self.fence.refusal(e) for e in before} == before

    @invariant()
    def retired_attempts_stay_refused_until_forget(self) -> None:
        for rollout_id, floor in self.retired_floor.items():
            for attempt in range(floor + 1):
                refusal = self.fence.refusal(ep(rollout_id, attempt))
                assert refusal is not None and refusal[0] == ErrorCode.STALE_ATTEMPT

    @invariant()
    def refusal_is_exactly_retired_or_superseded(self) -> None:
        for rollout_id in ROLLOUTS:
            for attempt in range(max(ATTEMPTS) + 3):
                episode = ep(rollout_id, attempt)
                retired = attempt <= self.retired_floor.get(rollout_id, -1)
                superseded = attempt < self.latest_floor.get(rollout_id, 0)
                refusal = self.fence.refusal(episode)
                assert (refusal is not None) == (retired or superseded), episode
                assert self.fence.is_current(episode) == (refusal is None)

    @invariant()
    def current_is_is_current_of_each(self) -> None:
        every = [ep(r, a) for r in ROLLOUTS for a in range(max(ATTEMPTS) + 3)]
        assert self.fence.current(every) == frozenset(filter(self.fence.is_current, every))

    @invariant()
    def marks_never_go_down(self) -> None:
        for rollout_id in ROLLOUTS:
            mark = self.fence.mark(rollout_id)
            before = self.marks_before.get(rollout_id)
            if before is not None:
                assert mark is not None and mark >= before
            if mark is not None:
                self.marks_before[rollout_id] = mark
        assert self.fence.retired_rollouts == len(self.retired_floor)

    @invariant()
    def in_flight_is_every_call_not_yet_left(self) -> None:
        assert self.fence.in_flight() == frozenset(self.calls)

    @invariant()
    def busy_at_or_below_agrees_with_brute_force(self) -> None:
        for rollout_id in ROLLOUTS:
            for attempt in ATTEMPTS:
                asked = [ep(rollout_id, attempt), ep("r0", 0)]
                expected = any(
                    any(
                        held.rollout_id == e.rollout_id and held.attempt <= e.attempt for e in asked
                    )
                    for held in self.calls
                )
                assert self.fence.busy_at_or_below(asked) == expected


FenceMachine.TestCase.settings = settings(
    max_examples=examples(60), stateful_step_count=30, deadline=None
)
TestFenceContract = FenceMachine.TestCase


def test_state_tells_fences_apart_exactly_when_they_would_answer_apart() -> None:
    """Two fences given the same calls have equal states; a mark, an admission or a
    restore each change it, and a fence restored in one go equals one restored in two."""

    def built(*restores: list[EnvironmentEpisode]) -> AttemptFence:
        fence = AttemptFence()
        fence.retire([ep("a", 1)])
        fence.admitted(ep("b", 0))
        for scope in restores:
            fence.restored(ScopeTable.of(scope), bytearray([1]) * len(scope))
        return fence

    assert built().state() == built().state()
    plain = built().state()
    retired, admitted = built(), built()
    retired.retire([ep("c", 0)])
    admitted.admitted(ep("c", 0))
    assert len({plain, retired.state(), admitted.state()}) == 3
    both = [ep("d", 0), ep("e", 2)]
    assert built(both).state() != plain
    assert built(both).state() == built(both[:1], both[1:]).state()
