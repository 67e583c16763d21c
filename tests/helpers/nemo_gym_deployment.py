"""One real nemo-gym deployment in processes, shared by the agent tests.

Both example resources servers, the scripted policy behind ``vllm_model``,
and each agent twice: checkpointable (hosted) and nemo-gym's own (plain), so
a test can run a task through both and compare::

    deployment = launch_shared(tmp_path, token_file)   # launcher.launch, ~8 processes
    deployment.urls["counter_agent"], deployment.urls["plain_counter_agent"]
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from envckpt.nemo_gym import examples
from envckpt.nemo_gym.launcher import Deployment, launch

AGENTS = {
    "counter_agent": ("simple_agent", "counter"),
    "plain_counter_agent": ("simple_agent", "counter"),
    "multi_agent": ("gymnasium_agent", "multi_turn"),
    "plain_multi_agent": ("gymnasium_agent", "multi_turn"),
}
POLICY_LATENCY = 0.05


def shared_config(audit_dir: Path) -> dict[str, Any]:
    config = examples.counter_config(agent="counter_agent", resources="counter")
    multi = examples.multi_turn_config(agent="multi_agent", resources="multi_turn")
    config["multi_turn"] = multi["multi_turn"]
    config["multi_agent"] = multi["multi_agent"]
    config["plain_counter_agent"] = config["counter_agent"]
    config["plain_multi_agent"] = multi["multi_agent"]
    config["envckpt"] = {
        "scripted_policy": [examples.POLICY],
        "scripted_policy_latency": POLICY_LATENCY,
        "plain_servers": ["plain_counter_agent", "plain_multi_agent"],
        "audit_dir": str(audit_dir),
        # Tests commit under pytest's temporary directories.
        "checkpoint_root": tempfile.gettempdir(),
    }
    config["token_id_capture"]["dir"] = str(audit_dir.parent / "tokens")
    return config


def launch_shared(directory: Path, token_file: Path) -> Deployment:
    return launch(
        shared_config(directory / "audit"), run_dir=directory / "run", token_file=token_file
    )
