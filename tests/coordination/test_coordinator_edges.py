"""Edges of envckpt.coordination.coordinator the mutation campaign found untested.

Written against the coordinator's public calls over real participant cores:
the operation a failure names, the call seconds a prepare and a restore
report, the warnings a failed restore cleanup leaves (logger, event,
failures), the protocol codes a merged resume error keeps, and what a
transport that answers something other than a reply is reported as.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.transport import ControlReply
from envckpt.coordination.types import Participants, call_seconds
from envckpt.errors import CoordinationError

from helpers.participant_doubles import Cluster, RecordingTransport, Sent, Turn, ep

SCOPE = [ep("r1"), ep("r2", 1)]


async def committed(tmp_path: Path) -> Cluster:
    """A cluster that ran SCOPE everywhere and committed it as c1 in ``tmp_path``."""
    cluster = Cluster()
    participants = await cluster.coordinator.discover()
    for episode in SCOPE:
        await cluster.run_everywhere(episode, turn=2)
    result = await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    assert result.prepared
    await cluster.coordinator.commit(
        participants, "c1", str(tmp_path), SCOPE, deadline_ts=cluster.deadline()
    )
    await cluster.coordinator.resume(participants, "c1", deadline_ts=cluster.deadline())
    return cluster


# ------------------------------------------------------------------ discover


async def test_a_deployment_without_a_model_fails_as_a_discover_error() -> None:
    """No policy model among the participants: the error is discover's."""
    cluster = Cluster(kinds=(("agent", "agent", "export_restore"),))
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.discover()
    assert caught.value.operation == "discover"
    assert set(caught.value.failures) == {"deployment"}


# ------------------------------------------------------------------- prepare


async def test_a_prepare_says_false_when_blocked_and_times_every_call_when_prepared() -> None:
    """A blocked prepare is ``prepared is False``; a full one times every participant."""
    cluster = Cluster()
    participants = await cluster.coordinator.discover()
    turn = await Turn.start(cluster.cores["agent-a"], ep("r1"))
    blocked = await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    assert blocked.prepared is False
    await turn.finish()
    result = await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    assert result.prepared is True
    assert set(result.seconds) == set(cluster.cores)


async def test_call_seconds_are_each_call_s_own_duration(tmp_path: Path) -> None:
    """Each participant's commit seconds lie between 0 and the whole fan-out's duration."""
    cluster = Cluster()
    participants = await cluster.coordinator.discover()
    await cluster.run_everywhere(ep("r1"))
    await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    started = time.perf_counter()
    replies = await cluster.coordinator.commit(
        participants, "c1", str(tmp_path), [ep("r1")], deadline_ts=cluster.deadline()
    )
    whole = time.perf_counter() - started
    seconds = call_seconds(replies)
    assert set(seconds) == set(cluster.cores)
    assert all(0 <= value <= whole for value in seconds.values())


# ------------------------------------------------------------------- restore


async def test_restore_replies_carry_each_participant_s_call_seconds(tmp_path: Path) -> None:
    """A restore's replies say how long each participant's call took."""
    cluster = (await committed(tmp_path)).fresh()
    participants = await cluster.coordinator.discover()
    replies = await cluster.coordinator.restore(
        participants, "rst-1", str(tmp_path), SCOPE, deadline_ts=cluster.deadline()
    )
    assert set(call_seconds(replies)) == set(cluster.cores)


async def test_a_failed_restore_cleanup_warns_of_its_retire_and_its_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, restored_structlog: None
) -> None:
    """Restore, cleanup retire and cleanup resume all fail: the restore's error is raised
    and envckpt.coordinator warns once for the retire and once for the resume, naming who."""
    cluster = (await committed(tmp_path)).fresh()
    participants = await cluster.coordinator.discover()
    cluster.faults.add("error", server="tools", route="restore")
    cluster.faults.add("unreachable", server="env", route="retire")
    cluster.faults.add("unreachable", server="agent-a", route="resume")
    caplog.set_level(logging.WARNING, logger="envckpt")
    structlog.reset_defaults()  # unconfigured: envckpt's events go to stdlib logging
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.restore(
            participants, "rst-1", str(tmp_path), SCOPE, deadline_ts=cluster.deadline()
        )
    assert caught.value.operation == "restore" and set(caught.value.failures) == {"tools"}
    warnings = [r for r in caplog.records if r.name.startswith("envckpt")]
    assert [(r.name, r.levelno) for r in warnings] == [
        ("envckpt.coordinator", logging.WARNING),
        ("envckpt.coordinator", logging.WARNING),
    ]
    retire, resume = (r.envckpt for r in warnings)  # type: ignore[attr-defined]
    assert retire["event"] == "restore cleanup: retire failed"
    assert set(retire["failures"]) == {"env"} and "unreachable" in retire["failures"]["env"]
    assert resume["event"] == "restore cleanup: resume failed"
    assert set(resume["failures"]) == {"agent-a"}
    assert "unreachable" in resume["failures"]["agent-a"]


# -------------------------------------------------------------------- resume


async def test_a_merged_resume_error_keeps_every_protocol_code() -> None:
    """Every stage refusing a resume of another checkpoint: one error with each one's code."""
    cluster = Cluster()
    participants = await cluster.coordinator.discover()
    await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.resume(participants, "c2", deadline_ts=cluster.deadline())
    assert caught.value.operation == "resume"
    assert caught.value.codes == {name: "checkpoint_conflict" for name in cluster.cores}


# ----------------------------------------------------------------- transport


class AnswersGarbage(RecordingTransport):
    """Real cores behind it, but ``tools`` answers its renew with a bare string."""

    async def answer(self, sent: Sent) -> ControlReply:
        if sent.server == "tools" and sent.route == "renew":
            return "garbage"  # type: ignore[return-value]
        return await super().answer(sent)


async def test_a_transport_result_that_is_no_reply_is_a_named_failure() -> None:
    """A transport answering something other than a ``ControlReply`` fails that member."""
    cluster = Cluster()
    coordinator = Coordinator(AnswersGarbage(cluster.inner), clock=cluster.clock)
    participants: Participants = await coordinator.discover()
    await coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    with pytest.raises(CoordinationError) as caught:
        await coordinator.renew(participants, "c1", deadline_ts=cluster.deadline())
    failures: dict[str, Any] = dict(caught.value.failures)
    assert failures == {"tools": "unexpected transport result 'garbage'"}
