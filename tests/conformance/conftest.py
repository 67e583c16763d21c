"""Fixtures of the conformance suite: the participants under test, one test per (participant, row).

By default the suite starts envckpt's own servers as processes (three
deployments of ``python -m envckpt.sim.server``: fast, slow, and one with a
restart_only tool server) and checks their model, agent and resources
participants. With ``--base-url`` (options in tests/conftest.py) it checks
those participants instead::

    pytest tests/conformance --base-url model=http://127.0.0.1:8001 \\
        --base-url agent=http://127.0.0.1:8002 --token "$TOKEN"

``--sim-workers N`` runs envckpt's own servers with N uvicorn workers each
(``test_workers.py`` does that with 4, protocol profile).

Checkpoint directories are made under pytest's temporary directory, so the
participants must see this machine's filesystem at the same paths.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conformance.target import Participant, external_participants, own_participants, parse_base_urls

OWN = ("model", "agent", "resources", "resources@restart_only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "participant_name" in metafunc.fixturenames:
        base_urls = metafunc.config.getoption("--base-url")
        names = [name for name, _ in parse_base_urls(base_urls)] if base_urls else list(OWN)
        metafunc.parametrize("participant_name", names, scope="session")


@pytest.fixture(scope="session")
def conformance_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conformance")


@pytest.fixture(scope="session")
def participants(
    pytestconfig: pytest.Config, conformance_dir: Path
) -> Iterator[dict[str, Participant]]:
    base_urls: list[str] = pytestconfig.getoption("--base-url")
    profile = pytestconfig.getoption("--conformance-profile")
    routes = pytestconfig.getoption("--data-routes")
    with httpx.Client(timeout=60.0) as http:
        if not base_urls:
            workers = pytestconfig.getoption("--sim-workers")
            with own_participants(conformance_dir, http, workers=workers) as own:
                for participant in own.values():
                    participant.profile = profile or "envckpt"
                    if participant.slow is not None:
                        participant.slow.profile = participant.profile
                    if routes == "none":
                        participant.driver = None
                yield own
            return
        token = pytestconfig.getoption("--token") or os.environ.get("ENVCKPT_CONFORMANCE_TOKEN")
        if not token:
            raise pytest.UsageError("--base-url needs --token (or $ENVCKPT_CONFORMANCE_TOKEN)")
        yield external_participants(
            base_urls, token, profile or "protocol", http, sim_routes=routes == "sim"
        )


@pytest.fixture
def participant(participants: dict[str, Participant], participant_name: str) -> Participant:
    return participants[participant_name]
