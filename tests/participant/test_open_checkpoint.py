"""Tests for envckpt.participant.open_checkpoint: the open checkpoint's record and finished ids."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.errors import ParticipantError
from envckpt.participant.open_checkpoint import FINISHED_IDS_KEPT, FinishedIds, OpenCheckpoint
from envckpt.protocol import ErrorCode

from helpers.examples import examples

deadlines = st.floats(min_value=0, max_value=4e9, allow_nan=False)


def test_a_new_open_checkpoint_holds_nothing_but_its_id() -> None:
    """No lease, no recorded replies, no restarts, no write: nothing of an earlier one."""
    open_ = OpenCheckpoint("c1")
    assert open_.checkpoint_id == "c1"
    assert open_.lease_expires_at is None and open_.prepare_reply is None
    assert open_.prepared_restarts == frozenset()
    assert open_.commit is None and open_.restore is None


def test_the_first_lease_is_the_deadline_plus_grace() -> None:
    """arm_lease on a new record sets deadline_ts + grace."""
    open_ = OpenCheckpoint("c1")
    open_.arm_lease(1000.0, grace=600.0)
    assert open_.lease_expires_at == 1600.0


@settings(max_examples=examples(200), deadline=None)
@given(
    deadlines=st.lists(deadlines, min_size=1, max_size=6),
    grace=st.floats(min_value=0, max_value=3600, allow_nan=False),
)
def test_the_lease_is_the_latest_deadline_plus_grace_and_never_moves_earlier(
    deadlines: list[float], grace: float
) -> None:
    """After any sequence of arms: lease = max(deadline) + grace, never lower than before."""
    open_ = OpenCheckpoint("c1")
    previous = None
    for deadline in deadlines:
        open_.arm_lease(deadline, grace=grace)
        lease = open_.lease_expires_at
        assert lease is not None
        assert previous is None or lease >= previous
        previous = lease
    assert open_.lease_expires_at == max(deadline + grace for deadline in deadlines)


def test_a_finished_id_is_refused_as_stale_checkpoint() -> None:
    """refuse raises stale_checkpoint for an id that ended here; others pass."""
    finished = FinishedIds()
    finished.add("c1")
    with pytest.raises(ParticipantError) as caught:
        finished.refuse("c1")
    assert caught.value.code == ErrorCode.STALE_CHECKPOINT and "c1" in caught.value.detail
    finished.refuse("c2")
    assert "c1" in finished and "c2" not in finished


@settings(max_examples=examples(50), deadline=None)
@given(count=st.integers(min_value=0, max_value=3 * FINISHED_IDS_KEPT))
def test_only_the_last_finished_ids_are_kept_oldest_first(count: int) -> None:
    """Of ``count`` distinct ids, exactly the newest FINISHED_IDS_KEPT are kept, in order."""
    finished = FinishedIds()
    ids = [f"c{index}" for index in range(count)]
    for checkpoint_id in ids:
        finished.add(checkpoint_id)
    kept = ids[-FINISHED_IDS_KEPT:] if ids else []
    assert list(finished) == kept
    for checkpoint_id in ids:
        assert (checkpoint_id in finished) == (checkpoint_id in kept)
