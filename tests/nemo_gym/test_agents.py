"""Tests of the /run override's body handling."""

from __future__ import annotations

import pytest

pytest.importorskip("responses_api_agents.simple_agent.app")

from responses_api_agents.simple_agent.app import SimpleAgentRunRequest

from envckpt.nemo_gym.agents import run_body


def test_run_body_keeps_the_rollout_identity() -> None:
    """The excluded _ng_rollout_id field is put back; extras such as the attempt index stay."""
    body = SimpleAgentRunRequest.model_validate(
        {
            "responses_create_params": {"input": "hi"},
            "_ng_rollout_id": "r1",
            "_ng_attempt_index": 2,
            "expected_count": 3,
        }
    )
    raw = run_body(body)
    assert raw["_ng_rollout_id"] == "r1"
    assert raw["_ng_attempt_index"] == 2
    assert raw["expected_count"] == 3
    assert SimpleAgentRunRequest.model_validate(raw).capture_rollout_id == "r1"
