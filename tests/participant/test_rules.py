"""Tests for envckpt.participant.rules: the pure refusal checks of the participant core.

Each check is fed the state that makes it refuse (with the protocol's code)
and the state that lets the call through; none of them changes the open
checkpoint it reads.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.machines.tables import PHASES_OPEN
from envckpt.participant import rules
from envckpt.participant.fence import AttemptFence
from envckpt.participant.open_checkpoint import OpenCheckpoint
from envckpt.participant.scope_table import ScopeTable
from envckpt.protocol import ErrorCode, Phase

from helpers.examples import examples
from helpers.participant_doubles import ep

NOT_IDLE = [phase for phase in Phase if phase is not Phase.IDLE]


def refused(code: ErrorCode, check: Callable[[], object]) -> ParticipantError:
    """Run ``check``, which must raise ``ParticipantError`` with ``code``."""
    with pytest.raises(ParticipantError) as caught:
        check()
    assert caught.value.code == code, caught.value
    return caught.value


def prepared(checkpoint_id: str = "c1", **fields: object) -> OpenCheckpoint:
    """An open checkpoint with its ready reply recorded."""
    open_ = OpenCheckpoint(checkpoint_id, prepare_reply={"phase": "prepared", "report": {}})
    for name, value in fields.items():
        setattr(open_, name, value)
    return open_


# ------------------------------------------------------------------ admission


def test_episode_work_without_a_rollout_identity_is_refused() -> None:
    """No episode: rollout_id_required, whatever the phase."""
    refusal = rules.admission_refusal(None, AttemptFence(), Phase.IDLE, None)
    assert refusal is not None and refusal[0] == ErrorCode.ROLLOUT_ID_REQUIRED


def test_a_fenced_attempt_is_refused_before_the_phase_is_looked_at() -> None:
    """A retired attempt gets stale_attempt even while a checkpoint is open."""
    fence = AttemptFence()
    fence.retire([ep("r", 0)])
    for phase in Phase:
        refusal = rules.admission_refusal(ep("r", 0), fence, phase, "c1")
        assert refusal is not None and refusal[0] == ErrorCode.STALE_ATTEMPT


@pytest.mark.parametrize("phase", NOT_IDLE)
def test_new_work_is_refused_while_a_checkpoint_is_open(phase: Phase) -> None:
    """Outside idle, a current attempt gets admission_closed naming the checkpoint."""
    refusal = rules.admission_refusal(ep("r"), AttemptFence(), phase, "c7")
    assert refusal is not None
    assert refusal[0] == ErrorCode.ADMISSION_CLOSED and "c7" in refusal[1]


def test_a_current_attempt_is_admitted_in_idle() -> None:
    """Idle, current attempt: no refusal."""
    assert rules.admission_refusal(ep("r", 2), AttemptFence(), Phase.IDLE, None) is None


# --------------------------------------------------------------- open checkpoint


def test_require_open_accepts_only_the_open_id() -> None:
    """The open id passes; another id, or none open, is checkpoint_conflict."""
    rules.require_open(OpenCheckpoint("c1"), "c1")
    error = refused(ErrorCode.CHECKPOINT_CONFLICT, lambda: rules.require_open(None, "c1"))
    assert "None is open, not c1" in error.detail
    refused(ErrorCode.CHECKPOINT_CONFLICT, lambda: rules.require_open(OpenCheckpoint("c2"), "c1"))


@pytest.mark.parametrize("phase", sorted(PHASES_OPEN.states))
def test_cleanup_calls_are_refused_while_a_checkpoint_is_open(phase: Phase) -> None:
    """Retire and forget in preparing, prepared or committed: invalid_phase, even for its id."""
    error = refused(
        ErrorCode.INVALID_PHASE,
        lambda: rules.require_no_checkpoint_open(phase, OpenCheckpoint("c1"), "c1", "retire"),
    )
    assert "retire is refused while checkpoint c1 is open" in error.detail


def test_cleanup_calls_in_restored_need_the_restored_id() -> None:
    """In restored, the same id passes and another id is checkpoint_conflict."""
    open_ = OpenCheckpoint("c1")
    rules.require_no_checkpoint_open(Phase.RESTORED, open_, "c1", "forget")
    refused(
        ErrorCode.CHECKPOINT_CONFLICT,
        lambda: rules.require_no_checkpoint_open(Phase.RESTORED, open_, "c2", "forget"),
    )


def test_cleanup_calls_in_idle_take_any_id() -> None:
    """Idle: retire and forget pass under any id, a finished one included."""
    rules.require_no_checkpoint_open(Phase.IDLE, None, "anything", "retire")


# -------------------------------------------------------------------- prepare


@pytest.mark.parametrize("phase", list(Phase))
def test_a_recorded_prepare_reply_is_replayed_verbatim_in_any_phase(phase: Phase) -> None:
    """Once recorded, the ready reply is the answer to a repeat, after the commit too."""
    open_ = prepared()
    assert rules.prepare_replay(open_, "c1", phase=phase) is open_.prepare_reply


def test_a_repeat_while_still_preparing_waits_again() -> None:
    """No recorded reply yet and still preparing: None (wait for the boundary again)."""
    assert rules.prepare_replay(OpenCheckpoint("c1"), "c1", phase=Phase.PREPARING) is None


@pytest.mark.parametrize("phase", [p for p in Phase if p is not Phase.PREPARING])
def test_a_repeat_without_a_recorded_reply_outside_preparing_is_invalid(phase: Phase) -> None:
    """No recorded reply and not preparing (say restored): invalid_phase."""
    refused(
        ErrorCode.INVALID_PHASE,
        lambda: rules.prepare_replay(OpenCheckpoint("c1"), "c1", phase=phase),
    )


def test_a_prepare_of_another_id_while_one_is_open_conflicts() -> None:
    """Another id while c1 is open: checkpoint_conflict, replay or not."""
    refused(
        ErrorCode.CHECKPOINT_CONFLICT,
        lambda: rules.prepare_replay(prepared(), "c2", phase=Phase.PREPARED),
    )


def test_still_preparing_refuses_a_checkpoint_resumed_meanwhile() -> None:
    """After the wait: none open, or another id open, is stale_checkpoint."""
    refused(
        ErrorCode.STALE_CHECKPOINT,
        lambda: rules.still_preparing(None, "c1", phase=Phase.IDLE),
    )
    refused(
        ErrorCode.STALE_CHECKPOINT,
        lambda: rules.still_preparing(OpenCheckpoint("c2"), "c1", phase=Phase.PREPARING),
    )


def test_still_preparing_passes_while_preparing_or_once_prepared() -> None:
    """Preparing, or prepared with its reply recorded (a concurrent repeat): the open record."""
    open_ = OpenCheckpoint("c1")
    assert rules.still_preparing(open_, "c1", phase=Phase.PREPARING) is open_
    done = prepared()
    assert rules.still_preparing(done, "c1", phase=Phase.PREPARED) is done


@pytest.mark.parametrize(
    ("phase", "recorded"),
    [
        (Phase.PREPARED, False),
        (Phase.COMMITTED, True),
        (Phase.RESTORED, False),
        (Phase.IDLE, False),
    ],
)
def test_still_preparing_refuses_a_checkpoint_that_moved_on(phase: Phase, recorded: bool) -> None:
    """Any other phase after the wait is stale_checkpoint naming the phase."""
    open_ = prepared() if recorded else OpenCheckpoint("c1")
    error = refused(
        ErrorCode.STALE_CHECKPOINT, lambda: rules.still_preparing(open_, "c1", phase=phase)
    )
    assert f"moved on to {phase}" in error.detail


def test_a_deadline_in_the_past_is_refused_and_the_deadline_itself_is_not() -> None:
    """now > deadline: deadline_exceeded; now == deadline still passes."""
    rules.check_deadline(100.0, 100.0, "retire")
    error = refused(
        ErrorCode.DEADLINE_EXCEEDED, lambda: rules.check_deadline(100.5, 100.0, "retire")
    )
    assert "retire" in error.detail


# --------------------------------------------------------------------- commit


def commit(
    open_: OpenCheckpoint | None,
    checkpoint_id: str = "c1",
    *,
    phase: Phase = Phase.PREPARED,
    ready: bool = True,
    scope: tuple[EnvironmentEpisode, ...] | None = (),
) -> Callable[[], None]:
    return lambda: rules.check_commit(open_, checkpoint_id, phase=phase, ready=ready, scope=scope)


def test_a_commit_with_nothing_open_is_invalid_phase() -> None:
    """No checkpoint open: invalid_phase, prepare first."""
    error = refused(ErrorCode.INVALID_PHASE, commit(None))
    assert "prepare first" in error.detail


def test_a_commit_of_another_id_conflicts() -> None:
    """c2 while c1 is open: checkpoint_conflict."""
    refused(ErrorCode.CHECKPOINT_CONFLICT, commit(prepared(), "c2"))


@pytest.mark.parametrize("phase", [p for p in Phase if p is not Phase.PREPARED])
def test_a_first_commit_outside_prepared_is_invalid_phase(phase: Phase) -> None:
    """Only a prepared checkpoint can be committed."""
    refused(ErrorCode.INVALID_PHASE, commit(prepared(), phase=phase))


def test_a_commit_after_episodes_left_their_boundary_is_invalid_phase() -> None:
    """Prepared but no longer ready: invalid_phase."""
    error = refused(ErrorCode.INVALID_PHASE, commit(prepared(), ready=False))
    assert "no longer ready" in error.detail


def test_a_commit_scope_naming_a_reported_restart_is_refused() -> None:
    """A scope holding an episode the prepare reported as a restart: restart_in_scope."""
    open_ = prepared(prepared_restarts=frozenset({ep("r", 1)}))
    error = refused(ErrorCode.RESTART_IN_SCOPE, commit(open_, scope=(ep("a"), ep("r", 1))))
    assert "r-a1" in error.detail


def test_a_commit_passes_when_its_scope_avoids_the_restarts_or_is_null() -> None:
    """A scope without restarts, or no scope at all (everything held), passes."""
    open_ = prepared(prepared_restarts=frozenset({ep("r", 1)}))
    rules.check_commit(open_, "c1", phase=Phase.PREPARED, ready=True, scope=(ep("r", 2),))
    rules.check_commit(open_, "c1", phase=Phase.PREPARED, ready=True, scope=None)


# -------------------------------------------------------------------- restore


def scope_of(*rollout_ids: str) -> ScopeTable:
    return ScopeTable.of(ep(rollout_id) for rollout_id in rollout_ids)


def test_a_restore_with_nothing_open_may_run() -> None:
    """No open checkpoint: no recorded reply, the restore runs."""
    assert rules.restore_replay(None, "c1", ("/d", scope_of("r")), phase=Phase.IDLE) is None


def test_a_repeated_restore_with_the_same_arguments_replays_its_reply() -> None:
    """Same directory and scope (in any order, repeats aside): the recorded reply, made again."""
    reply = {"source_checkpoint_id": "s1", "restored": ["r-a1", "s-a1"]}
    open_ = OpenCheckpoint("c1", restore=(("/d", scope_of("r", "s")), lambda: reply))
    again = ("/d", scope_of("s", "r", "s"))
    assert rules.restore_replay(open_, "c1", again, phase=Phase.RESTORED) is reply


def test_a_repeated_restore_with_other_arguments_conflicts() -> None:
    """Same id, another directory or scope: checkpoint_conflict."""
    open_ = OpenCheckpoint("c1", restore=(("/d", scope_of("r")), dict))
    other_attempt = ScopeTable.of([ep("r", 1)])
    for args in (("/other", scope_of("r")), ("/d", scope_of("r", "s")), ("/d", other_attempt)):
        refused(
            ErrorCode.CHECKPOINT_CONFLICT,
            lambda args=args: rules.restore_replay(open_, "c1", args, phase=Phase.RESTORED),
        )


def test_a_restore_while_another_checkpoint_is_open_is_refused() -> None:
    """Another id open: checkpoint_conflict; the same id open by prepare: invalid_phase."""
    refused(
        ErrorCode.CHECKPOINT_CONFLICT,
        lambda: rules.restore_replay(
            prepared("c2"), "c1", ("/d", scope_of()), phase=Phase.PREPARED
        ),
    )
    refused(
        ErrorCode.INVALID_PHASE,
        lambda: rules.restore_replay(
            prepared("c1"), "c1", ("/d", scope_of()), phase=Phase.PREPARED
        ),
    )


small_episodes = st.builds(ep, st.sampled_from(("a", "b", "c")), st.integers(0, 3))


@settings(max_examples=examples(200), deadline=None)
@given(
    scope=st.lists(small_episodes, max_size=4),
    held=st.frozensets(small_episodes, max_size=5),
)
def test_check_restorable_refuses_exactly_when_a_newer_attempt_is_held(
    scope: list[EnvironmentEpisode], held: frozenset[EnvironmentEpisode]
) -> None:
    """stale_attempt iff some held attempt of a scope rollout is newer than the saved one."""
    over_live = any(
        h.rollout_id == s.rollout_id and h.attempt > s.attempt for s in scope for h in held
    )
    if over_live:
        refused(ErrorCode.STALE_ATTEMPT, lambda: rules.check_restorable(scope, held))
    else:
        rules.check_restorable(scope, held)


@settings(max_examples=examples(100), deadline=None)
@given(
    phase=st.sampled_from(list(Phase)),
    checkpoint_id=st.sampled_from(("c1", "c2")),
    ready=st.booleans(),
    scope=st.none() | st.lists(small_episodes, max_size=3).map(tuple),
    restarts=st.frozensets(small_episodes, max_size=3),
)
def test_no_check_changes_the_open_checkpoint(
    phase: Phase,
    checkpoint_id: str,
    ready: bool,
    scope: tuple[EnvironmentEpisode, ...] | None,
    restarts: frozenset[EnvironmentEpisode],
) -> None:
    """Whether they pass or refuse, the checks leave the open record as it was."""
    open_ = prepared(prepared_restarts=restarts, restore=(("/d", scope_of("a")), lambda: {"x": 1}))
    before = copy.deepcopy(open_)
    checks: list[Callable[[], object]] = [
        lambda: rules.require_open(open_, checkpoint_id),
        lambda: rules.require_no_checkpoint_open(phase, open_, checkpoint_id, "retire"),
        lambda: rules.prepare_replay(open_, checkpoint_id, phase=phase),
        lambda: rules.still_preparing(open_, checkpoint_id, phase=phase),
        lambda: rules.check_commit(open_, checkpoint_id, phase=phase, ready=ready, scope=scope),
        lambda: rules.restore_replay(open_, checkpoint_id, ("/d", scope_of("a")), phase=phase),
    ]
    for check in checks:
        with contextlib.suppress(ParticipantError):
            check()
        assert open_ == before


def test_a_repeated_commit_must_name_its_first_directory_and_scope() -> None:
    """The same arguments pass; another directory or scope is checkpoint_conflict."""
    sent = ("/ckpt/a", None, False)
    rules.check_commit_replay("c1", sent, ("/ckpt/a", None, False))
    for other in (("/ckpt/b", None, False), ("/ckpt/a", (), False)):
        with pytest.raises(ParticipantError) as caught:
            rules.check_commit_replay("c1", sent, other)
        assert caught.value.code == ErrorCode.CHECKPOINT_CONFLICT
