"""Shared pytest configuration: hypothesis profiles, xdist scheduling, and the conformance
suite's options.

Hypothesis runs the ``quick`` profile by default (``make test``: 25 examples where a
test does not set its own count) and ``thorough`` under
``ENVCKPT_HYPOTHESIS_PROFILE=thorough`` (``make verify``: hypothesis' 100). Tests
that set ``max_examples`` scale it with ``helpers.examples.examples``. With the
``CI`` environment variable set the chosen profile is also derandomized (a
failure reproduces on the next run), has no per-example deadline (shared runners
stall), and prints the failing example's blob for ``@reproduce_failure``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, settings

from helpers.examples import THOROUGH, thorough

settings.register_profile("quick", max_examples=25)
settings.register_profile(THOROUGH, max_examples=100)
PROFILE = THOROUGH if thorough() else "quick"
settings.register_profile(
    "CI",
    parent=settings.get_profile(PROFILE),
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("CI" if os.environ.get("CI") else PROFILE)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Options of the conformance suite (tests/conformance); registered here, in the
    root conftest, because pytest reads ``pytest_addoption`` only from conftests
    loaded at startup."""
    group = parser.getgroup("conformance", "checkpoint protocol conformance suite")
    group.addoption(
        "--base-url",
        action="append",
        default=[],
        metavar="[KIND=]URL",
        help="a participant to check instead of envckpt's own servers; repeat per "
        "participant (KIND=URL names it, e.g. model=http://127.0.0.1:8001; a bare URL "
        "is named by its status kind)",
    )
    group.addoption(
        "--token",
        default=None,
        help="bearer token of the --base-url participants (or $ENVCKPT_CONFORMANCE_TOKEN)",
    )
    group.addoption(
        "--conformance-profile",
        choices=("protocol", "envckpt"),
        default=None,
        help="protocol: only what every implementation must do (default with --base-url); "
        "envckpt: also envckpt's stricter behaviours (default for envckpt's own servers)",
    )
    group.addoption(
        "--data-routes",
        choices=("none", "sim"),
        default=None,
        help="sim: the participants also serve envckpt's simulated Gym data routes, so "
        "rows needing held state or in-flight work run (default: sim for envckpt's own "
        "servers, none with --base-url)",
    )
    group.addoption(
        "--sim-workers",
        type=int,
        default=1,
        metavar="N",
        help="run envckpt's own servers with N uvicorn workers each (python -m "
        "envckpt.sim.server --workers N); ignored with --base-url",
    )


# Transition coverage: every fired transition, by table row and transport
# (tests/transition_coverage; ``--transition-coverage PATH`` writes them).
pytest_plugins = ("transition_coverage.plugin",)


@pytest.fixture
def restored_structlog() -> Iterator[None]:
    """structlog's configuration as it was before the test, afterwards."""
    saved, configured = structlog.get_config(), structlog.is_configured()
    try:
        yield
    finally:
        structlog.configure(**saved)
        if not configured:
            structlog.reset_defaults()


@pytest.fixture(scope="session")
def scraped_demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One real ``envckpt demo --dir D`` (processes), its trainer scraped while it ran;
    shared by the telemetry endpoint's test and the report's (``helpers.scraped_demo``)."""
    from helpers.scraped_demo import run_scraped_demo  # imports fastapi and prometheus_client

    return run_scraped_demo(tmp_path_factory.mktemp("scraped-demo"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (make test) also keeps the files sharing a session's servers on
    one worker (``helpers.shared_servers``); other modes are xdist's own."""
    if config.getoption("dist") != "loadfile":
        return None
    from helpers.shared_servers import SharedServerScheduling  # imports xdist

    return SharedServerScheduling(config, log)
