"""Tests of the participant's status reply."""

from __future__ import annotations

from envckpt.participant.core import ParticipantCore
from envckpt.participant.model_calls import ModelCallPolicy, ModelCalls
from envckpt.participant.status import status_document

from helpers.participant_doubles import JsonStateHooks

GYM_FIELDS = {
    "kind",
    "instance",
    "phase",
    "checkpoint_id",
    "lease_expires_at",
    "retired_rollouts",
    "report",
}


def test_status_has_gyms_fields_and_envckpts() -> None:
    """Gym's fields, plus mode, server_name, served_traffic, capabilities; no model_calls."""
    core = ParticipantCore(server_name="agent", kind="agent", hooks=JsonStateHooks("agent"))
    document = status_document(core)
    assert set(document) == GYM_FIELDS | {"mode", "server_name", "served_traffic", "capabilities"}
    assert document["phase"] == "idle" and document["report"]["ready"] is True


def test_a_policy_models_status_shows_its_model_call_policy() -> None:
    """model_calls: the policy, the wait share, calls in flight and refused so far."""
    calls = ModelCalls(ModelCallPolicy.REFUSE)
    core = ParticipantCore(
        server_name="policy", kind="model", hooks=JsonStateHooks("model"), model_calls=calls
    )
    document = status_document(core)
    assert document["model_calls"] == {
        "policy": "refuse",
        "wait_share": 0.5,
        "in_flight": 0,
        "refused": 0,
    }
