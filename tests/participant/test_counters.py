"""Tests for envckpt.participant.counters: what a participant did, as its status reports it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant.core import ParticipantCore
from envckpt.participant.counters import AdmissionCounters, ParticipantCounters
from envckpt.protocol import ErrorCode

from helpers.participant_doubles import START, JsonStateHooks, ep, run_turn


def test_admission_counters_count_each_refusal_by_code() -> None:
    """refused_with counts per code and returns the error to raise."""
    counters = AdmissionCounters()
    error = counters.refused_with(ErrorCode.ADMISSION_CLOSED, "open")
    counters.refused_with(ErrorCode.ADMISSION_CLOSED, "open")
    counters.refused_with(ErrorCode.STALE_ATTEMPT, "old")
    assert (error.code, error.detail) == (ErrorCode.ADMISSION_CLOSED, "open")
    assert counters.refused == {"admission_closed": 2, "stale_attempt": 1}
    assert counters.admitted == 0


def test_commits_add_up_and_ends_are_told_apart() -> None:
    """Two commits sum records and seconds; an expiry is not counted as a resume."""
    counters = ParticipantCounters()
    counters.committed(records=3, seconds=0.5)
    counters.committed(records=4, seconds=0.25)
    counters.ended("resume")
    counters.ended("expire")
    body = counters.to_json()
    assert (body["commits"], body["records_written"]) == (2, 7)
    assert (body["commit_seconds_total"], body["last_commit_seconds"]) == (0.75, 0.25)
    assert (body["resumes"], body["lease_expiries"]) == (1, 1)


async def prepared_after(*episodes: EnvironmentEpisode) -> tuple[ParticipantCore, FakeClock]:
    """An agent core on a fake clock that ran a turn of each episode, then prepared ``c1``."""
    clock = FakeClock(START)
    hooks = JsonStateHooks("agent")
    core = ParticipantCore(server_name="agent", kind="agent", hooks=hooks, clock=clock)
    for episode in episodes:
        await run_turn(core, hooks, episode, turn=2)
    await core.prepare("c1", deadline_ts=clock.now() + 30)
    return core, clock


async def test_a_participant_counts_its_own_cycle_and_a_refusal(tmp_path: Path) -> None:
    """One prepare, commit and resume of two episodes, and a call refused while open."""
    core, clock = await prepared_after(ep("r1"), ep("r2"))
    with pytest.raises(ParticipantError):
        async with core.admit(ep("r1")):
            pass
    await core.commit(
        "c1", deadline_ts=clock.now() + 30, checkpoint_dir=str(tmp_path), episode_ids=None
    )
    await core.resume("c1", deadline_ts=clock.now() + 30)
    await core.retire("c1", deadline_ts=clock.now() + 30, episode_ids=[ep("r2")])
    counters = (await core.status())["counters"]
    assert counters["admitted"] == 2
    assert counters["refused"] == {"admission_closed": 1}
    assert (counters["checkpoints_opened"], counters["commits"], counters["resumes"]) == (1, 1, 1)
    assert counters["records_written"] == 2
    assert counters["commit_seconds_total"] > 0
    assert (counters["commit_failures"], counters["retired_attempts"]) == (0, 1)


async def test_a_status_after_a_refusal_is_plain_json() -> None:
    """The refused counts are keyed by plain strings, so orjson (the workers' private
    status replies) encodes a status after any refusal; a StrEnum key made it fail."""
    core, _ = await prepared_after(ep("r1"))
    with pytest.raises(ParticipantError):
        async with core.admit(ep("r1")):
            pass
    status = await core.status()
    assert [type(key) for key in status["counters"]["refused"]] == [str]
    assert orjson.loads(orjson.dumps(status))["counters"]["refused"] == {"admission_closed": 1}


async def test_a_failed_commit_write_is_counted_as_one(tmp_path: Path) -> None:
    """A commit whose directory cannot be written counts a failure, not a commit."""
    core, clock = await prepared_after(ep("r1"))
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    with pytest.raises(ParticipantError):
        await core.commit(
            "c1", deadline_ts=clock.now() + 30, checkpoint_dir=str(blocked), episode_ids=None
        )
    counters = (await core.status())["counters"]
    assert (counters["commits"], counters["commit_failures"]) == (0, 1)
