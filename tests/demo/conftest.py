"""Fixtures of the demo tests: one real ``envckpt demo --nemo-gym`` run, shared by its tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.demo_cli import run_main


@dataclass(frozen=True)
class DemoRun:
    """A finished demo run: its exit code, what it printed, and its directory."""

    code: int
    out: str
    err: str
    directory: Path


@pytest.fixture(scope="session")
def nemo_gym_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """``envckpt demo --nemo-gym`` with its defaults (2 kills: after a snapshot, in a restore)."""
    pytest.importorskip("responses_api_agents.simple_agent.app")
    directory = tmp_path_factory.mktemp("nemo-gym-demo")
    code, out, err = run_main(["--nemo-gym", "--seed", "1", "--dir", str(directory)])
    return DemoRun(code, out, err, directory)
