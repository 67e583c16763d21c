"""Tests for envckpt.participant.status: the status reply keeps the protocol's keys."""

from __future__ import annotations

from envckpt.clock import FakeClock
from envckpt.participant.core import ParticipantCore
from envckpt.participant.model_calls import ModelCallPolicy, ModelCalls
from envckpt.participant.status import status_reply

from conformance.cases import KEYS
from helpers.participant_doubles import START, JsonStateHooks

# protocol.md's status keys: those the conformance table requires of any implementation,
# and the mode.
PROTOCOL_KEYS = {*KEYS["status"], "mode"}


def test_the_reply_has_every_protocol_key_and_envckpts_own() -> None:
    """protocol.md's status keys are all there; counters and capabilities come beside
    them, and no model_calls on a participant that is not a policy model."""
    core = ParticipantCore(
        server_name="tool",
        kind="resources",
        hooks=JsonStateHooks("resources"),
        clock=FakeClock(START),
    )
    reply = status_reply(core)
    assert set(reply) >= PROTOCOL_KEYS
    assert (reply["kind"], reply["phase"], reply["checkpoint_id"]) == ("resources", "idle", None)
    assert reply["report"]["ready"] is True
    assert reply["counters"]["admitted"] == 0
    assert set(reply) - PROTOCOL_KEYS == {
        "server_name",
        "served_traffic",
        "capabilities",
        "counters",
    }


def test_a_policy_models_status_shows_its_model_call_policy() -> None:
    """model_calls: the policy, the wait share, calls in flight and refused so far."""
    calls = ModelCalls(ModelCallPolicy.REFUSE)
    core = ParticipantCore(
        server_name="policy", kind="model", hooks=JsonStateHooks("model"), model_calls=calls
    )
    reply = status_reply(core)
    assert reply["model_calls"] == {
        "policy": "refuse",
        "wait_share": 0.5,
        "in_flight": 0,
        "refused": 0,
    }
