"""The engine's stateful property test again, with every control call over real HTTP.

Same machine, rules and invariants as ``test_engine_stateful.py``; only the
deployments differ: their participants are served by uvicorn on 127.0.0.1
(ephemeral ports) through the FastAPI routes, and the coordinator reaches
them with httpx, while the same fault plan is applied. A reduced profile
keeps it to well under a minute.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import test_engine_stateful as engine
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from support import Deployment, LoopbackHttp

REDUCED = settings(
    max_examples=int(os.environ.get("ENVCKPT_HTTP_EXAMPLES", "20")),
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass
class HttpDeployment(Deployment):
    """A ``Deployment`` whose control calls cross uvicorn, FastAPI and httpx."""

    http: bool = True


def test_engine_machine_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random snapshots, faults, crashes and restores keep every invariant over HTTP."""
    monkeypatch.setattr(engine, "Deployment", HttpDeployment)
    before = LoopbackHttp.delivered
    run_state_machine_as_test(engine.EngineMachine, settings=REDUCED)
    assert LoopbackHttp.delivered > before  # the calls really crossed HTTP
