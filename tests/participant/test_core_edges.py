"""Edges of envckpt.participant.core the mutation campaign found untested: its counters.

Each control call adds to its counter (status and metrics read them), never
sets or subtracts.
"""

from __future__ import annotations

from envckpt.clock import FakeClock
from envckpt.participant.core import ParticipantCore

from helpers.participant_doubles import START, JsonStateHooks, ep


def make_core() -> ParticipantCore:
    return ParticipantCore(
        server_name="agent", kind="agent", hooks=JsonStateHooks("agent"), clock=FakeClock(START)
    )


async def test_each_prepare_from_idle_counts_one_opened_checkpoint() -> None:
    """Two checkpoints opened and resumed: checkpoints_opened is 2."""
    core = make_core()
    for checkpoint_id in ("c1", "c2"):
        await core.prepare(checkpoint_id, deadline_ts=START + 30)
        await core.resume(checkpoint_id, deadline_ts=START + 30)
    assert core.counters.checkpoints_opened == 2


async def test_retired_attempts_add_up_over_calls() -> None:
    """Two retires of two attempts each: retired_attempts is 4."""
    core = make_core()
    await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("r1", 0), ep("r2", 1)])
    await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("r3", 0), ep("r4", 2)])
    assert core.counters.retired_attempts == 4
