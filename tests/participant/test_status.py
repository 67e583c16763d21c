"""Tests for envckpt.participant.status: the status reply keeps the protocol's keys."""

from __future__ import annotations

from envckpt.clock import FakeClock
from envckpt.participant.core import ParticipantCore
from envckpt.participant.status import status_reply

from helpers.participant_doubles import START, JsonStateHooks

PROTOCOL_KEYS = {
    "kind",
    "mode",
    "instance",
    "phase",
    "checkpoint_id",
    "lease_expires_at",
    "retired_rollouts",
    "report",
}


def test_the_reply_has_every_protocol_key_and_envckpts_own() -> None:
    """protocol.md's status keys are all there; counters and capabilities come beside them."""
    core = ParticipantCore(
        server_name="tool",
        kind="resources",
        hooks=JsonStateHooks("resources"),
        clock=FakeClock(START),
    )
    reply = status_reply(core)
    assert set(reply) >= PROTOCOL_KEYS
    assert (reply["kind"], reply["phase"], reply["checkpoint_id"]) == ("resources", "idle", None)
    assert reply["counters"]["admitted"] == 0
    assert set(reply) - PROTOCOL_KEYS == {
        "server_name",
        "served_traffic",
        "capabilities",
        "counters",
    }
