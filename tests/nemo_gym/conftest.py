"""Fixtures of the nemo_gym tests: one shared real deployment (processes), started once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.http_deployment import TOKEN


@pytest.fixture(scope="session")
def shared_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running deployment with checkpointable and upstream agents side by side."""
    pytest.importorskip("responses_api_agents.simple_agent.app")
    from envckpt.nemo_gym.settings import write_token_file

    from helpers.nemo_gym_deployment import launch_shared

    directory = tmp_path_factory.mktemp("shared-deployment")
    token_file = write_token_file(directory / "token", TOKEN)
    deployment = launch_shared(directory, token_file)
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture
def shared_dir(shared_deployment: Any) -> Path:
    directory: Path = shared_deployment.run_dir.parent
    return directory
