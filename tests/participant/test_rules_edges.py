"""Edges of envckpt.participant.rules the mutation campaign found untested.

What a refused caller reads (the detail of each refusal), a check fed no open
checkpoint record, and ``check_restorable`` over a rollout that holds several
attempts at once.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant import rules
from envckpt.participant.fence import AttemptFence
from envckpt.participant.open_checkpoint import OpenCheckpoint, RestoreArgs
from envckpt.participant.scope_table import ScopeTable
from envckpt.protocol import ErrorCode, Phase


def refusal_detail(code: ErrorCode, check: Callable[[], object]) -> str:
    """Run ``check``, which must refuse with ``code``; its detail."""
    with pytest.raises(ParticipantError) as caught:
        check()
    assert caught.value.code == code
    return caught.value.detail


def test_work_without_a_rollout_identity_is_told_what_is_missing() -> None:
    """The refusal says episode work needs a rollout identity, in those words."""
    refusal = rules.admission_refusal(None, AttemptFence(), Phase.IDLE, None)
    assert refusal == (ErrorCode.ROLLOUT_ID_REQUIRED, "episode work needs a rollout identity")


@pytest.mark.parametrize("phase", [Phase.PREPARING, Phase.PREPARED, Phase.COMMITTED])
def test_retire_in_an_open_phase_is_refused_even_without_an_open_record(phase: Phase) -> None:
    """An open phase alone refuses retire (invalid_phase), naming no checkpoint."""
    detail = refusal_detail(
        ErrorCode.INVALID_PHASE,
        lambda: rules.require_no_checkpoint_open(phase, None, "c1", "retire"),
    )
    assert detail == "retire is refused while checkpoint None is open"


def test_a_prepare_in_a_later_phase_names_that_phase() -> None:
    """A repeated prepare with no recorded reply outside preparing names the phase."""
    open_ = OpenCheckpoint("c1")
    detail = refusal_detail(
        ErrorCode.INVALID_PHASE,
        lambda: rules.prepare_replay(open_, "c1", phase=Phase.COMMITTED),
    )
    assert str(Phase.COMMITTED) in detail


def test_a_commit_with_nothing_open_says_to_prepare_first() -> None:
    """Commit before any prepare: the detail tells the caller what to do."""
    detail = refusal_detail(
        ErrorCode.INVALID_PHASE,
        lambda: rules.check_commit(None, "c1", phase=Phase.IDLE, ready=True, scope=None),
    )
    assert detail == "no checkpoint is open; prepare first"


def test_a_restore_repeated_with_other_arguments_names_the_checkpoint() -> None:
    """The conflict names the restore's checkpoint id."""
    first: RestoreArgs = ("/snap/a", ScopeTable.of([EnvironmentEpisode("r1", 0)]))
    open_ = OpenCheckpoint("c9", restore=(first, lambda: {"phase": "restored"}))
    other: RestoreArgs = ("/snap/b", first[1])
    detail = refusal_detail(
        ErrorCode.CHECKPOINT_CONFLICT,
        lambda: rules.restore_replay(open_, "c9", other, phase=Phase.RESTORED),
    )
    assert detail == "restore c9 was already sent with other arguments"


@pytest.mark.parametrize("rollout", ["r1", "r2", "r3", "r4", "r5", "r6"])
def test_the_newest_held_attempt_of_a_rollout_decides(rollout: str) -> None:
    """Holding attempts 0..9 of a rollout, installing attempt 8 is refused (9 is live)."""
    held = frozenset(EnvironmentEpisode(rollout, attempt) for attempt in range(10))
    detail = refusal_detail(
        ErrorCode.STALE_ATTEMPT,
        lambda: rules.check_restorable([EnvironmentEpisode(rollout, 8)], held),
    )
    assert f"{rollout}-a8" in detail


def test_a_refusal_over_many_live_attempts_names_ten() -> None:
    """Twelve live attempts: the detail names the first ten capture keys, sorted."""
    scope = [EnvironmentEpisode(f"r{i:02d}", 0) for i in range(12)]
    held = frozenset(e.next_attempt() for e in scope)
    detail = refusal_detail(ErrorCode.STALE_ATTEMPT, lambda: rules.check_restorable(scope, held))
    named = [f"r{i:02d}" for i in range(10)]
    assert detail == f"restore would install over attempts live here: {named}"


def test_a_commit_in_the_wrong_phase_names_the_phase() -> None:
    """Commit while still preparing: invalid_phase naming ``preparing``."""
    open_ = OpenCheckpoint("c1")
    detail = refusal_detail(
        ErrorCode.INVALID_PHASE,
        lambda: rules.check_commit(open_, "c1", phase=Phase.PREPARING, ready=True, scope=None),
    )
    assert detail == "commit is not legal in phase preparing"


def test_a_commit_no_longer_ready_says_episodes_left_their_boundary() -> None:
    """Prepared but no longer ready: the detail says why the commit cannot go on."""
    open_ = OpenCheckpoint("c1", prepare_reply={"phase": "prepared"})
    detail = refusal_detail(
        ErrorCode.INVALID_PHASE,
        lambda: rules.check_commit(open_, "c1", phase=Phase.PREPARED, ready=False, scope=None),
    )
    assert detail == "no longer ready: episodes left their boundary"


def test_a_scope_naming_many_restarts_is_refused_naming_ten() -> None:
    """Twelve reported restarts in scope: restart_in_scope naming the first ten, sorted."""
    restarts = [EnvironmentEpisode(f"r{i:02d}", 0) for i in range(12)]
    open_ = OpenCheckpoint(
        "c1", prepare_reply={"phase": "prepared"}, prepared_restarts=frozenset(restarts)
    )
    detail = refusal_detail(
        ErrorCode.RESTART_IN_SCOPE,
        lambda: rules.check_commit(
            open_, "c1", phase=Phase.PREPARED, ready=True, scope=tuple(restarts)
        ),
    )
    assert detail == f"scope names reported restarts: {[f'r{i:02d}' for i in range(10)]}"


def test_a_checkpoint_resumed_during_prepare_is_named_stale() -> None:
    """Prepare's wait ends with nothing open: stale_checkpoint naming the checkpoint."""
    detail = refusal_detail(
        ErrorCode.STALE_CHECKPOINT,
        lambda: rules.still_preparing(None, "c4", phase=Phase.IDLE),
    )
    assert detail == "checkpoint c4 was resumed while preparing"
