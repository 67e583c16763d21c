"""A resolved nemo-gym global config, as ``ng_run`` hands its servers (for the HTTP tests)."""

from __future__ import annotations

from typing import Any


def realistic_config(ports: dict[str, int] | None = None) -> dict[str, Any]:
    """A resolved nemo-gym global config, shaped like what ``ng_run`` hands its servers."""
    port = {"policy_model": 41001, "math": 41002, "agent": 41003, "judge": 41004, "env": 41005}
    port.update(ports or {})
    return {
        "config_paths": [
            "responses_api_models/vllm_model/configs/vllm_model.yaml",
            "resources_servers/math_with_judge/configs/math_with_judge.yaml",
        ],
        "head_server": {"host": "127.0.0.1", "port": 11000},
        "dry_run": False,
        "default_host": "127.0.0.1",
        "disallowed_ports": [11000],
        "policy_base_url": "http://10.0.0.9:8000/v1",
        "policy_model_name": "Qwen/Qwen3-8B",
        "token_id_capture": {"enabled": False},
        "policy_model": {
            "responses_api_models": {
                "vllm_model": {
                    "entrypoint": "app.py",
                    "base_url": "http://10.0.0.9:8000/v1",
                    "model": "Qwen/Qwen3-8B",
                    "host": "127.0.0.1",
                    "port": port["policy_model"],
                }
            }
        },
        "math_with_judge": {
            "resources_servers": {
                "math_with_judge": {
                    "entrypoint": "app.py",
                    "domain": "math",
                    "judge_model_server": {"type": "responses_api_models", "name": "judge_model"},
                    "host": "127.0.0.1",
                    "port": port["math"],
                }
            }
        },
        "math_with_judge_simple_agent": {
            "responses_api_agents": {
                "simple_agent": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": "math_with_judge"},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                    "datasets": [
                        {
                            "name": "train",
                            "type": "train",
                            "jsonl_fpath": "data/train.jsonl",
                            "license": "Apache 2.0",
                        }
                    ],
                    "host": "127.0.0.1",
                    "port": port["agent"],
                }
            }
        },
        "judge_model": {
            "responses_api_models": {
                "openai_model": {
                    "entrypoint": "app.py",
                    "host": "127.0.0.1",
                    "port": port["judge"],
                }
            }
        },
        "math_env": {
            "environment_servers": {
                "legacy_agent": {
                    "entrypoint": "app.py",
                    "agent_server": {
                        "type": "responses_api_agents",
                        "name": "math_with_judge_simple_agent",
                    },
                    "host": "127.0.0.1",
                    "port": port["env"],
                }
            }
        },
    }
