"""The scripts in examples/ run as a user runs them, and say what they showed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python examples/SCRIPT ARGS`` in a fresh process; its output and exit code."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        check=False,
    )


def output_of(script: str, *, needs: str, missing: str) -> str:
    """What ``script`` printed, once it exited 0; the test is skipped, saying ``missing``,
    when the module it ``needs`` is not installed."""
    if importlib.util.find_spec(needs) is None:
        pytest.skip(missing)
    done = run(script)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_trainer_loop_snapshots_crashes_and_restores_over_http(tmp_path: Path) -> None:
    """Run 1 crashes holding rollouts; run 2 restores, continues them and finishes all eight."""
    done = run("trainer_over_http.py", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("run 1: crashed after")
    assert "rollouts continued at their saved turn, 8 of 8 finished" in lines[1]
    assert lines[-1] == "every transcript equals an uninterrupted run"
    assert any(line.startswith("snapshot rollouts-step") for line in lines)
    assert (tmp_path / "job" / "snapshots").is_dir() and "Traceback" not in done.stderr


@pytest.mark.gym
def test_the_routes_mounted_on_a_nemo_gym_server_take_a_checkpoint() -> None:
    """The counter's session is discovered, committed, and its count is in the records."""
    shown = output_of(
        "mount_on_nemo_gym.py",
        needs="resources_servers",
        missing="nemo-gym's example servers are not installed",
    )
    assert "participants: [('policy_model', 'model'), ('counter', 'resources')]" in shown
    assert "committed episodes: ['r1']" in shown
    assert '"counter": 7' in shown


@pytest.mark.ray
def test_gym_instances_in_ray_actors_continue_in_replacement_actors() -> None:
    """Four rollouts snapshotted in actors finish in new actors, as if never interrupted."""
    shown = output_of("ray_instances.py", needs="ray", missing="ray is not installed")
    assert "snapshot: 4 rollouts saved mid-flight" in shown
    assert shown.count("transcript as if never interrupted") == 4
