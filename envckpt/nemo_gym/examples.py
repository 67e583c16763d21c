"""Two ready-made deployments of nemo-gym's own servers on the scripted policy, and their tasks.

    counter_config()       # simple_agent + vllm_model + example_session_state_mgmt
    multi_turn_config()    # gymnasium_agent + vllm_model + example_multi_turn_gymnasium
    counter_tasks(6), multi_turn_tasks(4)    # /run bodies in nemo-gym's dataset format
    example_job(directory, counters=6, multi_turns=4, snapshot_every=0.3)  # a JobSpec of both

Every server is nemo-gym's own class; only the policy endpoint behind
``vllm_model`` is scripted (``scripted_policy.py``), so rewards are
deterministic: a counter task is rewarded 1.0 when every increment was
applied exactly once, a multi-turn task when the last follow-up was answered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envckpt.nemo_gym.job_spec import DeploymentSpec, JobSpec

POLICY = "policy_model"
COUNTER_TOOLS = [
    {
        "type": "function",
        "name": "increment_counter",
        "description": "",
        "parameters": {
            "type": "object",
            "properties": {"count": {"type": "integer", "description": ""}},
            "required": ["count"],
            "additionalProperties": False,
        },
        "strict": True,
    },
    {
        "type": "function",
        "name": "get_counter_value",
        "description": "",
        "parameters": {
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": False,
        },
        "strict": True,
    },
]
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")


def policy_model_entry() -> dict[str, Any]:
    """``vllm_model`` with token ids on, pointed at the scripted policy by the launcher."""
    return {
        "responses_api_models": {
            "vllm_model": {
                "entrypoint": "app.py",
                "base_url": "http://scripted-policy.invalid/v1",
                "api_key": "scripted",
                "model": "envckpt-scripted-policy",
                "return_token_id_information": True,
                "uses_reasoning_parser": False,
            }
        }
    }


def _common() -> dict[str, Any]:
    return {
        "envckpt": {"scripted_policy": [POLICY]},
        # Token capture for this agent: every model call leaves a token row.
        "token_id_capture": {"enabled": True, "all_agents": True},
        POLICY: policy_model_entry(),
    }


def _deployment(
    *,
    agent: str,
    agent_class: str,
    resources: str,
    resources_class: str,
    domain: str,
    **agent_settings: Any,
) -> dict[str, Any]:
    """The scripted policy, one resources server and the agent that uses both."""
    config = _common()
    config[resources] = {
        "resources_servers": {resources_class: {"entrypoint": "app.py", "domain": domain}}
    }
    config[agent] = {
        "responses_api_agents": {
            agent_class: {
                "entrypoint": "app.py",
                "resources_server": {"type": "resources_servers", "name": resources},
                "model_server": {"type": "responses_api_models", "name": POLICY},
                **agent_settings,
            }
        }
    }
    return config


def counter_config(*, agent: str = "counter_agent", resources: str = "counter") -> dict[str, Any]:
    return _deployment(
        agent=agent,
        agent_class="simple_agent",
        resources=resources,
        resources_class="example_session_state_mgmt",
        domain="agent",
    )


def multi_turn_config(
    *, agent: str = "multi_turn_agent", resources: str = "multi_turn"
) -> dict[str, Any]:
    return _deployment(
        agent=agent,
        agent_class="gymnasium_agent",
        resources=resources,
        resources_class="example_multi_turn_gymnasium",
        domain="knowledge",
        max_steps=10,
    )


def counter_task(increments: list[int], *, initial: int) -> dict[str, Any]:
    prompt = " then ".join(f"add {n}" for n in increments) + " then get the count"
    return {
        "responses_create_params": {
            "input": [{"role": "user", "content": prompt}],
            "tools": COUNTER_TOOLS,
        },
        "initial_count": initial,
        "expected_count": initial + sum(increments),
    }


def counter_tasks(count: int) -> list[dict[str, Any]]:
    return [
        counter_task([index % 5 + 1, index % 3 + 2, index % 4 + 1][: 2 + index % 2], initial=index)
        for index in range(count)
    ]


def multi_turn_task(words: list[str]) -> dict[str, Any]:
    return {
        "responses_create_params": {
            "input": [{"role": "user", "content": f"Say the word: {words[0]}"}]
        },
        "follow_ups": [f"Say the word: {word}" for word in words[1:]],
        "expected_answer": words[-1],
    }


def multi_turn_tasks(count: int) -> list[dict[str, Any]]:
    return [
        multi_turn_task([WORDS[(index + k) % len(WORDS)] for k in range(2 + index % 3)])
        for index in range(count)
    ]


def example_job(directory: Path, *, counters: int, multi_turns: int, **settings: Any) -> JobSpec:
    """A job over both deployments: ``counters`` counter rollouts (``count-00``, ...) and
    ``multi_turns`` multi-turn ones (``talk-00``, ...); ``settings``: JobSpec's other fields."""
    tasks = [
        {"rollout_id": f"count-{i:02d}", "shard": "counter", "task": task}
        for i, task in enumerate(counter_tasks(counters))
    ]
    tasks += [
        {"rollout_id": f"talk-{i:02d}", "shard": "multi", "task": task}
        for i, task in enumerate(multi_turn_tasks(multi_turns))
    ]
    return JobSpec(
        directory=directory,
        deployments=(
            DeploymentSpec("counter", counter_config(), agent="counter_agent"),
            DeploymentSpec("multi", multi_turn_config(), agent="multi_turn_agent"),
        ),
        tasks=tuple(tasks),
        **settings,
    )


def planned_increments(task: dict[str, Any]) -> list[int]:
    """The increments a counter task asks for, in order (what an audit expects)."""
    import re

    prompt = task["responses_create_params"]["input"][0]["content"]
    return [int(n) for n in re.findall(r"\badd\s+(-?\d+)", prompt)]
