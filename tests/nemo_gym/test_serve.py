"""Tests of how a server process finds the class nemo-gym would run for its config entry."""

from __future__ import annotations

import pytest

pytest.importorskip("responses_api_agents.simple_agent.app")

from resources_servers.blackjack.app import BlackjackEnv
from responses_api_agents.gymnasium_agent.app import GymnasiumAgent
from responses_api_agents.simple_agent.app import SimpleAgent
from responses_api_models.vllm_model.app import VLLMModel

from envckpt.nemo_gym import examples
from envckpt.nemo_gym.serve import plain, server_class_for, server_entry


def test_the_entrypoint_module_names_the_class() -> None:
    """Each example entry resolves to nemo-gym's own class for it."""
    counter, multi = examples.counter_config(), examples.multi_turn_config()
    assert server_class_for(counter, "counter_agent") is SimpleAgent
    assert server_class_for(counter, "policy_model") is VLLMModel
    assert server_class_for(multi, "multi_turn_agent") is GymnasiumAgent
    assert server_class_for(counter, "counter").__name__ == "StatefulCounterResourcesServer"
    assert server_entry(counter, "counter")[:2] == (
        "resources_servers",
        "example_session_state_mgmt",
    )


def test_an_override_names_the_class() -> None:
    """envckpt.server_classes picks a class explicitly."""
    config = {
        **examples.multi_turn_config(),
        "envckpt": {
            "server_classes": {"multi_turn": "resources_servers.blackjack.app:BlackjackEnv"}
        },
    }
    assert server_class_for(config, "multi_turn") is BlackjackEnv


def test_not_a_server_entry() -> None:
    """A setting is not a server."""
    with pytest.raises(ValueError, match="not a nemo-gym server entry"):
        server_class_for({"x": {"y": 1}}, "x")


def test_plain_keeps_the_class_and_adds_nothing_but_readiness() -> None:
    """The plain subclass keeps the name, drops Ray and does not host a participant."""
    sub = plain(SimpleAgent)
    assert sub.__name__ == "SimpleAgent" and sub.ray_enabled is False
    assert "envckpt" not in vars(sub)
